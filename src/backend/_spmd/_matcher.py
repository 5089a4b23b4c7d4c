"""The replay: every rank's steps, matched across ranks as the real job would meet them.

A rank's run is lowered (``_creation``, ``_collectives``, ``_lifecycle``) to a list of
:class:`Step`\\ s.  A step offers one or more meeting *keys* (a group creation, the n-th
collective on a communicator, the n-th send from one rank to another on it, ...); a key
completes when every participant has offered it, in its own order.  A blocking step waits
until all its keys complete; a non-blocking one (``isend``, a batch of p2p ops) offers its
keys and goes on, and they must complete before the program ends.  Each offer carries a
signature (the op, shape, dtype, reduce op, root): participants of one key that offer
different signatures *desync* the key's channel (the sequence of calls on that
communicator, or between that pair): the first such key is reported with every side, and
later keys of the channel no longer wait (what follows a desync is its consequence).

What cannot complete is classified as the old creation check did, for every kind of key:
participants that never offer a key (it is not among their remaining steps), sets of ranks
whose steps wait on each other (a wait-for cycle, Tarjan), and ranks stuck behind those.

Cost: O(total offers) for the replay (each offer touches its key once), plus, for what is
stuck at the end, O(remaining steps) of the ranks that are waited for.
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict, deque
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import attrs

from ._keys import Channel, Key

__all__ = ["Meet", "Mismatch", "Outcome", "Step", "collector_paused", "replay"]


@attrs.frozen(slots=True)
class Step:
    """One step of a rank: the keys it offers, a signature per key, whether it waits for
    them, and the index of the event it lowers (in the rank's trace)."""

    keys: tuple[Key, ...]
    sigs: tuple[Hashable, ...]
    blocking: bool
    event: int


@attrs.frozen(slots=True)
class Meet:
    """A key's participants (the ranks that must offer it), its channel (keys of one
    channel are successive calls on one communicator; None for a creation) and, for the
    words of a report, the first event that offered it."""

    participants: Sequence[int]
    channel: Channel | None = None
    info: Any = None  # what the lowering keeps for words: the first event offering it


@attrs.define
class Mismatch:
    """A key whose participants offered different signatures: ``arrivals`` lists each
    offer ``(rank, signature, event index)`` in the order they came."""

    key: Key
    channel: Channel | None
    arrivals: list[tuple[int, Hashable, int]]
    ranks: set[int]


@attrs.define
class Outcome:
    """What the replay ended with.

    ``stuck``: rank -> the step it waits at; ``missing``: an incomplete key -> the
    participants that never offer it; ``waits``: a stuck rank -> the ranks it waits for
    that will offer its keys later (but are stuck elsewhere first); ``cycles``: sets of
    ranks that wait on each other; ``blocked``: the other stuck ranks that wait for
    someone; ``open``: every incomplete key -> the ranks that offered it.
    """

    completed: int
    mismatches: list[Mismatch]
    stuck: dict[int, Step]
    open: dict[Key, set[int]]
    missing: dict[Key, set[int]]
    waits: dict[int, set[int]]
    cycles: list[set[int]]
    blocked: list[int]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (for the process) while the check derives,
    lowers and replays: those make millions of small acyclic values (events, steps, keys,
    sets of ranks), which reference counting frees, and each collection they trigger walks
    every live object: about half the time at 16,384 ranks, and a share that grew faster
    than the world.  The program's own runs keep the collector."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def replay(steps: Sequence[Sequence[Step]], meets: dict[Key, Meet]) -> Outcome:
    """Match every rank's ``steps`` (rank ``r``'s at ``steps[r]``) over ``meets``."""
    return _Replay(steps, meets).run()


_Open = tuple[set[int], list[tuple[int, Hashable, int]], int, "Channel | None"]
"""An open key: the ranks that offered it, their offers, its participants' count, its
channel."""


class _Replay:
    """The replay's state, one method per step of it: ranks :meth:`advance` through their
    steps, each :meth:`offer` of a key either completes it (:meth:`complete`, which wakes
    the ranks waiting on it), ends its channel (a mismatch), or leaves the rank waiting.

    ``pos[r]``: rank ``r``'s next step; ``pending[r]``: the keys it waits for (None: it is
    not waiting); ``open``: each open key's ranks that offered it, their offers, how many
    participants it needs and its channel (one look-up per offer); ``open_in``: a
    channel's open keys (what a desync there completes).
    """

    def __init__(self, steps: Sequence[Sequence[Step]], meets: dict[Key, Meet]) -> None:
        self.steps, self.meets = steps, meets
        world = len(steps)
        self.pos = [0] * world
        self.pending: list[set[Key] | None] = [None] * world
        self.open: dict[Key, _Open] = {}
        self.done: set[Key] = set()
        self.waiters: dict[Key, list[int]] = defaultdict(list)
        self.desynced: set[Channel] = set()
        self.open_in: dict[Channel, set[Key]] = defaultdict(set)
        self.mismatched: dict[Key, Mismatch] = {}
        self.queue: deque[int] = deque(range(world))
        self.completed = 0

    def run(self) -> Outcome:
        """Advance every rank until none can; then who waits for whom."""
        while self.queue:
            r = self.queue.popleft()
            if self.pending[r] is None:
                self.advance(r)
        offered = {key: entry[0] for key, entry in self.open.items()}
        return _classify(self.steps, self.meets, self.pos, self.pending, offered,
                         self.completed, list(self.mismatched.values()))

    def advance(self, r: int) -> None:
        """Rank ``r`` takes its steps until one must wait."""
        mine = self.steps[r]
        pos, end, offer = self.pos[r], len(mine), self.offer
        while pos < end:
            step = mine[pos]
            keys = step.keys
            if len(keys) == 1:  # most steps: one key, offered without a set
                wait = {keys[0]} if offer(r, keys[0], step.sigs[0], step.event) else None
            else:
                wait = {key for key, sig in zip(keys, step.sigs)
                        if offer(r, key, sig, step.event)}
            if step.blocking and wait:
                self.pos[r] = pos
                self.pending[r] = wait
                for key in wait:
                    self.waiters[key].append(r)
                return
            pos += 1
        self.pos[r] = pos

    def offer(self, r: int, key: Key, sig: Hashable, event: int) -> bool:
        """Rank ``r`` offers its step's ``key`` with signature ``sig``: whether it must
        wait for the key's other participants."""
        entry = self.open.get(key)  # an open key is never done, desynced or mismatched
        if entry is None:
            entry = self.opened(r, key, sig, event)
            if entry is None:
                return False
        got, these, need, channel = entry
        if r in got:
            return True
        got.add(r)
        these.append((r, sig, event))
        if sig != these[0][1]:
            self.mismatch(key, channel, these, got)
            return False
        if len(got) == need:
            self.complete(key)
            return False
        return True

    def opened(self, r: int, key: Key, sig: Hashable, event: int) -> _Open | None:
        """``key`` offered while not open: None when it no longer waits (it met, its
        channel desynced, or it is a desync, whose every side is reported), else it opens."""
        wrong = self.mismatched.get(key)
        if wrong is not None:  # every side of a desync is reported
            if r not in wrong.ranks:
                wrong.ranks.add(r)
                wrong.arrivals.append((r, sig, event))
            return None
        meet = self.meets[key]
        if key in self.done or (meet.channel is not None and meet.channel in self.desynced):
            return None
        entry = self.open[key] = (set(), [], len(meet.participants), meet.channel)
        if meet.channel is not None:
            self.open_in[meet.channel].add(key)
        return entry

    def mismatch(self, key: Key, channel: Channel | None,
                 these: list[tuple[int, Hashable, int]], got: set[int]) -> None:
        """``key``'s offers differ: it and every open key of its channel end (what follows a
        desync on a channel is its consequence)."""
        self.mismatched[key] = Mismatch(key, channel, list(these), set(got))
        if channel is None:
            self.complete(key)
            return
        self.desynced.add(channel)
        for k in list(self.open_in[channel]):
            self.complete(k)

    def complete(self, key: Key) -> None:
        """``key`` met: the ranks waiting only for it go on."""
        self.completed += 1
        self.done.add(key)
        entry = self.open.pop(key, None)
        channel = entry[3] if entry is not None else self.meets[key].channel
        if channel is not None:
            self.open_in[channel].discard(key)
        for r in self.waiters.pop(key, ()):
            left = self.pending[r]
            if left is None:
                continue
            left.discard(key)
            if not left:
                self.pending[r] = None
                self.pos[r] += 1
                self.queue.append(r)


def _classify(steps: Sequence[Sequence[Step]], meets: dict[Key, Meet], pos: list[int],
              pending: list[set[Key] | None], offered: dict[Key, set[int]],
              completed: int, mismatches: list[Mismatch]) -> Outcome:
    """Who waits for whom at the end: never (a key not among a participant's remaining
    steps) or later (it is, but the participant is stuck elsewhere first)."""
    ahead: dict[int, set[Key]] = {}

    def will_offer(rank: int, key: Key) -> bool:
        keys = ahead.get(rank)
        if keys is None:
            keys = ahead[rank] = {k for s in steps[rank][pos[rank]:] for k in s.keys}
        return key in keys

    missing: dict[Key, set[int]] = {}
    later: dict[Key, set[int]] = {}
    for key, got in offered.items():
        absent = [m for m in meets[key].participants if m not in got]
        never = {m for m in absent if not will_offer(m, key)}
        if never:
            missing[key] = never
        later[key] = set(absent) - never
    stuck = {r: steps[r][pos[r]] for r, p in enumerate(pending) if p is not None}
    waits = {r: set().union(*(later.get(k, set()) for k in pending[r] or ())) for r in stuck}
    cycles = list(_cycles(waits))
    in_cycle = set().union(*cycles) if cycles else set()
    blocked = [r for r in sorted(stuck) if r not in in_cycle and waits[r]]
    return Outcome(completed, mismatches, stuck, dict(offered), missing, waits, cycles, blocked)


def _cycles(waits: dict[int, set[int]]) -> Iterator[set[int]]:
    """The strongly connected sets of the wait-for graph that wait on each other."""
    tarjan = _Tarjan(waits)
    for v in sorted(waits):
        if v not in tarjan.index:
            tarjan.visit(v)
    return iter(tarjan.found)


class _Tarjan:
    """Tarjan's strongly connected components of ``edges``, iteratively (deep enough for 1M
    ranks); ``found`` keeps the components that are cycles (more than one node, or a node
    waiting on itself)."""

    def __init__(self, edges: dict[int, set[int]]) -> None:
        self.edges = edges
        self.index: dict[int, int] = {}
        self.low: dict[int, int] = {}
        self.stack: list[int] = []
        self.on: set[int] = set()
        self.found: list[set[int]] = []

    def visit(self, v: int) -> None:
        work = [(v, self._enter(v))]
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is None:
                work.pop()
                self._leave(node, work[-1][0] if work else None)
            elif nxt not in self.index:
                work.append((nxt, self._enter(nxt)))
            elif nxt in self.on:
                self.low[node] = min(self.low[node], self.index[nxt])

    def _enter(self, v: int) -> Iterator[int]:
        self.index[v] = self.low[v] = len(self.index)
        self.stack.append(v)
        self.on.add(v)
        return iter(sorted(self.edges.get(v, ())))

    def _leave(self, node: int, parent: int | None) -> None:
        if parent is not None:
            self.low[parent] = min(self.low[parent], self.low[node])
        if self.low[node] == self.index[node]:
            component = self._pop_component(node)
            if len(component) > 1 or node in self.edges.get(node, ()):
                self.found.append(component)

    def _pop_component(self, root: int) -> set[int]:
        component: set[int] = set()
        while True:
            w = self.stack.pop()
            self.on.discard(w)
            component.add(w)
            if w == root:
                return component


def first(items: Any) -> Any:
    """The first item of an iterable (for sets)."""
    return next(iter(items))
