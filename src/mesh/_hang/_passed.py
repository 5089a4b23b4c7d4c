"""A rank without a dump that its peers' records show got past a call its group waits in.

Rank 4 gave no dump, and its dp group (0, 4) is left at its 1st call, which rank 0 entered.
Rank 6's records show that the tp group (4, 5, 6, 7) completed its 2nd call (rank 6 made a
call after it: on Gloo a call returns once it completed, and NCCL marks it completed), which
needs rank 4; and the other ranks issue that call after the dp call (their order,
:class:`~._why.Order`, asked both ways).  So rank 4 got past the dp call: it did not die or
stall before it.  Either it made the call, or its program went on without it: where every
member with a dump went on after the call too (on Gloo), the call completed (:func:`settled`);
where one of them made no call since, the report says both.

Only dims whose calls every rank orders alike are asked about (not the world group's or a
pipeline's: their stages may differ by design).

A later call shows that a Gloo call completed only if the call blocked.  A call made with
``async_op=True`` returns at once; torch marks its record ``retired`` only once its work has
finished, so a rank's record that is not retired though the rank made later calls may be
such a call, still in flight (:func:`in_flight`; blocking programs' dumps show some too, a
finished call torch had not marked yet).  Where any dump shows one, no later call is taken
as proof here (``blocking=False``): only records marked completed are, which is less precise
on a blocking program's dumps, never wrong.  (One async call that failed, was waited on
and left no other in flight looks retired like a completed one: that, the dumps cannot
tell; docs/hang.md says so.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import attrs

from ._groups import WORLD
from ._hung import GroupState, Hang
from ._records import FlightCall
from ._why import BEFORE, PAST, PIPELINE_DIMS, Order

__all__ = ["Passed", "got_past", "in_flight", "settled"]


@attrs.frozen
class Passed:
    """``rank`` (no dump) got past the pending call of ``state``: ``later``'s ``call``
    completed, which needs it and which the other ranks issue after that one; ``by``: a rank
    whose records show it completed."""

    rank: int
    state: GroupState
    later: GroupState
    call: FlightCall
    by: int


def in_flight(hang: Hang) -> tuple[tuple[int, FlightCall], ...]:
    """``(rank, call)`` for each Gloo call still in flight when its rank dumped, though the
    rank had made later calls (made with ``async_op=True``, or not marked yet): not retired,
    not its last."""
    return tuple((rank, c) for rank, calls in sorted(hang.calls.items()) for c in calls[:-1]
                 if c.retired is False and c.backend == "gloo")


def got_past(hang: Hang, order: Order, blocking: bool = True
             ) -> dict[tuple[str, int], Passed]:
    """``(group name, rank)`` -> the evidence, for each rank without a dump that got past the
    pending call of a stuck group of its; ``blocking``: whether a later Gloo call shows that
    an earlier one completed (no dump shows a call :func:`in_flight`)."""
    done = _completed(hang, blocking)
    mine: dict[int, list[GroupState]] = defaultdict(list)
    for s in hang.states:
        if _ordered(s) and s.name in done:
            for r in s.no_dump:
                mine[r].append(s)
    found = {}
    for s in hang.states:
        if not (s.hung and s.desync is None and _ordered(s)):
            continue
        for x in s.no_dump:
            for g in mine.get(x, ()):
                call, by = done[g.name]
                if g.name != s.name and order(s.group, s.seq, g.group, call.seq) == PAST \
                        and order(g.group, call.seq, s.group, s.seq) == BEFORE:
                    found[(s.name, x)] = Passed(x, s, g, call, by)
                    break
    return found


def settled(hang: Hang, passed: Mapping[tuple[str, int], Passed], blocking: bool = True
            ) -> tuple[Hang, tuple[GroupState, ...]]:
    """``hang`` with its Gloo groups marked completed where every member without a dump got
    past the pending call (``passed``) and every member with one made a call since (a Gloo
    call returns once it completed: only with ``blocking``), or where the pending call is one
    that ``passed`` rests on (it completed); and those groups."""
    shown = {p.later.name for p in passed.values() if p.call.seq == p.later.seq}
    moved = tuple(s for s in hang.states if s.hung and not s.never and s.desync is None
                  and s.call.backend == "gloo" and (s.name in shown or (
                      blocking and all((s.name, x) in passed for x in s.no_dump)
                      and all(_went_on(hang, r, s) for r in s.entered))))
    names = {s.name for s in moved}
    return attrs.evolve(hang, states=tuple(attrs.evolve(s, done=True) if s.name in names else s
                                           for s in hang.states)), moved


def _ordered(s: GroupState) -> bool:
    return s.group.dim not in (WORLD, *PIPELINE_DIMS)


def _went_on(hang: Hang, rank: int, s: GroupState) -> bool:
    """Whether ``rank`` made a call after ``s``'s pending one."""
    name, newest = hang.positions[rank]
    return name != s.name or newest.seq > s.seq


def _completed(hang: Hang, blocking: bool) -> dict[str, tuple[FlightCall, int]]:
    """Per group name, its latest call that a dump shows completed (marked so, or, with
    ``blocking``, on Gloo followed by another call of the rank's), and that rank."""
    out: dict[str, tuple[FlightCall, int]] = {}
    for rank, calls in hang.calls.items():
        for c in calls:
            if (c.state == "completed" or (blocking and c.backend == "gloo" and
                                           c is not calls[-1])) and \
                    (c.group not in out or out[c.group][0].seq < c.seq):
                out[c.group] = (c, rank)
    return out
