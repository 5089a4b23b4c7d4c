"""Pricing a way on: its state moves, checkpoint reads, bytes per tier and seconds, by the
law of :class:`~mesh.Costs`.

Each tensor's move is ``mesh.reshard`` from the sharding the ranks held (the failed ones
``down``: they send nothing) to the same placements over the way's view.  Tensors of one
shape and placements share one plan (``reshard`` keeps its last plans), so the work grows
with the distinct tile patterns, not the tensors.  A way whose ``receivers`` are known (the
spares, the repaired ranks) asks only those ranks what they receive.  A way that changes
no group along the dims sharding a tensor leaves every survivor its block (its coordinates
there are its old ones), so that tensor has no receiver; any other tensor's plan is read
whole (its traffic lists every receiver: O(ranks) per tile pattern).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from .._tensor import Reshard, Sharding, reshard
from ._costs import Costs
from ._machine import Topology
from ._values import Box, Kind, Way
from ._ways import Candidate

__all__ = ["Pattern", "held", "priced"]



@attrs.frozen
class Pattern:
    """The tensors of the state that share one sharding (so one plan per way): their
    ``names``, the ``sharding``, the plan ``view`` it is on, the boxes no rank up holds."""

    names: tuple[str, ...]
    sharding: Sharding
    view: str
    lost: tuple[Box, ...]

Row = list[int]
"""Bytes one receiver gets: over host, domain and cross links, and from storage."""


def held(s: Sharding) -> int:
    """Elements held over every rank of ``s``: each tile (a coordinate on the sharding
    dims) once per rank holding it, and the tiles partition the tensor."""
    tiles = math.prod(s.view.shape[i] for d in range(len(s.shape)) for i, _ in s.sharders(d))
    return math.prod(s.shape) * (s.view.ranks.size // tiles)


def _elements(boxes: Sequence[Box]) -> int:
    return sum(math.prod(b - a for a, b in box) for box in boxes)


class _Tiers:
    """The tier (1 host, 2 domain, 3 cross) between two ranks, hosts memoized."""

    def __init__(self, topology: Topology | None) -> None:
        self.topology = topology
        self.at: dict[int, tuple[int, int]] = {}

    def where(self, rank: int) -> tuple[int, int]:
        got = self.at.get(rank)
        if got is None:
            t = self.topology
            assert t is not None, "asked with a topology only"
            got = self.at[rank] = (t.host(rank), t.domain(rank))
        return got

    def __call__(self, a: int, b: int) -> int:
        if self.topology is None:
            return 3
        (ha, da), (hb, db) = self.where(a), self.where(b)
        return 1 if ha == hb else 2 if da == db else 3


def _rows(plan: Reshard, receivers: tuple[int, ...] | None, lost: bool, tiers: _Tiers
          ) -> dict[int, Row]:
    """Per receiving rank, its bytes per tier and from storage, for one tensor."""
    size = plan.itemsize
    out: dict[int, Row] = {}
    if receivers is not None:
        for r in receivers:
            row = out[r] = [0, 0, 0, 0]
            for t in plan.receives(r):
                row[tiers(t.source, r) - 1] += t.elements * size
    else:
        for (s, d), n in plan.traffic().items():
            out.setdefault(d, [0, 0, 0, 0])[tiers(s, d) - 1] += n * size
    if lost:
        for r in (receivers if receivers is not None else plan.dst.holders({})):
            n = _elements(plan.lost(r))
            if n:
                out.setdefault(r, [0, 0, 0, 0])[3] += n * size
    return out


def _quiet(c: Candidate, s: Sharding, view: str) -> bool:
    """Whether no group changed along any view dim sharding ``s`` (so no rank receives)."""
    if c.changed is None:
        return False
    dims = c.changed[view]
    return not any(s.view.names[i] in dims for d in range(len(s.shape))
                   for i, _ in s.sharders(d))


def priced(c: Candidate, patterns: Sequence[Pattern], failed: tuple[int, ...],
           topology: Topology | None, costs: Costs, itemsize: int, old_ranks: int) -> Way:
    """The way ``c`` with its moves, lost boxes, bytes and prices."""
    rows: dict[int, Row] = {}
    total = dict.fromkeys(("local", "host", "domain", "cross", "storage"), 0)
    moves: dict[str, Reshard] = {}
    gone: dict[str, tuple[Box, ...]] = {}
    busiest = 0
    tiers = _Tiers(topology)
    for p in patterns:
        s, n = p.sharding, len(p.names)
        dst = Sharding(c.views[p.view], s.placements, s.shape)
        if c.restart:
            total["storage"] += held(dst) * itemsize * n
            busiest += math.prod(dst.local_shape(dst.view.ranks(0))) * itemsize * n
            gone.update(dict.fromkeys(p.names, (tuple((0, k) for k in s.shape),)))
            continue
        plan = reshard(s, dst, topology, itemsize=itemsize, down=failed)
        moves.update(dict.fromkeys(p.names, plan))
        gone.update(dict.fromkeys(p.names, p.lost))
        total["local"] += held(dst) * itemsize * n
        receivers = () if _quiet(c, s, p.view) else c.receivers
        for r, row in _rows(plan, receivers, bool(p.lost), tiers).items():
            mine = rows.setdefault(r, [0, 0, 0, 0])
            for i in range(4):
                mine[i] += row[i] * n
    for row in rows.values():
        for t, b in zip(("host", "domain", "cross", "storage"), row):
            total[t] += b
    total["local"] -= sum(total[t] for t in ("host", "domain", "cross", "storage"))
    if c.restart:  # every rank reads its block; the first rank's is the largest
        total["local"], rows[-1] = 0, [0, 0, 0, busiest]
    move_s = max((costs.link_seconds({"host": h, "domain": d, "cross": x}, st)
                  for h, d, x, st in rows.values()), default=0.0)
    seconds = ((getattr(costs, c.fixed) if c.fixed else 0.0) + move_s
               + c.pairs[0] * costs.reconfigure_s + c.pairs[1] * costs.create_s)
    throughput = c.working / old_ranks
    kept, reconfigured, created = c.groups
    return Way._trusted(Kind(c.kind), c.label, c.views, moves, gone, total,
                        {"kept": kept, "reconfigured": reconfigured, "created": created},
                        seconds, throughput, seconds + (1 - throughput) * costs.horizon_s,
                        c.working)
