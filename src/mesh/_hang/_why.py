"""Why a rank never entered a call the other members of its group wait in: the words of
``meshlayout hang``'s causes (:class:`Why`, :class:`Cause`), and the evidence they rest on.

Where a rank's newest call lies against the pending call, in the program every rank runs
(SPMD), is voted by the other ranks' records (:class:`Order`); the clock
(``time_created_ns``) says a rank went on when it made a call after the first member entered
the pending one.  A rank whose newest call comes after the pending call went on without it;
one whose newest call comes before it and that made none since stopped there: a stall, or
the end of its program (the records look alike, and both are said); on Gloo, which records
no point-to-point call, it may wait in a receive whose sender, a pipeline neighbour, is
named as a possible cause.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping

import attrs

from .._core import MeshView, RankStyle, ranks_text
from ._groups import WORLD, PlanGroup
from ._hung import GroupState, Hang
from ._records import FlightCall

__all__ = ["BEFORE", "CYCLE", "NO_DUMP", "NO_DUMP_ONLY", "PAST", "PIPELINE_DIMS", "TAIL", "VOTERS",
           "Cause", "Order", "Why", "at", "cause", "span"]


class Why(str, enum.Enum):
    """Why a rank is at fault in a finding, in one word (the finding's text says it in full)."""

    NO_DUMP = "no dump"  # no dump was given for it: died, hangs elsewhere, or not collected
    NO_CALLS = "no calls"  # its dump holds no collective call
    WENT_ON = "went on"  # its newest call comes after this one in the others' order: it skipped
    WENT_PAST = "went past"  # it waits at a call the others issue after this one
    STOPPED = "stopped"  # it made every call before this one and none since: stalled or ended
    UNSURE = "unsure"  # the dumps cannot tell whether it stopped before this call or went on
    UNSEEN = "unseen"  # went on, unless ranks whose dumps were not given did not come
    CYCLE = "cycle"  # it waits in another stuck group, and no rank is free
    DESYNC = "desync"  # the odd side of a desync

@attrs.frozen
class Cause:
    """Why one rank never entered a group's pending call: in one word and in full, and the
    ranks that may be the cause instead."""

    why: Why
    words: str
    maybe: tuple[int, ...] = ()


CYCLE = Cause(Why.CYCLE, "it waits in another stuck group in turn, and no rank is free: the "
                "ranks wait on each other (calls issued in different orders)")
NO_DUMP_ONLY = Cause(Why.NO_DUMP, "no dump was given for it, and nothing else explains the "
                       "hang: it died, hangs elsewhere, or its dump was not collected (its dump "
                       "would tell which)")
NO_DUMP = Cause(Why.NO_DUMP, "no dump was given for it: it died, hangs elsewhere, or its dump "
                  "was not collected (its dump would tell which)")

PAST, BEFORE = "past", "before"  # the answers of an Order


def cause(x: int, s: GroupState, states: Mapping[str, GroupState],
          positions: Mapping[int, tuple[str, FlightCall]], order: Order,
          unseen: set[str], views: Mapping[str, MeshView]) -> Cause | None:
    """Why ``x`` never entered ``s``'s pending call, when ``x`` is the cause (None: it is
    stuck elsewhere, behind others); ``unseen``: the groups waiting only on hosts whose
    dumps were not given.

    Where ``x``'s newest call lies in the program, against the pending call, is read from
    the other ranks' order (:class:`Order`), else from the clock: a rank that made a call
    after the first member entered the pending one was running while they waited.  A rank
    whose newest call comes after the pending one went on without it; one whose newest call
    comes before it and that made none since stopped there (a stall, or its program ended:
    the records look alike); where neither tells, the report says both."""
    if x in s.no_dump:
        return NO_DUMP
    if x not in positions:
        return Cause(Why.NO_CALLS, "it recorded no call at all")
    name, call = positions[x]
    where = states.get(name)
    group = where.group.describe() if where else repr(name)
    there = f"{call.describe()} on {group}, seq {call.seq}{at(call)}"
    done = where is None or not where.hung or call.seq < where.seq
    if where is not None and where.name in unseen:
        return Cause(Why.UNSEEN, f"its newest call ({there}) was entered by every rank there "
                     f"with a dump: unless {ranks_text(where.no_dump, RankStyle.WHO)} (no dump "
                     "given) did not come, it completed and its program went on without this call")
    side = order(s.group, s.seq, where.group, call.seq) if where is not None else None
    late = s.entered_ns and call.created_ns > s.entered_ns
    after = f"{span(call.created_ns - s.entered_ns)} after the first rank entered this call"
    clock = f", {after}" if late else ""
    disputed = where is not None and order.disputed(s.group, s.seq, where.group, call.seq)
    if side is None and late and not disputed:
        return _by_clock(there, after, done)
    if side == PAST:
        return Cause(Why.WENT_ON, f"its newest call ({there}) completed{clock}, and the other "
                     "ranks issue it after this one: its program went on without this call") \
            if done else Cause(Why.WENT_PAST, f"it went past it: it waits at {there}, which "
                               f"the other ranks there issued after this call{clock}")
    if not done:
        return _waits_unsure(there) if side is None and where is not None and \
            order.one_says_past(s.group, s.seq, where.group, call.seq) else None
    if side == BEFORE:
        return _stopped(x, s, call, there, views)
    peers = _pipeline_peers(x, s.group, views) if call.backend == "gloo" else ()
    return Cause(Why.UNSURE, f"its newest call ({there}) completed, and the dumps cannot tell "
                 "where it lies against this one: either it stalled before this call, or its "
                 f"program went on without it{_unseen_sends(peers)}", peers)


def _waits_unsure(there: str) -> Cause:
    """The cause of a rank that waits in another stuck group where one other rank's records
    alone put that call after the pending one (too few to tell: two dumps of a bigger job)."""
    return Cause(Why.UNSURE, f"it waits at {there}, which one other rank's records alone put "
                 "after this call, too few to tell: either it went past this call, or it "
                 "waits there in turn, stuck behind that group")


def _by_clock(there: str, after: str, done: bool) -> Cause:
    """The cause when no other rank's records place the rank's newest call (``there``) against
    the pending one, and the clock says it made it ``after`` the first member entered the
    pending one: it was running while they waited."""
    basis = (f"made {after}, so it was running while they waited (no other rank's records "
             "place the two calls the other way)")
    if done:
        return Cause(Why.WENT_ON, f"by the clock, its program went on without this call: its "
                     f"newest call ({there}) completed, {basis}")
    return Cause(Why.WENT_PAST, f"by the clock, it went past it: it waits at {there}, {basis}")


def _stopped(x: int, s: GroupState, call: FlightCall, there: str,
             views: Mapping[str, MeshView]) -> Cause:
    """``x`` made every call before ``s``'s pending one and none since: a stall before it, or
    an end of its program; on Gloo, perhaps a point-to-point call the recorder does not see."""
    gap = s.entered_ns - call.created_ns if s.entered_ns and call.created_ns else 0
    old = f" ({span(gap)} before the first rank entered this call)" if gap > 0 else ""
    gloo = call.backend == "gloo"
    peers = _pipeline_peers(x, s.group, views) if gloo else ()
    unseen = "a call the recorder does not see" + (": on Gloo, a send or recv" if gloo else "")
    return Cause(Why.STOPPED, f"it stopped before this call: its newest call ({there}) comes "
                 f"before it in the other ranks' order, and it made none since{old}: it stalls "
                 f"there (compute, I/O, a lock, {unseen}) or its program ended without this "
                 f"call{_unseen_sends(peers)}", peers)


def _unseen_sends(peers: tuple[int, ...]) -> str:
    """What Gloo's unrecorded point-to-point calls may hide: a receive from ``peers``."""
    return ("; Gloo records no point-to-point call: if it receives before this call, it may "
            f"wait for {' or '.join(f'rank {p}' for p in peers)} (its "
            f"{'neighbours' if len(peers) > 1 else 'neighbour'} along the pipeline), "
            "whose send is then missing" if peers else "")


PIPELINE_DIMS = ("pp", "pipe", "pipeline", "stage", "pp_stage")
"""The dim names read as a pipeline's: a Gloo receiver's possible senders are its
neighbours along it (the previous stage sends forward, the next one backward)."""


def _pipeline_peers(x: int, group: PlanGroup, views: Mapping[str, MeshView]
                    ) -> tuple[int, ...]:
    """``x``'s neighbours along the pipeline dim of its group's view (none without one)."""
    view = views.get(group.view)
    if view is None or view.ranks.offset_of(x) is None:
        return ()
    for dim in view.names:
        if dim in PIPELINE_DIMS:
            members = view.group(x, dim)
            i = members.index(x)
            return tuple(members[j] for j in (i - 1, i + 1) if 0 <= j < len(members))
    return ()


def span(ns: int) -> str:
    """``1.2 s``, ``340 ms``, ``5 µs``: a duration in a unit that reads."""
    for unit, size in (("min", 60 * 10**9), ("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= size:
            return f"{ns / size:.3g} {unit}"
    return f"{ns} ns"


def at(call: FlightCall) -> str:
    """``, at train.py:104 in step``: where the program made the call, when the dump says."""
    return f", at {call.where}" if call.where else ""


class Order:
    """Where a rank's newest call lies against a pending call, in the program all ranks run
    (SPMD), by a vote of the other ranks; memoized per question (dims and numbers)."""

    def __init__(self, hang: Hang) -> None:
        self._orders: dict[int, dict[tuple[str, str, int], int]] = {}
        self._lowest: dict[int, dict[tuple[str, str], int]] = {}  # the ring's oldest per dim
        self._tail: dict[int, list[tuple[PlanGroup, FlightCall]]] = {}  # the newest calls
        by_name = {s.name: s.group for s in hang.states}
        for rank, calls in hang.calls.items():
            mine = self._orders[rank] = {}
            low = self._lowest[rank] = {}
            for c in calls:
                if c.group in by_name:
                    g = by_name[c.group]
                    mine[(g.view, g.dim, c.seq)] = c.order
                    if c.seq < low.get((g.view, g.dim), 1 << 62):
                        low[(g.view, g.dim)] = c.seq
            self._tail[rank] = [(by_name[c.group], c) for c in calls[-TAIL:]
                                if c.group in by_name]

    def __call__(self, g: PlanGroup, s: int, h: PlanGroup, t: int) -> str | None:
        """Whether a rank at call ``t`` on ``h``'s dim, which never issued call ``s`` on
        ``g``'s dim, went past ``s`` (``"past"``) or stopped before it (``"before"``), as
        most other ranks that say tell; None when they tie."""
        past, before = self._votes(g.view, g.dim, s, h.view, h.dim, t)
        return PAST if past > before else BEFORE if before - 1 > past else None

    def disputed(self, g: PlanGroup, s: int, h: PlanGroup, t: int) -> bool:
        """Whether a rank other than the one asked about says it stopped before ``s`` (then
        the ranks' records disagree on the order, and the clock cannot settle it: it tells
        a rank running from one stalled, not which rank left the program's order)."""
        return self._votes(g.view, g.dim, s, h.view, h.dim, t)[1] > 1

    def one_says_past(self, g: PlanGroup, s: int, h: PlanGroup, t: int) -> bool:
        """Whether exactly one rank besides the one asked about says it went past ``s``, and
        none that it stopped before it (two dumps of a bigger job: too few to tell)."""
        return self._votes(g.view, g.dim, s, h.view, h.dim, t) == (1, 1)

    def votes_past(self, g: PlanGroup, s: int, h: PlanGroup, t: int) -> bool:
        """Whether some rank other than the one asked about puts ``s`` before ``t``."""
        return self._votes(g.view, g.dim, s, h.view, h.dim, t)[0] > 0

    @functools.cache  # noqa: B019 (one per report, dropped with it)
    def _votes(self, gv: str, gd: str, s: int, hv: str, hd: str, t: int) -> tuple[int, int]:
        """A rank that made both calls says which came first; one that made only ``s`` (and
        whose ring reaches back to ``t``) says ``s`` comes first; one that made only ``t``,
        that ``t`` does.  The rank asked about is one of the last: "past" needs more votes
        than "before" with it, "before" more than "past" without it (a job split in halves,
        each with its own order, is a tie: the ranks wait on each other)."""
        past = before = 0
        for rank, orders in self._orders.items():
            here, first = orders.get((hv, hd, t)), orders.get((gv, gd, s))
            if here is not None:
                if first is not None and first < here:
                    past += 1
                else:
                    before += 1
            elif first is not None and self._lowest[rank].get((hv, hd), 0) <= t:
                past += 1
        return past, before

    def out_of_order(self, rank: int
                     ) -> tuple[PlanGroup, FlightCall, PlanGroup, FlightCall] | None:
        """The first of ``rank``'s newest calls (:data:`TAIL`) that it issued after a call
        on another dim which every other member of its two groups there (two at least) issued
        after it: ``(group, call, the other group, the call before it)``; None when there is
        none.  Each group is asked through its first :data:`VOTERS` members.  Such a
        call completed with its group's members at another point of the program (a skip or a
        swap matched by the next call of the same kind: on Gloo, scrambled data when the
        bytes agree).  The world group and a pipeline dim's are not asked about: their
        members run different stages, whose orders may differ by design."""
        tail = self._tail.get(rank, [])
        for (g, a), (h, b) in zip(tail, tail[1:]):
            if (g.view, g.dim) == (h.view, h.dim) or {g.dim, h.dim} & {WORLD, *PIPELINE_DIMS}:
                continue
            against = 0
            for other in {*g.members[:VOTERS], *h.members[:VOTERS]}:
                orders = self._orders.get(other) if other != rank else None
                first = orders.get((g.view, g.dim, a.seq)) if orders else None
                second = orders.get((h.view, h.dim, b.seq)) if orders else None
                if first is None or second is None:
                    continue
                if first < second:
                    break  # one other rank agrees with it: no finding
                against += 1
            else:
                if against >= 2:
                    return h, b, g, a
        return None


TAIL = 16
"""How many of each rank's newest calls are checked for their order (a skip that the next
call of the same kind matched shows near the hang)."""

VOTERS = 64
"""The most members of each of a rank's groups asked about its order (a dp group of 1,250
ranks is asked 64 times, not 1,250, for each of 16 calls of each rank)."""
