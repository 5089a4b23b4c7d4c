"""``check_spmd``: run a program once per rank on a recording fake backend, and check
offline that every group it asks for can be created (no torch, no processes).

At run time (see :mod:`backend._c10d._rendezvous`) a group is created when all its members have
asked for it, each rank asking for its groups one after another.  The check replays that:
each rank's program runs to completion on a :class:`_Recorder` (a :class:`FakeBackend`
that logs every group request with the group's members), then the requests are matched
up: a group completes once every member has reached it in its own order.  What cannot
complete is reported:

- groups some members never ask for (a skipped dim; the members are named);
- sets of ranks whose orders wait on each other (each waits for a group another has not
  reached: asked in different orders);
- programs that raised (e.g. a rank asking for a group of a view it is not in without
  checking ``mesh.get_coordinate()``), with the call that raised.

Dims that reuse the default group (the whole world in natural order, default options)
need no rendezvous and are not matched, as at run time.

What is matched is what the job will run (``backend=``): Gloo creates each group among its
members only; NCCL with a device-bound default group (what ``NcclBackend.from_env()``
makes) creates a family of ascending groups with one ``split_group`` over the whole world,
so every rank must reach that split in the same order.  ``"auto"`` (the default) models
NCCL when the program binds a ``"cuda"`` mesh and Gloo otherwise.  During the check the
recorder is also the process's backend for every device type, so a program that builds
its meshes without ``backend=`` is checked too.
"""

from __future__ import annotations

import inspect
import re
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import attrs

from layout import show, show_error
from mesh import MeshView

from .._c10d import GroupSpec, Plan
from .._core import (
    BackendConfigError,
    FakeBackend,
    FakeGroup,
    GroupOptions,
    NotAMemberError,
    overriding,
)

__all__ = ["MAX_CHECKED_RANKS", "SpmdReport", "check_spmd"]

Program = Callable[[FakeBackend], object]
Kind = Literal["auto", "gloo", "nccl"]
_KINDS = ("auto", "gloo", "nccl")
MAX_CHECKED_RANKS = 1 << 17
"""The largest world ``check_spmd`` runs a program for unless given a larger ``limit``
(it runs the program once per rank: about a millisecond per rank for a torchtitan plan)."""


@attrs.frozen
class _Request:
    """One group a rank asked for, in its order (by its barrier, as the job meets)."""

    group: str  # the barrier's name (GroupSpec.barrier)
    dim: str
    members: Sequence[int]  # who meets there: the group, or range(world) for a split
    split: bool


class _Recorder(FakeBackend):
    """A FakeBackend that logs every group it creates (once per family, as the real
    backends create) as the job would meet for it."""

    def __init__(self, world_size: int, rank: int, kind: Kind) -> None:
        super().__init__(world_size, rank)
        self.requests: list[_Request] = []
        self.kind = kind
        self.device_types: set[str] = set()

    def _splits(self) -> bool:
        return self.kind == "nccl" or (self.kind == "auto" and "cuda" in self.device_types)

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> FakeGroup:
        group = super()._create(view, dim, options)
        spec = GroupSpec.of(view, dim, options, rank=self.rank, world_size=self.world_size,
                            can_split=self._splits())
        if spec.plan is not Plan.DEFAULT:
            self.requests.append(_Request(spec.barrier, spec.dim, spec.barrier_members(),
                                          spec.plan is Plan.SPLIT))
        return group


Members = tuple[int, ...]


@attrs.frozen
class SpmdReport:
    """What :func:`check_spmd` found; ``ok`` is True when every group can be created.

    ``never_created``: ``(dim, members, ranks that never ask)`` per incomplete group;
    ``waiting``: sets of ranks whose orders wait on each other, each rank with the group
    it is stuck at ``(rank, dim, members)``; ``blocked``: the other stuck ranks ``(rank,
    dim, members, the ranks it waits for)``, stuck behind the above; ``errors``: ``(rank,
    call index, message)`` per program that raised.  ``members`` is ``()`` for a split
    over the whole world (NCCL).  ``str()`` reads as a report, summarized by pattern
    ("the even ranks ...") so that it stays short at any world size.
    """

    world_size: int
    groups: int
    never_created: tuple[tuple[str, Members, Members], ...]
    waiting: tuple[tuple[tuple[int, str, Members], ...], ...]
    blocked: tuple[tuple[int, str, Members, Members], ...]
    errors: tuple[tuple[int, int, str], ...]

    @property
    def ok(self) -> bool:
        """Whether every group every rank asks for can be created, and no program raised."""
        return not (self.never_created or self.waiting or self.blocked or self.errors)

    def __str__(self) -> str:
        head = (f"check_spmd over {self.world_size} ranks: {self.groups} groups asked for; "
                + ("every one can be created" if self.ok else "problems found"))
        lines = [head]
        for dim, members, absent in self.never_created[:_MOST]:
            lines.append(f"- {_group(dim, members)} is never asked for by "
                         f"{_who(absent, self.world_size)} (a skipped dim: its other members "
                         "would wait until their timeout)")
        lines += _more(len(self.never_created), "groups some member never asks for")
        lines += [self._cycle(c) for c in self.waiting[:_MOST]]
        lines += _more(len(self.waiting), "sets of ranks waiting on each other")
        if self.blocked:
            shown = "; ".join(f"rank {r} at {_group(d, m)} (waiting for {_ranks(w)})"
                              for r, d, m, w in self.blocked[:_MOST])
            more = f" and {len(self.blocked) - _MOST} more" if len(self.blocked) > _MOST else ""
            lines.append(f"- stuck behind those: {shown}{more}")
        same: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
        for rank, call, message in self.errors:  # alike but for the rank's own number
            same[(call, re.sub(rf"\brank {rank}\b", "rank #", message))].append((rank, message))
        for (call, _), raised in list(same.items())[:_MOST]:
            ranks = tuple(r for r, _ in raised)
            whose = (f"rank {ranks[0]}'s program" if len(ranks) == 1 else
                     f"the programs of {_who(ranks, self.world_size)}")
            shown = "" if len(ranks) == 1 else f" (rank {ranks[0]}'s words; the others' alike)"
            lines.append(f"- {whose} raised at group request {call}: {raised[0][1]}{shown}")
        lines += _more(len(same), "distinct errors")
        if not self.ok:
            lines.append("Remedies: ask for the same groups in the same order on every "
                         "rank (mesh.materialize() creates a mesh's groups in dim order); "
                         "guard requests on views a rank is not in with "
                         "mesh.get_coordinate() is not None.")
        return "\n".join(lines)

    def _cycle(self, cycle: tuple[tuple[int, str, Members], ...]) -> str:
        if len(cycle) <= _MOST:
            waits = "; ".join(f"rank {r} waits at {_group(d, m)}" for r, d, m in cycle)
            return (f"- ranks {_ranks(tuple(r for r, _, _ in cycle))} asked for groups in "
                    f"different orders and wait on each other: {waits}")
        at: dict[tuple[str, Members], list[int]] = defaultdict(list)
        for r, d, m in cycle:
            at[(d, m)].append(r)
        waits = "; ".join(f"{_who(tuple(ranks), self.world_size)} wait at {_group(d, m)}"
                          for (d, m), ranks in list(at.items())[:4])
        if len(at) > 4:
            waits += f"; and {len(at) - 4} more groups"
        return (f"- {len(cycle)} ranks asked for groups in different orders and wait on each "
                f"other: {waits}")


_MOST = 8  # entries of one kind written out in a report


def _more(count: int, what: str) -> list[str]:
    return [f"- and {count - _MOST} more {what}"] if count > _MOST else []


def _group(dim: str, members: Members) -> str:
    if not members:
        return f"the split of dim {dim!r} over the world"
    return f"the {dim!r} group {_ranks(members)}"


def _ranks(ranks: Members, most: int = _MOST) -> str:
    shown = ", ".join(map(str, ranks[:most]))
    return f"({shown}{', ...' if len(ranks) > most else ''})" if len(ranks) != 1 \
        else f"{ranks[0]}"


def _who(ranks: Members, world: int) -> str:
    """Ranks in words: one, a few, or their pattern ("the even ranks (0, 2, 4, ..., 1022;
    512 ranks)").

    >>> _who((3,), 8), _who(tuple(range(1, 1024, 2)), 1024)
    ('rank 3', 'the odd ranks (1, 3, 5, ..., 1023; 512 ranks)')
    """
    n = len(ranks)
    if n == 1:
        return f"rank {ranks[0]}"
    if n <= _MOST:
        return f"ranks {_ranks(ranks)}"
    step = ranks[1] - ranks[0]
    shown = f"{ranks[0]}, {ranks[1]}, {ranks[2]}, ..., {ranks[-1]}; {n} ranks"
    if any(b - a != step for a, b in zip(ranks, ranks[1:])):
        return f"{n} ranks ({', '.join(map(str, ranks[:6]))}, ...)"
    if step == 2 and ranks[0] in (0, 1) and ranks[-1] >= world - 2:
        return f"the {('even', 'odd')[ranks[0]]} ranks ({shown})"
    if step == 1:
        return f"ranks {ranks[0]} to {ranks[-1]} ({n} ranks)"
    return f"every {step}th rank from {ranks[0]} ({shown})"


def check_spmd(world_size: int, program: Program, *, backend: Kind = "auto",
               limit: int = MAX_CHECKED_RANKS) -> SpmdReport:
    """Run ``program(backend)`` for every rank of ``world_size`` and check its groups offline.

    ``program`` takes a :class:`~backend.FakeBackend` for one rank (pass it on as
    ``init_device_mesh(..., backend=backend)``; meshes made without ``backend=`` bind
    to it too) and asks for groups as the real job would.  ``backend`` is the kind of
    creation to model: ``"gloo"`` (each group among its members), ``"nccl"`` (a family
    of ascending groups covering the world is one ``split_group``, collective over the
    world, as ``NcclBackend.from_env()`` creates it) or ``"auto"`` (NCCL if the program
    binds a ``"cuda"`` mesh, else Gloo).  Worlds over ``limit`` ranks are refused (the
    program runs once per rank).  Needs no torch and no processes.

    >>> from backend import GroupOptions, init_device_mesh
    >>> def program(backend):
    ...     mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    ...     everyone = mesh._flatten("all", GroupOptions(tag="grads"))  # a group of its own
    ...     if backend.rank == 1:  # rank 1 asks in another order
    ...         everyone.get_group(), mesh.get_group("tp")
    ...     else:
    ...         mesh.get_group("tp"), everyone.get_group()
    >>> report = check_spmd(4, program)
    >>> report.ok
    False
    >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
    check_spmd over 4 ranks: 3 groups asked for; problems found
    - ranks (0, 1) asked for groups in different orders and wait on each other: rank 0 waits
      at the 'tp' group (0, 1); rank 1 waits at the 'all' group (0, 1, 2, 3)
    - stuck behind those: rank 2 at the 'all' group (0, 1, 2, 3) (waiting for 0); rank 3 at
      the 'all' group (0, 1, 2, 3) (waiting for 0)
    Remedies: ...
    """
    _check_arguments(world_size, program, backend, limit)
    orders: list[list[_Request]] = []
    errors: list[tuple[int, int, str]] = []
    for rank in range(world_size):
        recorder = _Recorder(world_size, rank, backend)
        try:
            with overriding(recorder, recorder.device_types.add):
                result = program(recorder)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise _AwaitableProgram(
                    "check_spmd runs the program synchronously, but it returned an awaitable "
                    f"({show(result)}); pass a function that runs it, e.g. "
                    "lambda backend: asyncio.run(program(backend))")
        except _AwaitableProgram:
            raise
        except NotAMemberError as e:
            errors.append((rank, len(recorder.requests), show_error(e)))
        except Exception as e:  # the program's own failure (its message may not print)
            where = traceback.extract_tb(e.__traceback__)[-1]
            errors.append((rank, len(recorder.requests),
                           f"{show_error(e)} ({where.filename}:{where.lineno})"))
        orders.append(recorder.requests)
    return _match(world_size, orders, errors)


class _AwaitableProgram(BackendConfigError):
    """The program returned an awaitable: it was not run (a misuse, not a finding)."""


def _check_arguments(world_size: object, program: object, backend: object,
                     limit: object) -> None:
    if type(limit) is not int or limit < 1:
        raise BackendConfigError(f"limit must be a positive int, got {show(limit)}")
    if type(world_size) is not int or world_size < 1:
        raise BackendConfigError(f"world_size must be a positive int, got {show(world_size)}")
    if world_size > limit:
        raise BackendConfigError(
            f"world_size {show(world_size)} is over check_spmd's limit of {limit} ranks (it "
            "runs the program once per rank); pass limit= to check a larger world")
    if not callable(program):
        raise BackendConfigError(f"program must be callable, got {show(program)}")
    if not isinstance(backend, str) or backend not in _KINDS:
        raise BackendConfigError(
            f"backend must be one of {', '.join(map(repr, _KINDS))}, got {show(backend)}")


def _match(world_size: int, orders: list[list[_Request]],
           errors: list[tuple[int, int, str]]) -> SpmdReport:
    """Replay the rendezvous: a group completes when every member is at it."""
    at = [0] * world_size  # each rank's next request
    arrived: dict[str, set[int]] = defaultdict(set)
    ready: list[str] = []

    def reach(rank: int) -> None:
        if at[rank] < len(orders[rank]):
            req = orders[rank][at[rank]]
            arrived[req.group].add(rank)
            if len(arrived[req.group]) == len(req.members):
                ready.append(req.group)

    for rank in range(world_size):
        reach(rank)
    done = 0
    while ready:
        group = ready.pop()
        for rank in list(arrived.pop(group)):
            at[rank] += 1
            reach(rank)
        done += 1
    stuck = {r: orders[r][at[r]] for r in range(world_size) if at[r] < len(orders[r])}
    ahead = {r: {q.group for q in orders[r][at[r]:]} for r in stuck}  # what each will ask
    never: dict[str, tuple[str, Members, set[int]]] = {}
    waits: dict[int, set[int]] = {}
    for rank, req in stuck.items():
        missing = set(req.members) - arrived[req.group]
        skips = {m for m in missing if req.group not in ahead.get(m, ())}
        if skips:
            never.setdefault(req.group, (req.dim, _shown(req), set()))[2].update(skips)
        waits[rank] = missing - skips  # they will ask, but wait elsewhere first
    cycles = list(_cycles(waits))
    in_cycle = set().union(*cycles) if cycles else set()
    blocked = tuple((r, stuck[r].dim, _shown(stuck[r]), tuple(sorted(waits[r])))
                    for r in sorted(stuck) if r not in in_cycle and waits[r])
    return SpmdReport(
        world_size, len({q.group for o in orders for q in o}),
        tuple((d, m, tuple(sorted(a))) for d, m, a in never.values()),
        tuple(tuple((r, stuck[r].dim, _shown(stuck[r])) for r in sorted(c)) for c in cycles),
        blocked, tuple(errors))


def _shown(req: _Request) -> Members:
    return () if req.split else tuple(req.members)


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
