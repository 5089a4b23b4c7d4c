"""The creation model: how the job's backend creates each group a rank asks for, as meetings
of the replay, and what a creation that cannot complete means.

- **Our backend's requests** (``Create``): Gloo creates each group among its members; NCCL
  with a device-bound default group (``NcclBackend.from_env()``) creates a family of
  ascending groups covering the world with one ``split_group``, collective over the world
  (the members meet at the family's barrier, all ranks).
- **Hidden parent-wide split** (class 3): on that device-bound NCCL world, torch 2.13's
  ``new_group`` (``distributed_c10d._new_group_with_tag``, then
  ``_new_process_group_helper``) sets ``split_from`` to the default group's communicator
  and connects eagerly, so ``ncclCommSplit`` runs over the whole world; with
  ``use_local_synchronization=True`` the ranks outside the group return before that split
  and never enter it, so the members hang (NVIDIA-NeMo/RL #3189; pytorch #129965 proposed
  refusing it).  Every group a program creates among its members only on that world
  (our ``new_group`` plan, or ``dist.new_group(..., use_local_synchronization=True)``) is
  reported; it does not wait in the replay (its own finding, not a cascade).
- **What the torch version changes** (:mod:`._torch_model`): whether torch splits for such a
  group follows the modelled version, the backend the group asks for and its options (a
  group asking for Gloo is made fresh; torch 2.15 splits only when the requested backend's
  name equals the parent's, never for ``lazy_init``, and no version under torchcomms);
  a group torch makes fresh meets among its members, as on Gloo.
- **torch's world-wide creations**: ``dist.new_group`` without local synchronization names
  the group by a per-process counter (``_process_group_name``), and ``dist.split_group`` is
  collective over the parent: every rank must make each of them, in the same order (ranks
  that skip one name their later groups differently and meet no one).  A ``split_group`` of
  a parent smaller than the world (pipelining's own communicators, :mod:`._torch_model`)
  meets the parent's ranks only.
- **Cache hit against split** (class 2): a rank that answers a request from a group it
  already holds (adopted with ``from_group``, kept across a ``rebind``) does not take part
  in the creation its peers enter for that family: they wait for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

from mesh._core import FindingKind, verb

from ._events import Create, Hit, TorchCreate, Trace
from ._keys import WORLD_CREATIONS, CreateKey, Key, NewGroupKey, ParentCreationKey, WorldCreationKey
from ._matcher import Meet, Outcome, Step
from ._report import Finding, group_words, who
from ._torch_model import TorchModel

__all__ = ["CreationLowering", "creation_findings"]


class CreationLowering:
    """Turns one rank's creation events into steps, adding their keys to ``meets``."""

    def __init__(self, world: int, nccl: bool, meets: dict[Key, Meet],
                 model: TorchModel) -> None:
        self.world = world
        self.nccl = nccl
        self.meets = meets
        self.model = model
        self.seen: dict[Hashable, int] = defaultdict(int)
        self.world_wide = 0

    def step(self, event: Create | TorchCreate, index: int,
             findings: list[Finding]) -> Step:
        if isinstance(event, Create):
            return self._ours(event, index, findings)
        return self._torch(event, index, findings)

    def _ours(self, event: Create, index: int, findings: list[Finding]) -> Step:
        if event.hidden and self.model.hidden_split(event.backend, lazy=event.lazy):
            findings.append(_hidden(event.group.label, tuple(event.group.members), event.line,
                                    self.world, self.model))
            return Step((), (), True, index)
        n = self.seen[event.barrier]
        self.seen[event.barrier] += 1
        key = CreateKey(event.barrier, n)
        if key not in self.meets:
            self.meets[key] = Meet(event.members, None, event)
        return Step((key,), (None,), True, index)

    def _torch(self, event: TorchCreate, index: int, findings: list[Finding]) -> Step:
        if event.what == "new_group" and event.local:
            members = event.ranks
            if self.nccl and len(members) < self.world and \
                    self.model.hidden_split(event.backend, lazy=event.lazy):
                findings.append(_hidden(event.name, members, event.line, self.world,
                                        self.model))
                return Step((), (), True, index)
            n = self.seen[event.name]
            self.seen[event.name] += 1
            local = NewGroupKey(event.name, members, n)
            if local not in self.meets:
                self.meets[local] = Meet(members, None, event)
            return Step((local,), (None,), True, index)
        if event.parent is not None and len(event.parent) < self.world:
            n = self.seen[event.parent]
            self.seen[event.parent] += 1
            within = ParentCreationKey(event.parent, n, event.ranks)
            if within not in self.meets:
                self.meets[within] = Meet(event.parent, None, event)
            return Step((within,), (None,), True, index)
        k = self.world_wide
        self.world_wide += 1
        key = WorldCreationKey(k)
        if key not in self.meets:
            self.meets[key] = Meet(range(self.world), WORLD_CREATIONS, event)
        return Step((key,), ((event.what, event.ranks),), True, index)


def _hidden(label: str, members: Sequence[int], line: str, world: int,
            model: TorchModel) -> Finding:
    outside = world - len(members)
    lazy = ", or (torch 2.15) give it options with lazy_init" if model.version >= (2, 15) \
        else ""
    return Finding(
        FindingKind.HIDDEN_SPLIT,
        f"{group_words(label, tuple(members))} is created by its members only ({line}), but "
        f"on a device-bound NCCL world torch creates it with ncclCommSplit over the default "
        f"group, which all {world} ranks must enter; the {outside} ranks outside it never "
        "do, so its members hang (NVIDIA-NeMo/RL #3189). Create it on every rank (a family "
        "of ascending groups covering the world is one split), or bind no device to the "
        f"default group{lazy}",
        f"hidden split {label} {line}", tuple(members))


def creation_findings(outcome: Outcome, meets: dict[Key, Meet],
                      traces: Sequence[Trace], world: int
                      ) -> tuple[list[tuple[str, tuple[int, ...], tuple[int, ...]]],
                                 list[Finding]]:
    """(never created, other findings) for the creation keys the replay left incomplete.

    A participant that never offers a creation key either holds the group already (a
    cache hit: class 2) or never asks (a skipped dim); a world-wide torch creation that
    ranks make differently, or never, is reported with the calls on each side.
    """
    never: dict[str, tuple[str, tuple[int, ...], set[int]]] = {}
    found: list[Finding] = []
    hits = _Hits(traces)
    for wrong in outcome.mismatches:
        if wrong.channel == WORLD_CREATIONS:
            found.append(_world_wide_desync(wrong.arrivals, traces, world))
    for key, absent in outcome.missing.items():
        info = meets[key].info
        gone = tuple(sorted(absent))
        if isinstance(info, TorchCreate):
            found.append(_torch_never(info, key, gone, world))
        elif isinstance(info, Create):
            skipped = hits.skipped(info, gone, outcome.open.get(key, set()), world, found)
            if skipped:
                shown = () if info.split else tuple(info.members)
                never.setdefault(info.barrier, (info.dim, shown, set()))[2].update(skipped)
    out = [(d, m, tuple(sorted(a))) for d, m, a in never.values()]
    return out, found


class _Hits:
    """Each rank's cache hits by barrier (read on first need)."""

    def __init__(self, traces: Sequence[Trace]) -> None:
        self.traces = traces
        self.hits: dict[int, dict[str, Hit]] = {}

    def skipped(self, info: Create, gone: tuple[int, ...], entered: set[int], world: int,
                found: list[Finding]) -> set[int]:
        """Of the ranks ``gone`` from ``info``'s creation, those that never ask for it; a
        cache hit is a finding instead."""
        skipped = set()
        for m in gone:
            held = self.hits.setdefault(m, {h.barrier: h for h in self.traces[m].events
                                            if isinstance(h, Hit)}).get(info.barrier)
            if held is None:
                skipped.add(m)
            else:
                found.append(_cache_hit(held, m, entered, world))
        return skipped


def _world_wide_desync(arrivals: list[tuple[int, Hashable, int]], traces: Sequence[Trace],
                       world: int) -> Finding:
    sides: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for rank, sig, index in arrivals:
        sides[sig].append((rank, index))
    words = []
    sizes: list[tuple[int, tuple[int, ...]]] = []
    for side in sorted(sides.values(), key=min):
        side.sort()
        rank, index = side[0]
        event = traces[rank].events[index]
        assert isinstance(event, TorchCreate), "a world-wide creation's offers are torch's"
        ranks = tuple(sorted(r for r, _ in side))
        sizes.append((len(ranks), ranks))
        words.append(f"{who(ranks, world)} {_call(event)} ({event.line})")
    odd = min(sizes)[1]
    return Finding(
        FindingKind.HIDDEN_SPLIT,
        "ranks make torch's world-wide group creations differently: " + "; ".join(words)
        + ". dist.new_group without use_local_synchronization is entered by every rank, the "
        "ranks outside the group too (torch names the group by a per-process count of such "
        "calls), and dist.split_group by every rank of the parent: the later groups of the "
        "ranks that skip one meet no one",
        "world-wide creation desync " + " | ".join(sorted(map(repr, sides))), odd)


def _call(event: TorchCreate) -> str:
    if event.what == "split_group":
        return f"split_group({[list(g) for g in event.ranks]})"
    return f"new_group({list(event.ranks)})"


def _torch_never(info: TorchCreate, key: Key, gone: tuple[int, ...], world: int
                 ) -> Finding:
    if info.what == "new_group" and info.local:
        return Finding(
            FindingKind.UNMATCHED,
            f"the group {info.name!r} {tuple(info.ranks)} (dist.new_group with "
            f"use_local_synchronization, {info.line}) is never created by {who(gone, world)}: "
            "its other members wait for them",
            f"new_group never {info.line}", gone)
    if info.parent is not None:
        return Finding(
            FindingKind.HIDDEN_SPLIT,
            f"{who(gone, world)} never make(s) the {_call(info)} of the group "
            f"{info.parent} ({info.line}) that its other ranks make: every rank of the parent "
            "enters dist.split_group, in one order, or the others wait",
            f"parent-wide never {info.line}", gone)
    return Finding(
        FindingKind.HIDDEN_SPLIT,
        f"{who(gone, world)} never make(s) the world-wide {_call(info)} ({info.line}) that the "
        "other ranks make: every rank must enter dist.new_group without "
        "use_local_synchronization (the ranks outside the group too) and dist.split_group, "
        "or the others wait",
        f"world-wide never {info.line}", gone)


def _cache_hit(held: Hit, rank: int, entered: set[int], world: int) -> Finding:
    where = (f"the split of dim {held.dim!r} over the world" if held.split
             else group_words(held.dim, tuple(held.members)))
    peers = tuple(sorted(entered))
    return Finding(
        FindingKind.CACHE_HIT,
        f"rank {rank} already holds its {held.dim!r} group {tuple(held.group.members)} "
        f"({held.source}, asked at {held.line}) and skips {where}, which "
        f"{who(peers, world)} {verb(peers, 'enters: it waits', 'enter: they wait')} for it. "
        "Make every rank reach the family "
        "the same way (adopt on every rank, or on none)",
        f"cache hit {held.dim} {held.source} {held.line}", (rank,))
