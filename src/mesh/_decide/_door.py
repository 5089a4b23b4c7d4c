"""The decision's door: :func:`recover` checks its input once, then enumerates the ways on
(``_ways``) and prices each (``_price``), trusting what it checked.

Everything checked here costs O(views + |failed| + |spares| + tensors × |failed|): the plan
runs once on the world, each failed rank and spare is located, and each tensor's lost
boxes are found from the failed ranks alone (a tile is lost when every rank holding it
failed: the failed ranks holding it are counted against how many hold it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from .._core import (
    MAX_LISTED_RANKS,
    MeshTypeError,
    MeshView,
    RecoveryError,
    as_int,
    as_name,
    items_of,
    numpy,
    ordered,
    show,
)
from .._recover import Derivation, derived, failed_ranks, spare_ranks
from .._tensor import Sharding
from ._bulk import Memo
from ._costs import Costs
from ._machine import Topology
from ._price import Pattern, priced
from ._values import Box, Kind, Recovery, Refusal
from ._ways import Context, candidates

__all__ = ["MAX_STATE_TENSORS", "lost_boxes", "recover"]

MAX_STATE_TENSORS = 1 << 20
"""The most tensors a state may name."""


def recover(plan: Derivation, world: MeshView, failed: Sequence[int], *,
            state: Mapping[str, Sharding] | None = None, spares: Sequence[int] = (),
            topology: Topology | None = None, costs: Costs | None = None,
            itemsize: int = 4, checkpoint: bool = True,
            limit: int = MAX_LISTED_RANKS) -> Recovery:
    """Every way on after ``failed`` ranks, priced and ranked: a :class:`~mesh.Recovery`.

    ``plan`` and ``world`` as :func:`~mesh.survive` takes them (``plan(world)`` gives the
    named views), ``failed`` the failed ranks, ``spares`` ranks outside the world that can
    take a failed rank's place (the lowest failed rank gets the first).  ``state``: tensor
    name -> :class:`~mesh.Sharding` over one of the plan's views (parameters and optimizer
    states, as ``backend.sharding_of`` reads them), of ``itemsize`` bytes per element.
    ``topology``: the machine (link tiers, and which ranks a host or fast domain eviction
    leaves out); spares must be on it, on hosts of the failed ranks' size.  ``costs``: the
    prices (:class:`~mesh.Costs`, its defaults when None).  ``checkpoint``: whether a
    checkpoint holds the state (the lost boxes and a restart read it).

    Ways (:class:`~mesh.Way`, cheapest ``cost`` first): ``spare``, ``drop`` along each world
    dim, ``refactor`` along each, ``evict_host``, ``evict_domain``, ``restart``, ``wait``;
    each impossible one is in ``refused`` with its reason.  Bad input raises a
    :class:`~mesh.MeshError` naming it before any way is built: failed ranks outside the
    world, a spare in it (:class:`~mesh.SurvivalError`), a state tensor over none of the
    plan's views, an element whose every holder failed with ``checkpoint=False``, a spare
    off the topology or on a host of another size (:class:`~mesh.RecoveryError`).

    Cost: each way lists its surviving world once (at most ``limit`` ranks) and plans each
    distinct tile pattern of the state once; see ``bench/recover.py``.

    >>> from mesh import MeshView, Replicate, Shard, Sharding, recover
    >>> def plan(world):
    ...     return {"world": world}
    >>> world = MeshView.from_shape((4, 2), ("dp", "tp"))
    >>> w = Sharding(world, (Replicate(), Shard(0)), (8, 8))  # a weight, TP-sharded
    >>> r = recover(plan, world, [3], state={"w": w}, spares=[8])
    >>> [(way.kind.value, round(way.seconds, 1), way.throughput) for way in r.ways]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('spare', 5.0, 1.0), ('restart', 604.0, 1.0), ('drop', 1.2, 0.75),
     ('drop', 1.2, 0.5), ('wait', 3605.0, 1.0)]
    >>> best = r.best  # rank 3's half of w comes from its replica, rank 7
    >>> best.moves["w"].receives(8)[0].source, best.bytes["across"], best.lost["w"]
    (7, 128, ())
    >>> best.communicators
    mappingproxy({'kept': 4, 'reconfigured': 0, 'created': 2})
    >>> [x.label for x in r.refused][:1]
    ["re-factor 'dp' 4 -> 3"]
    """
    old, dead, given, machine = _failure(plan, world, failed, spares, topology)
    prices = _costs(costs)
    size = as_int(itemsize, "itemsize")
    if size < 1:
        raise RecoveryError(f"itemsize must be an int >= 1 (bytes per element), got {size}")
    if not isinstance(checkpoint, bool):
        raise MeshTypeError(f"checkpoint must be a bool, got {show(checkpoint)}")
    patterns, order = _patterns(state, old, dead)
    if not checkpoint:
        _all_held(patterns, dead)
    most = as_int(limit, "limit")
    if most < 0:
        raise RecoveryError(f"limit must be an int >= 0 (ranks a way may list), got {most}")
    found, refused = candidates(Context(plan, world, old, dead, given, machine, most))
    if not checkpoint:
        refused += [(c.kind, c.label, "it reads every tensor from the checkpoint, and "
                     "checkpoint=False") for c in found if c.restart]
        found = [c for c in found if not c.restart]
    memo = Memo(numpy(), dead, machine)
    ways = [priced(c, patterns, dead, machine, prices, size, world.size(), memo, order)
            for c in found]
    kinds = list(Kind)
    ways.sort(key=lambda w: (w.cost, kinds.index(w.kind), w.label))
    return Recovery._trusted(dead, given, tuple(ways),
                             tuple(Refusal._trusted(k, lab, why) for k, lab, why in refused),
                             prices)


def _failure(plan: object, world: object, failed: Sequence[int], spares: Sequence[int],
             topology: object) -> tuple[dict[str, MeshView], tuple[int, ...],
                                        tuple[int, ...], Topology | None]:
    """The plan's old views, the failed ranks and the spares (ascending, checked against
    the world) and the topology (checked against both)."""
    if not callable(plan):
        raise MeshTypeError(f"plan must be a function of a world view returning named views, "
                            f"got {show(plan)}")
    if not isinstance(world, MeshView):
        raise MeshTypeError(f"recover's world must be a MeshView, got {show(world)}")
    old = derived(plan, world, "world")
    dead = failed_ranks(failed, (world.ranks,))
    if not dead:
        raise RecoveryError("recover needs at least one failed rank, got none")
    given = spare_ranks(spares, len(ordered(spares, "spares")), world.ranks)
    return old, dead, given, _machine(topology, world, dead, given)


def _all_held(patterns: list[Pattern], dead: tuple[int, ...]) -> None:
    """Without a checkpoint, every element must be held by some rank up."""
    for p in patterns:
        if p.lost:
            raise RecoveryError(
                f"tensor {p.names[0]!r}: the box {p.lost[0]} is held by failed ranks "
                f"only (failed: {list(dead[:16])}) and checkpoint=False: no way on "
                "keeps it")


def _machine(topology: object, world: MeshView, dead: tuple[int, ...],
             spares: tuple[int, ...]) -> Topology | None:
    """The topology, checked: it places every rank of the world and every spare, and each
    spare's host has as many devices as the first failed rank's."""
    if topology is None:
        return None
    if not isinstance(topology, Topology):
        raise MeshTypeError(f"topology must be a mesh.Topology or None, got {show(topology)}")
    if world.ranks.max_rank >= topology.world_size:
        raise RecoveryError(f"the world reaches rank {world.ranks.max_rank}, beyond the "
                            f"topology's {topology.world_size} ranks ({topology!r})")
    want = topology.host_size(topology.host(dead[0]))
    for s in spares:
        if s >= topology.world_size:
            raise RecoveryError(f"spare rank {s} is not on the topology ({topology!r}, "
                                f"{topology.world_size} ranks): a spare must be a rank of it")
        got = topology.host_size(topology.host(s))
        if got != want:
            raise RecoveryError(f"spare rank {s} is on host {topology.host(s)} of {got} "
                                f"devices, the failed rank {dead[0]}'s host has {want}")
    return topology


def _costs(costs: object) -> Costs:
    if costs is None:
        return Costs()
    if not isinstance(costs, Costs):
        raise MeshTypeError(f"costs must be a mesh.Costs or None, got {show(costs)}")
    return costs


def _patterns(state: object, old: dict[str, MeshView], dead: tuple[int, ...]
              ) -> tuple[list[Pattern], list[str]]:
    """The state's tensors grouped by sharding (every sharding over one of the views, none
    partial; each group's lost boxes), and the tensor names in the state's order."""
    if state is None:
        return [], []
    order: list[str] = []
    names = {v: n for n, v in reversed(old.items())}  # the first name of each view
    out: dict[Sharding, list[str]] = {}
    where: dict[Sharding, str] = {}
    for key, s in items_of(state, "state", "a mapping of tensor names to mesh.Sharding",
                           limit=MAX_STATE_TENSORS):
        name = as_name(key, "every tensor name in state")
        if not isinstance(s, Sharding):
            raise MeshTypeError(f"state[{name!r}] must be a mesh.Sharding, got {show(s)}")
        view = names.get(s.view)
        if view is None:
            raise RecoveryError(f"state[{name!r}] is sharded over {s.view!r}, which is none "
                                f"of the plan's views {list(old)!r}: shard the state over "
                                "the views plan(world) gives")
        if s.partial_dims:
            raise RecoveryError(f"state[{name!r}] is Partial over view dim "
                                f"{s.view.names[s.partial_dims[0]]!r}: a state to recover "
                                "holds values, not partial sums; reduce it first")
        out.setdefault(s, []).append(name)
        order.append(name)
        where[s] = view
    return ([Pattern(tuple(ns), s, where[s], lost_boxes(s, dead)) for s, ns in out.items()],
            order)


def lost_boxes(s: Sharding, failed: tuple[int, ...]) -> tuple[Box, ...]:
    """The boxes of ``s`` whose every holder is in ``failed`` (each in ``s``'s universe):
    a rank's tile is its coordinates on the dims that shard or are partial, and
    ``ranks / Π sizes of those dims`` ranks hold each tile."""
    key_dims = sorted({i for d in range(len(s.shape)) for i, _ in s.sharders(d)}
                      | set(s.partial_dims))
    holders = s.view.ranks.size // math.prod(s.view.shape[i] for i in key_dims)
    if len(failed) < holders:  # too few failed ranks to hold every copy of a tile
        return ()
    tiles: Counter[tuple[int, ...]] = Counter()
    first: dict[tuple[int, ...], int] = {}
    for r in failed:
        c = s.coordinate(r)
        key = tuple(c[i] for i in key_dims)
        tiles[key] += 1
        first.setdefault(key, r)
    return tuple(sorted({box for key, n in tiles.items() if n == holders
                         for box in s.boxes(first[key])}))
