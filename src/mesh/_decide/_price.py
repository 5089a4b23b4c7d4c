"""Pricing a way on: its state moves, checkpoint reads, bytes per tier and seconds, by the
law of :class:`~mesh.Costs`.

Each tensor's move is ``mesh.reshard`` from the sharding the ranks held (the failed ones
``down``: they send nothing) to the same placements over the way's view.  Tensors of one
shape and placements share one plan (``reshard`` keeps its last plans), so the work grows
with the distinct tile patterns, not the tensors.  A way whose ``receivers`` are known (the
spares, the repaired ranks) prices only those ranks (``few_rows``: from their hosts and
domains, never listing the world).  A way that changes no group along the dims sharding a
tensor leaves every survivor its block (its coordinates there are its old ones), so that
tensor has no receiver; any other tensor's receivers are priced all at once by array
arithmetic (``bulk_classes``; without NumPy, rank by rank with ``few_rows``: O(ranks) per
tile pattern either way).  Both give what the plan gives (``Reshard.receives``, ``keeps``
and ``lost``), which the tests check element by element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from .._tensor import Reshard, Sharding, reshard
from ._bulk import Ask, Memo, bulk_classes, few_rows
from ._costs import LINK_TIERS, Costs, after_seconds, slowest
from ._egress import Egress
from ._machine import Topology
from ._values import BYTE_TIERS, Box, Kind, Way
from ._ways import Candidate

__all__ = ["ROW", "Pattern", "held", "priced"]


@attrs.frozen
class Pattern:
    """The tensors of the state that share one sharding (so one plan per way): their
    ``names``, the ``sharding``, the plan ``view`` it is on, the boxes no rank up holds."""

    names: tuple[str, ...]
    sharding: Sharding
    view: str
    lost: tuple[Box, ...]


Row = list[int]
"""Bytes one receiver gets: over host, domain and cross links, and from storage; then the
bytes of the blocks it rebuilds (those it gets anything of)."""

ROW = (*LINK_TIERS, "storage")
"""What a :data:`Row`'s entries count, in order."""


def held(s: Sharding) -> int:
    """Elements held over every rank of ``s``: each tile (a coordinate on the sharding
    dims) once per rank holding it, and the tiles partition the tensor."""
    tiles = math.prod(s.view.shape[i] for d in range(len(s.shape)) for i, _ in s.sharders(d))
    return math.prod(s.shape) * (s.view.ranks.size // tiles)


def _quiet(c: Candidate, s: Sharding, view: str) -> bool:
    """Whether no group changed along any view dim sharding ``s`` (so no rank receives)."""
    if c.changed is None:
        return False
    dims = c.changed[view]
    return not any(s.view.names[i] in dims for d in range(len(s.shape))
                   for i, _ in s.sharders(d))


_FEW_ROWS = 4096
"""Bulk rows fewer than this are priced one by one (as the brute force does); more, by
class with NumPy (each class's row once, the same operations in the same order, its
receivers counted in the sums)."""


@attrs.define
class _Moved:
    """What pricing a way gathers over the state's patterns: each tensor's plan and lost
    boxes, the bytes per tier so far, the rows of the receivers priced one by one, the
    patterns asked of :func:`bulk_rows`, and a restart's slowest reader's bytes."""

    egress: Egress
    moves: dict[str, Reshard] = attrs.field(factory=dict)
    gone: dict[str, tuple[Box, ...]] = attrs.field(factory=dict)
    total: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(BYTE_TIERS, 0))
    rows: dict[int, Row] = attrs.field(factory=dict)
    asks: list[Ask] = attrs.field(factory=list)
    busiest: int = 0


def _gathered(c: Candidate, patterns: Sequence[Pattern], failed: tuple[int, ...],
              topology: Topology | None, itemsize: int, memo: Memo) -> _Moved:
    """Each pattern's plan under ``c`` and the bytes it moves (see :class:`_Moved`)."""
    out = _Moved(egress=Egress(memo))
    for p in patterns:
        s, n = p.sharding, len(p.names)
        dst = Sharding(c.views[p.view], s.placements, s.shape)
        if c.restart:
            out.total["storage"] += held(dst) * itemsize * n
            out.busiest += math.prod(dst.local_shape(dst.view.ranks(0))) * itemsize * n
            out.gone.update(dict.fromkeys(p.names, (tuple((0, k) for k in s.shape),)))
            continue
        out.moves.update(dict.fromkeys(
            p.names, reshard(s, dst, topology, itemsize=itemsize, down=failed)))
        out.gone.update(dict.fromkeys(p.names, p.lost))
        out.total["kept"] += held(dst) * itemsize * n
        if _quiet(c, s, p.view):
            continue
        if c.receivers is None and memo.np is not None:
            out.asks.append((s, dst, itemsize * n))
            continue
        receivers = c.receivers if c.receivers is not None else tuple(dst.holders({}))
        for r, row in few_rows(memo, s, dst, receivers, out.egress.add,
                               n * itemsize).items():
            mine = out.rows.setdefault(r, [0, 0, 0, 0, 0])
            for i in range(5):
                mine[i] += row[i] * n * itemsize
    return out


def _move_seconds(memo: Memo, costs: Costs, got: _Moved, restart: bool) -> float:
    """The slowest receiver's time, or the slowest sender's and then the longest a receiver
    of anything takes after its bytes are in (the law of :class:`Costs`), the bytes per
    tier of every receiver added to ``got.total``."""
    bulk = (bulk_classes(memo, got.asks, got.egress.asked)  # rows, each receiver's class
            if got.asks else None)
    many = bulk is not None and bulk[1].size >= _FEW_ROWS
    listed = [[0, 0, 0, got.busiest, got.busiest]] if restart else list(got.rows.values())
    if bulk is not None and not many:
        rows = bulk[0][bulk[1]]  # per receiver, ascending
        listed += rows[rows.any(axis=1)].tolist()
    for row in [] if restart else listed:
        for t, b in zip(ROW, row):  # (the rebuilt bytes: no tier)
            got.total[t] += b
    out = max((costs.link_seconds({"host": h, "domain": d, "across": x}, st, cp)
               for h, d, x, st, cp in listed), default=0.0)
    after = max((after_seconds(costs, row) for row in listed if any(row[:3])), default=0.0)
    if bulk is not None and many:  # each class's row once, its receivers counted
        rows, cls = bulk
        counts = memo.np.bincount(cls, minlength=len(rows))
        for t, b in zip(ROW, (counts @ rows).tolist()):
            got.total[t] += b
        out = max(out, slowest(memo.np, costs, rows))
        linked = rows[rows[:, :3].any(axis=1)]
        if linked.size:
            after = max(after, float(after_seconds(costs, linked.T).max()))
    return out if restart else _sent(costs, got, out, after)


def _sent(costs: Costs, got: _Moved, out: float, after: float) -> float:
    """The way's moves (``out``: its slowest receiver's time) with what its senders and a
    shared bandwidth add: the receivers wait for the slowest sender, then do what follows
    (``after``: the longest), and every byte moved passes the shared resource."""
    got.total["kept"] -= sum(got.total[t] for t in ROW)  # (what a receiver got, not kept)
    sent = got.egress.seconds(costs, out - after)
    if sent:
        out = max(out, sent + after)
    if costs.shared_gbps is not None:
        moved = sum(got.total[t] for t in LINK_TIERS)
        out = max(out, 8 * moved / (costs.shared_gbps * 1e9))
    return out


def priced(c: Candidate, patterns: Sequence[Pattern], failed: tuple[int, ...],
           topology: Topology | None, costs: Costs, itemsize: int, old_ranks: int,
           memo: Memo, order: Sequence[str]) -> Way:
    """The way ``c`` with its moves, lost boxes, bytes and prices (tensors listed in
    ``order``)."""
    got = _gathered(c, patterns, failed, topology, itemsize, memo)
    seconds = ((getattr(costs, c.fixed) if c.fixed else 0.0)
               + _move_seconds(memo, costs, got, c.restart)
               + (0.0 if c.restart else costs.rebind_s)
               + c.pairs[0] * costs.reconfigure_s + c.pairs[1] * costs.create_s)
    throughput = c.working / old_ranks
    kept, reconfigured, created = c.groups
    moves = {name: got.moves[name] for name in order if name in got.moves}  # state's order
    gone = {name: got.gone[name] for name in order}
    return Way._trusted(Kind(c.kind), c.label, c.views, moves, gone, got.total,
                        {"kept": kept, "reconfigured": reconfigured, "created": created},
                        seconds, throughput, seconds + (1 - throughput) * costs.horizon_s,
                        c.working)
