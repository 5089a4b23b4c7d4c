"""``check_spmd``: run a program once per rank on a recording fake backend, and check
offline that every group it asks for can be created (no torch, no processes).

At run time (see :mod:`backend._rendezvous`) a group is created when all its members have
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
"""

from __future__ import annotations

import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from layout import show
from mesh import MeshView

from ._errors import BackendConfigError, NotInMeshError
from ._fake import FakeBackend, FakeGroup
from ._options import GroupOptions
from ._torch_groups import Plan, family_id, plan_creation

__all__ = ["SpmdReport", "check_spmd"]

Program = Callable[[FakeBackend], object]


@attrs.frozen
class _Request:
    """One group a rank asked for, in its order."""

    group: tuple[Any, ...]  # the group's identity: (universe, dim layout, options, members)
    dim: str
    members: tuple[int, ...]


class _Recorder(FakeBackend):
    """A FakeBackend that logs every group it creates (once per family, as the real
    backends create) with the group's members."""

    def __init__(self, world_size: int, rank: int, split: bool) -> None:
        super().__init__(world_size, rank)
        self.requests: list[_Request] = []
        self._split = split

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> FakeGroup:
        group = super()._create(view, dim, options)
        plan = plan_creation(view, dim, self.rank, self.world_size, options,
                             can_split=self._split)
        if plan is not Plan.DEFAULT:
            members = tuple(range(self.world_size)) if plan is Plan.SPLIT else group.ranks
            ident = (*family_id(view, dim, options), () if plan is Plan.SPLIT else members)
            self.requests.append(_Request(ident, view.names[dim], members))
        return group


@attrs.frozen
class SpmdReport:
    """What :func:`check_spmd` found; ``ok`` is True when every group can be created.

    ``never_created``: ``(dim, members, ranks that never ask)`` per incomplete group;
    ``waiting``: sets of ranks whose orders wait on each other, each rank with the group
    it is stuck at; ``blocked``: the other stuck ranks ``(rank, dim, members, the ranks
    it waits for)``, stuck behind the above; ``errors``: ``(rank, call index, message)``
    per program that raised.  ``str()`` reads as a report.
    """

    world_size: int
    groups: int
    never_created: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    waiting: tuple[tuple[tuple[int, str, tuple[int, ...]], ...], ...]
    blocked: tuple[tuple[int, str, tuple[int, ...], tuple[int, ...]], ...]
    errors: tuple[tuple[int, int, str], ...]

    @property
    def ok(self) -> bool:
        """Whether every group every rank asks for can be created, and no program raised."""
        return not (self.never_created or self.waiting or self.blocked or self.errors)

    def __str__(self) -> str:
        head = (f"check_spmd over {self.world_size} ranks: {self.groups} groups asked for; "
                + ("every one can be created" if self.ok else "problems found"))
        lines = [head]
        for dim, members, absent in self.never_created:
            lines.append(f"- the {dim!r} group {_ranks(members)} is never asked for by rank"
                         f"{'s' if len(absent) > 1 else ''} {_ranks(absent)} (a skipped dim: "
                         "its other members would wait until their timeout)")
        for cycle in self.waiting:
            waits = "; ".join(f"rank {r} waits at the {d!r} group {_ranks(m)}"
                              for r, d, m in cycle)
            lines.append(f"- ranks {_ranks(tuple(r for r, _, _ in cycle))} asked for groups in "
                         f"different orders and wait on each other: {waits}")
        if self.blocked:
            shown = "; ".join(f"rank {r} at the {d!r} group {_ranks(m)} (waiting for "
                              f"{_ranks(w)})" for r, d, m, w in self.blocked[:8])
            more = f" and {len(self.blocked) - 8} more" if len(self.blocked) > 8 else ""
            lines.append(f"- stuck behind those: {shown}{more}")
        for rank, call, message in self.errors:
            lines.append(f"- rank {rank}'s program raised at its group request {call}: "
                         f"{message}")
        if not self.ok:
            lines.append("Remedies: ask for the same groups in the same order on every "
                         "rank (mesh.materialize() creates a mesh's groups in dim order); "
                         "guard requests on views a rank is not in with "
                         "mesh.get_coordinate() is not None.")
        return "\n".join(lines)


def _ranks(ranks: tuple[int, ...], most: int = 8) -> str:
    shown = ", ".join(map(str, ranks[:most]))
    return f"({shown}{', ...' if len(ranks) > most else ''})" if len(ranks) != 1 \
        else f"{ranks[0]}"


def check_spmd(world_size: int, program: Program, *, split: bool = False) -> SpmdReport:
    """Run ``program(backend)`` for every rank of ``world_size`` and check its groups offline.

    ``program`` takes a :class:`~backend.FakeBackend` for one rank (pass it on as
    ``init_device_mesh(..., backend=backend)``) and asks for groups as the real job
    would.  ``split=True`` models NCCL's ``split_group`` (a family covering the world is
    created by every rank at once).  Needs no torch and no processes.

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
    if type(world_size) is not int or world_size < 1:
        raise BackendConfigError(f"world_size must be a positive int, got {show(world_size)}")
    if not callable(program):
        raise BackendConfigError(f"program must be callable, got {show(program)}")
    orders: list[list[_Request]] = []
    errors: list[tuple[int, int, str]] = []
    for rank in range(world_size):
        recorder = _Recorder(world_size, rank, split)
        try:
            program(recorder)
        except NotInMeshError as e:
            errors.append((rank, len(recorder.requests), f"NotInMeshError: {e}"))
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            errors.append((rank, len(recorder.requests),
                           f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"))
        orders.append(recorder.requests)
    return _match(world_size, orders, errors)


def _match(world_size: int, orders: list[list[_Request]],
           errors: list[tuple[int, int, str]]) -> SpmdReport:
    """Replay the rendezvous: a group completes when every member is at it."""
    at = [0] * world_size  # each rank's next request
    arrived: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    ready: list[tuple[Any, ...]] = []

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
    never: dict[tuple[Any, ...], tuple[str, tuple[int, ...], set[int]]] = {}
    waits: dict[int, set[int]] = {}
    for rank, req in stuck.items():
        missing = set(req.members) - arrived[req.group]
        skips = {m for m in missing if req.group not in ahead.get(m, ())}
        if skips:
            never.setdefault(req.group, (req.dim, req.members, set()))[2].update(skips)
        waits[rank] = missing - skips  # they will ask, but wait elsewhere first
    cycles = list(_cycles(waits))
    in_cycle = set().union(*cycles) if cycles else set()
    blocked = tuple((r, stuck[r].dim, stuck[r].members, tuple(sorted(waits[r])))
                    for r in sorted(stuck) if r not in in_cycle and waits[r])
    return SpmdReport(
        world_size, len({q.group for o in orders for q in o}),
        tuple((d, m, tuple(sorted(a))) for d, m, a in never.values()),
        tuple(tuple((r, stuck[r].dim, stuck[r].members) for r in sorted(c)) for c in cycles),
        blocked, tuple(errors))


def _cycles(waits: dict[int, set[int]]) -> Iterator[set[int]]:
    """The strongly connected sets of the wait-for graph that wait on each other."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    found: list[set[int]] = []
    counter = [0]

    def visit(v: int) -> None:  # Tarjan's algorithm, iteratively deep enough for 1M ranks
        work = [(v, iter(sorted(waits.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(waits.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1 or node in waits.get(node, ()):
                    found.append(comp)

    for v in sorted(waits):
        if v not in index:
            visit(v)
    return iter(found)
