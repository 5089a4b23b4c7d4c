"""A skip hidden behind another rank's hang: a rank whose group never reached a call that
the rank itself went past.

Rank 6 skips its 2nd dp call and waits at its 3rd tp call, while rank 2, its dp partner,
is stuck behind a stalled rank 1 and never reached its own 2nd dp call.  The dp group (2, 6)
is not stuck (both members made one dp call), so no group shows the skip; rank 6 only
looks stuck behind its tp peers.  The other ranks' order (:class:`~._why.Order`) tells: the
ranks that made a 2nd dp call made it before their 3rd tp call, and rank 6 waits at its 3rd
tp call with one dp call.  Once the first hang is mended, the skip hangs or scrambles here.

Where the ranks' records tie both ways (a world of 4 ranks, or some dumps only: rank 2 made
its 2nd dp call and not its 3rd tp call, rank 3 the other way round, and no other rank made
either), the dumps cannot tell which rank left the program's order: the rank is named as
``sure=False``, and the report says both readings, when every member of its group gave a
dump (else one without a dump may have made the call: nothing says the group never did).

A rank that waits nowhere (its newest call completed, and it made none since) and that
stopped before its group's next call, which the other ranks make after its newest one (asked
both ways), skipped the program's last call or stalls: it is named as stopped (not on a
pipeline's view, whose stages may wait in a receive that Gloo does not record).

A rank is asked about each of its groups where it is as far as any member (so the group's
next call is one no member made), on the dims whose calls every rank orders alike (not the
world group's or a pipeline's: their stages may differ by design).  The vote is memoized per
question, so a world of ranks at a few places asks a few questions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Set

import attrs

from ._groups import WORLD, PlanGroup
from ._hung import GroupState, Hang
from ._records import FlightCall
from ._why import BEFORE, PAST, PIPELINE_DIMS, Order

__all__ = ["Hidden", "hidden_skips"]


@attrs.frozen
class Hidden:
    """``rank`` went past (or, ``stopped``, stopped before) the ``seq``-th call of ``group``
    (recorded by other ranks as ``call``), which no member of ``group`` made; its newest
    call is ``newest``, on the group whose state is ``at``."""

    rank: int
    group: GroupState
    seq: int
    call: FlightCall
    newest: FlightCall
    at: GroupState
    sure: bool = True  # False: the ranks' records tie both ways on the order of the two calls
    stopped: bool = False  # its newest call comes before this one: it made none since


def hidden_skips(hang: Hang, order: Order, named: Set[int]) -> list[Hidden]:
    """The ranks not ``named`` yet that went past a call no member of their group made."""
    states = {s.name: s for s in hang.states}
    mine: dict[int, list[GroupState]] = defaultdict(list)
    for s in hang.states:
        if s.group.dim not in (WORLD, *PIPELINE_DIMS) and s.desync is None:
            for r in s.entered:
                mine[r].append(s)
    found = []
    for rank, (name, newest) in sorted(hang.positions.items()):
        at = states.get(name)
        if rank in named or at is None or at.group.dim in (WORLD, *PIPELINE_DIMS):
            continue
        for g in mine.get(rank, ()):
            sure = _went_past(order, g.group, g.seq + 1, at.group, newest.seq) \
                if g.name != name else None
            if sure is False and g.no_dump:  # a member without a dump may have made it
                sure = None
            stopped = sure is None and g.name != name and _stopped(order, g, at, newest)
            call = _recorded(hang, g.group, g.seq + 1) if sure is not None or stopped else None
            if call is not None:
                found.append(Hidden(rank, g, g.seq + 1, call, newest, at, sure is not False,
                                    stopped))
                break
    return found


def _stopped(order: Order, g: GroupState, at: GroupState, newest: FlightCall) -> bool:
    """Whether a rank whose newest call (on ``at``) completed stopped before ``g``'s next
    call, which the other ranks make after it (asked both ways), though no member of ``g``
    reached it: it stalls or its program ended, hidden behind the hang (a rank that skips
    its program's last call).  Not on a pipeline's view: a stage waiting in a receive Gloo
    does not record looks the same, and its stages' calls may differ by design."""
    if (at.hung and newest.seq >= at.seq) or _piped(g.group):
        return False
    s, t = g.seq + 1, newest.seq
    return order(g.group, s, at.group, t) == BEFORE and order(at.group, t, g.group, s) == PAST


def _piped(g: PlanGroup) -> bool:
    """Whether ``g``'s view has a pipeline dim."""
    return any(d in PIPELINE_DIMS for d in (g.dim, *(n for n, _ in g.coordinate)))


def _went_past(order: Order, g: PlanGroup, s: int, h: PlanGroup, t: int) -> bool | None:
    """Whether the ranks place call ``s`` on ``g``'s dim before call ``t`` on ``h``'s, asked
    both ways: a rank at ``t`` without ``s`` went past it, and one at ``s`` without ``t``
    stopped before it (with three dumps of four ranks, two ranks that skipped together
    outvote one that did not on the first question only).  False where both questions tie
    and some other rank puts ``s`` first (the dumps cannot tell); None where they do not."""
    first, back = order(g, s, h, t), order(h, t, g, s)
    if first == PAST and back == BEFORE:
        return True
    return False if first is None and back is None and order.votes_past(g, s, h, t) else None


def _recorded(hang: Hang, group: PlanGroup, seq: int) -> FlightCall | None:
    """The ``seq``-th call on ``group``'s dim as some rank recorded it (the program's)."""
    same = {s.name for s in hang.states if (s.group.view, s.group.dim) == (group.view,
                                                                            group.dim)}
    return next((c for calls in hang.calls.values() for c in calls
                 if c.group in same and c.seq == seq), None)

