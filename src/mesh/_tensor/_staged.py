"""A :class:`Partial` source reduced on the way: where each sum happens in a reshard plan.

Three ways to deliver a partial source's reduced value (``p`` contributions, one per
coordinate of the partial dims), priced on the whole plan and the cheapest taken
(:attr:`Reshard.partial`; ties go to the one named first, which has fewer phases or a less
busy busiest rank):

- ``"sum at destination"``: every receiver gets one contribution per partial coordinate
  (its own is free) and reduces them: one phase, ``p·E`` per receiver of a box of ``E``
  elements.  The only way with a partial destination kept partial, or ``down`` ranks.
- ``"reduce-scatter then gather"``: per *cell* (a box in one source tile and one
  destination tile), a *group* of one holder per partial coordinate (a receiver of the
  cell where one holds it) cuts the box into ``p`` parts along its longest dim (as
  ``torch.chunk``) and reduces part ``k`` at its ``k``-th member (phase 1: ``(p-1)·E``);
  each reducer sends its reduced part to every receiver of the cell but itself (phase 2).
  As torch's reduce-scatter then all-gather, for any two meshes.
- ``"reduce at one holder then scatter"``: the same with one part, reduced at one member
  (a receiver where one is): phase 1 ``(p-1)·E`` to it, phase 2 ``E`` to each other
  receiver.

A transfer's ``stage`` says which: 0, sent from the source's local data to be placed (and,
for a partial source summed at the destination, reduced there); 1, a contribution sent to
its reducer (phase 1); 2, a reduced part sent by its reducer (phase 2, after the sums).
:meth:`Reshard.reduces` lists the boxes a rank reduces; :meth:`Reshard.keeps` of a staged
plan lists the reduced parts a receiver reduced itself.

>>> from mesh import MeshView, Partial, Replicate, Shard, Sharding, reshard
>>> grid = MeshView.from_shape((2, 4), ("dp", "tp"))
>>> plan = reshard(Sharding(grid, (Shard(0), Partial()), (7, 5)),
...                Sharding(grid, (Replicate(), Replicate()), (7, 5)))
>>> plan.partial, plan.bytes_moved  # summing at each destination would move 3,920 B
('reduce-scatter then gather', 1400)
>>> plan.reduces(1)  # rank 1 (dp 0, tp 1) sums columns 2-3 of dp 0's rows 0-3
(((0, 4), (2, 4)),)
>>> [(t.source, t.stage, t.contribution) for t in plan.receives(1)][:4]
[(0, 2, ()), (0, 1, (0,)), (2, 2, ()), (2, 1, (2,))]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from typing import Protocol, TypeVar

from ._asked import Asked
from ._sharding import Label

_T = TypeVar("_T")

Box = tuple[tuple[int, int], ...]
"""A box of the global tensor: ``(start, stop)`` per tensor dim."""


class _Holders(Protocol):
    @property
    def ranks(self) -> tuple[int, ...]: ...


class Reshard(Protocol):
    """What this module asks of a plan (:class:`~._reshard.Reshard`)."""

    @property
    def _kept_partial(self) -> tuple[tuple[int, int], ...]: ...

    def _receivers(self, tile: Label) -> dict[int, int]: ...

    def _holders(self, tile: Label) -> Mapping[tuple[int, ...], _Holders]: ...

    def _cells_of(self, side: str, tile: Label) -> tuple[tuple[Box, int, Label], ...]: ...

    def _wants(self, combo: tuple[int, ...], rank: int) -> bool: ...

    def _memo(self, asked: Asked, of: Hashable, make: Callable[[], _T]) -> _T: ...

__all__ = ["REDUCE_AT_ONE", "REDUCE_SCATTER", "STAGED_LIMIT", "STRATEGIES",
           "SUM_AT_DESTINATION", "Box", "Group", "Reshard", "Table", "elements", "keeps",
           "pairs", "parts", "receives", "reduces", "sends", "split"]

SUM_AT_DESTINATION = "sum at destination"
REDUCE_SCATTER = "reduce-scatter then gather"
REDUCE_AT_ONE = "reduce at one holder then scatter"
STRATEGIES = (SUM_AT_DESTINATION, REDUCE_SCATTER, REDUCE_AT_ONE)
"""The ways to reduce a partial source, in the order ties are broken."""

STAGED_LIMIT = 1 << 16
"""The most destination ranks a plan prices the three ways for (each needs the plan's
totals); past it a partial source is summed at the destination."""

Table = dict[tuple[int, tuple[int, ...], int], list[Box]]
"""(peer, contribution, stage) -> boxes: one rank's transfers before they are grouped."""


def elements(box: Box) -> int:
    return math.prod(b - a for a, b in box)


def split(box: Box, m: int) -> list[Box]:
    """``box`` cut into ``m`` parts along its longest dim (the first of equals), as
    ``torch.chunk`` cuts: parts of ``ceil(extent / m)``, trailing ones smaller or empty.

    >>> split(((0, 4), (0, 7)), 3)
    [((0, 4), (0, 3)), ((0, 4), (3, 6)), ((0, 4), (6, 7))]
    """
    if m == 1 or not box:
        return [box]
    d = max(range(len(box)), key=lambda i: (box[i][1] - box[i][0], -i))
    a, b = box[d]
    c = -(-(b - a) // m)
    return [(*box[:d], (min(a + k * c, b), min(a + (k + 1) * c, b)), *box[d + 1:])
            for k in range(m)]


Group = tuple[tuple[tuple[tuple[int, ...], int], ...], tuple[int, ...],
              tuple[tuple[Box, int], ...]]
"""(members: (contribution, rank) each, receivers, parts: (box, reducer) each)."""


def groups(plan: Reshard, src_tile: Label, dst_tile: Label
           ) -> list[tuple[tuple[tuple[int, ...], int], ...]]:
    """Per coordinate of the partial dims the destination keeps (one group without them),
    one holder per partial coordinate of ``src_tile`` with it, (coordinate, rank) in
    coordinate order: a receiver of ``dst_tile`` where one holds it, else a holder picked
    by the destination tile's number (so replicas share the reducing)."""
    receivers = plan._receivers(dst_tile)
    number = min(receivers.values()) // len(receivers) if receivers else 0
    out: dict[tuple[int, ...], list[tuple[tuple[int, ...], int]]] = {}
    for combo, holders in sorted(plan._holders(src_tile).items()):
        near = [h for h in holders.ranks if h in receivers]
        pool = near or list(holders.ranks)
        kept = tuple(combo[k] for k, _ in plan._kept_partial)
        out.setdefault(kept, []).append((combo, pool[number % len(pool)]))
    return [tuple(members) for members in out.values()]


def parts(plan: Reshard, strategy: str, box: Box, src_tile: Label, dst_tile: Label
          ) -> list[Group]:
    """The cell's groups, each with its receivers (those that take its contributions) and
    its parts, (part, reducer), empty parts left out."""
    return plan._memo("parts", (strategy, box, src_tile, dst_tile),
                      lambda: _parts(plan, strategy, box, src_tile, dst_tile))


def _parts(plan: Reshard, strategy: str, box: Box, src_tile: Label, dst_tile: Label
           ) -> list[Group]:
    out: list[Group] = []
    receivers = tuple(plan._receivers(dst_tile))
    for members in groups(plan, src_tile, dst_tile):
        mine = tuple(r for r in receivers if plan._wants(members[0][0], r))
        if strategy == REDUCE_SCATTER:
            cut = zip(split(box, len(members)), (r for _, r in members))
            out.append((members, mine, tuple((b, r) for b, r in cut if elements(b))))
            continue
        one = next((r for _, r in members if r in mine), members[0][1])
        out.append((members, mine, ((box, one),) if elements(box) else ()))
    return out


def receives(plan: Reshard, strategy: str, rank: int, src_tile: Label | None,
             dst_tile: Label | None) -> Table:
    """What ``rank`` receives: contributions to reduce (its source tile's cells, where it
    reduces a part), reduced parts (its destination tile's cells)."""
    table: Table = defaultdict(list)
    if src_tile is not None:
        for box, _, dst in plan._cells_of("src", src_tile):
            for members, _, cut in parts(plan, strategy, box, src_tile, dst):
                for part, reducer in cut:
                    if reducer == rank:
                        for combo, h in members:
                            if h != rank:
                                table[h, combo, 1].append(part)
    if dst_tile is not None:
        for box, _, src in plan._cells_of("dst", dst_tile):
            for _, receivers, cut in parts(plan, strategy, box, src, dst_tile):
                for part, reducer in cut if rank in receivers else ():
                    if reducer != rank:
                        table[reducer, (), 2].append(part)
    return table


def sends(plan: Reshard, strategy: str, rank: int, src_tile: Label, combo: tuple[int, ...]
          ) -> Table:
    """What ``rank`` sends: its contribution of each part another member reduces, and each
    part it reduces to every other receiver of the cell."""
    table: Table = defaultdict(list)
    for box, _, dst in plan._cells_of("src", src_tile):
        for members, receivers, cut in parts(plan, strategy, box, src_tile, dst):
            member = any(h == rank for _, h in members)
            for part, reducer in cut:
                if member and reducer != rank:
                    table[reducer, combo, 1].append(part)
                if reducer == rank:
                    for r in receivers:
                        if r != rank:
                            table[r, (), 2].append(part)
    return table


def reduces(plan: Reshard, strategy: str, rank: int, src_tile: Label) -> list[Box]:
    """The parts ``rank`` reduces."""
    return [part for box, _, dst in plan._cells_of("src", src_tile)
            for _, _, cut in parts(plan, strategy, box, src_tile, dst)
            for part, reducer in cut if reducer == rank]


def keeps(plan: Reshard, strategy: str, rank: int, dst_tile: Label) -> list[Box]:
    """The reduced parts of ``rank``'s destination block it reduces itself."""
    return [part for box, _, src in plan._cells_of("dst", dst_tile)
            for _, receivers, cut in parts(plan, strategy, box, src, dst_tile)
            for part, reducer in cut if reducer == rank and rank in receivers]


def pairs(plan: Reshard, strategy: str, tiles: list[Label]
          ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Elements per (sender, receiver) in each phase, over the destination ``tiles``."""
    first: dict[tuple[int, int], int] = defaultdict(int)
    second: dict[tuple[int, int], int] = defaultdict(int)
    for tile in tiles:
        for box, _, src in plan._cells_of("dst", tile):
            for members, receivers, cut in parts(plan, strategy, box, src, tile):
                for part, reducer in cut:
                    n = elements(part)
                    for _, h in members:
                        if h != reducer:
                            first[h, reducer] += n
                    for r in receivers:
                        if r != reducer:
                            second[reducer, r] += n
    return dict(first), dict(second)
