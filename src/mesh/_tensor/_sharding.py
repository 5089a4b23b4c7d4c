"""A tensor's sharding over a view: :class:`Sharding`, with torch DTensor's semantics exactly.

A sharding maps (rank, local index) to a global index, as CuTe's thread-value layouts map
(thread, value) to a coordinate.  Each placement touches one tensor dim, so a rank's local
block is a product over tensor dims of *index lists* (:mod:`._placement`), and the list of
tensor dim ``d`` depends only on the rank's coordinates on the view dims that shard ``d``:
its *label* on ``d``.  So every question is answered per rank in O(ndim + runs), and the
tiles of the whole tensor are listed per tensor dim (:meth:`Sharding.segments`), never per
rank.

Instances: a view with several instances (``mesh["tp"]`` of a ``(dp, tp)`` mesh) holds the
tensor once per instance, as every dp rank's DTensor on its own tp submesh does with a
weight: the instances are replicas.

>>> from mesh import MeshView, Replicate, Shard, Sharding, StridedShard, reshard
>>> mesh = MeshView.from_shape((2, 2), ("dp", "tp"))
>>> s = Sharding(mesh, (StridedShard(0, 2), Shard(0)), (8, 3))  # FSDP2 over TP
>>> [s.runs(r)[0] for r in range(4)]  # rows of each rank: FSDP shards each TP shard
[((0, 2),), ((4, 2),), ((2, 2),), ((6, 2),)]
>>> s.local_shape(3), s.global_offset(3)
((2, 3), (6, 0))
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Iterator, Mapping, Sized
from typing import Any, cast

import attrs

from layout import Layout, complement, make_layout

from .._core import (
    MeshTypeError,
    MeshView,
    ShardingError,
    TooManyRanksError,
    as_int,
    check_limit,
    need_numpy,
    ordered,
    rank_rows,
    show,
)
from ._placement import (
    Partial,
    Placement,
    Runs,
    Shard,
    StridedShard,
    as_placement,
    shard_runs,
)

__all__ = ["HOLDERS_LIMIT", "MAX_TENSOR_DIMS", "MAX_TILES", "Label", "Sharding", "check_boxes"]

MAX_TENSOR_DIMS = 8
"""The most dims a sharded tensor may have."""

MAX_TILES = 1 << 20
"""The most pieces one tensor dim may be cut into (the product of the sizes of the view
dims sharding it, times the split factors): the bound on what :meth:`Sharding.segments`
lists."""

MAX_ELEMENTS = 1 << 62
"""The most elements a sharded tensor may have (int64 arithmetic throughout)."""

HOLDERS_LIMIT = 1 << 20
"""The most ranks :meth:`Sharding.holders` lists unless given a ``limit``; a reshard plan
lists at most this many holders or receivers of one tile."""

Label = tuple[int, ...]
"""A rank's coordinates on the view dims that shard one tensor dim, in view order."""


def _few(value: object, what: str, most: int, why: str) -> tuple[Any, ...]:
    """:func:`ordered` with at most ``most`` items, a :class:`~mesh.ShardingError` past it."""
    try:
        return ordered(value, what, most)
    except TooManyRanksError:
        n = len(cast(Sized, value))  # ordered() measured it before refusing
        raise ShardingError(f"{why}, got {n:,}: {show(value)}") from None


def _shape(value: object) -> tuple[int, ...]:
    sizes = _few(value, "a tensor shape", MAX_TENSOR_DIMS,
                 f"a sharded tensor has at most {MAX_TENSOR_DIMS} dims")
    out = tuple(as_int(s, "a tensor size") for s in sizes)
    if any(s < 0 for s in out):
        raise ShardingError(f"tensor sizes must be >= 0, got shape {show(out)}")
    if any(s > MAX_ELEMENTS for s in out) or math.prod(out) > MAX_ELEMENTS:
        raise ShardingError(f"a tensor of shape {show(out)} has more than 2**62 elements")
    return out


@attrs.frozen(eq=True, repr=False, init=False, hash=False)
class Sharding:
    """A tensor of ``shape`` placed over ``view``: one placement per view dim.

    ``Sharding(view, placements, shape)``: ``placements`` is an ordered sequence of
    :class:`Shard`, :class:`StridedShard`, :class:`Replicate` and :class:`Partial`, one
    per dim of ``view`` (torch's left-to-right order); uneven sizes are cut as
    ``torch.chunk`` cuts them.  Refused with :class:`~mesh.ShardingError`: placements that
    are not one per view dim, a placement naming a tensor dim that ``shape`` lacks, a
    negative size, a tensor dim cut into more than :data:`MAX_TILES` pieces.

    Per rank, without listing the world: :meth:`runs` (the global indices held, per tensor
    dim), :meth:`local_shape`, :meth:`global_offset` (torch's), :meth:`boxes`, and
    :meth:`local` (the rank's local array of a full NumPy array, as ``distribute_tensor``
    gives it).
    """

    view: MeshView
    placements: tuple[Placement, ...]
    shape: tuple[int, ...]

    def __init__(self, view: MeshView, placements: object, shape: object) -> None:
        if not isinstance(view, MeshView):
            raise MeshTypeError(f"a sharding's view must be a MeshView, got {show(view)}")
        items = _few(placements, "placements", view.ndim,
                     f"placements must be one per dim of the view {view.names} ({view.ndim})")
        if len(items) != view.ndim:
            raise ShardingError(
                f"placements must be one per dim of the view {view.names} ({view.ndim}), got "
                f"{len(items)}: {show(placements)}")
        ps = tuple(as_placement(p, f"placements[{i}]") for i, p in enumerate(items))
        sizes = _shape(shape)
        for i, p in enumerate(ps):
            if isinstance(p, (Shard, StridedShard)) and p.dim >= len(sizes):
                raise ShardingError(
                    f"placements[{i}] = {p!r} (view dim {view.names[i]!r}) shards tensor dim "
                    f"{p.dim}, but the shape {sizes} has {len(sizes)} dims")
        self.__attrs_init__(view, ps, sizes)
        for d in range(len(sizes)):
            pieces = math.prod(view.shape[i] * getattr(p, "split_factor", 1)
                               for i, p in self.sharders(d))
            if pieces > MAX_TILES:
                raise ShardingError(
                    f"tensor dim {d} is cut into {pieces:,} pieces by "
                    f"{[f'{view.names[i]!r}: {p!r}' for i, p in self.sharders(d)]}; at most "
                    f"{MAX_TILES:,} (mesh.MAX_TILES)")

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:  # computed once: plans and pricing key caches by sharding
        return hash((self.view, self.placements, self.shape))

    def __repr__(self) -> str:
        return (f"Sharding({self.view.names}={self.view.shape}, {list(self.placements)}, "
                f"shape={self.shape})")

    # ---- the structure: which view dims shard which tensor dim -------------------------
    @functools.cached_property
    def _sharders(self) -> tuple[tuple[tuple[int, Shard | StridedShard], ...], ...]:
        return tuple(tuple((i, p) for i, p in enumerate(self.placements)
                           if isinstance(p, (Shard, StridedShard)) and p.dim == d)
                     for d in range(len(self.shape)))

    def sharders(self, d: int) -> tuple[tuple[int, Shard | StridedShard], ...]:
        """The (view dim, placement) pairs that shard tensor dim ``d``, in view order."""
        if type(d) is not int or not 0 <= d < len(self.shape):
            d = self._tensor_dim(d, "sharders")
        return self._sharders[d]

    def _tensor_dim(self, d: object, what: str) -> int:
        """``d`` as one of the tensor's dims (an int from 0, never wrapped from the end),
        else a typed error naming it and the dims there are."""
        n = as_int(d, f"{what}'s tensor dim")
        if not 0 <= n < len(self.shape):
            dims = f"0 to {len(self.shape) - 1}" if self.shape else "none"
            raise ShardingError(f"{what}: tensor dim {show(d)} is not a dim of the tensor of "
                                f"shape {self.shape} (its dims: {dims}; a negative dim is not "
                                "counted from the end)")
        return n

    @functools.cached_property
    def partial_dims(self) -> tuple[int, ...]:
        """The view dims placed :class:`Partial`."""
        return tuple(i for i, p in enumerate(self.placements) if isinstance(p, Partial))

    # ---- per rank ---------------------------------------------------------------------
    def label(self, coordinate: tuple[int, ...], d: int) -> Label:
        """The coordinates on the view dims that shard tensor dim ``d``."""
        return tuple(coordinate[i] for i, _ in self.sharders(d))

    def label_runs(self, d: int, label: Label) -> Runs:
        """The index list along tensor dim ``d`` of the ranks with ``label`` on it."""
        runs: Runs = ((0, self.shape[d]),) if self.shape[d] else ()
        for (i, p), k in zip(self.sharders(d), label):
            runs = shard_runs(runs, p, self.view.shape[i], k)
        return runs

    def coordinate(self, rank: int) -> tuple[int, ...]:
        """``rank``'s coordinate in the view (a typed error if it is not in the universe)."""
        c = self.view.coordinate(as_int(rank, "a rank"))
        if c is None:
            self.view.instance_offset(rank)  # raises RankNotInMeshError, naming the rank
            raise AssertionError("unreachable: a rank outside the universe raises above")
        return c

    def runs(self, rank: int) -> tuple[Runs, ...]:
        """Per tensor dim, the global indices ``rank`` holds, as runs ``(start, length)`` of
        consecutive indices in local order."""
        c = self.coordinate(rank)
        return tuple(self.label_runs(d, self.label(c, d)) for d in range(len(self.shape)))

    def local_shape(self, rank: int) -> tuple[int, ...]:
        """The shape of ``rank``'s local tensor (torch's local shape, without padding)."""
        return tuple(sum(n for _, n in runs) for runs in self.runs(rank))

    def global_offset(self, rank: int) -> tuple[int, ...]:
        """Where ``rank``'s local tensor starts in the global one, as torch computes it: per
        tensor dim the first global index held, the dim's size where the rank holds none of
        a sharded dim, 0 on a dim nobody shards."""
        return tuple(runs[0][0] if runs else (size if self.sharders(d) else 0)
                     for d, (runs, size) in enumerate(zip(self.runs(rank), self.shape)))

    def boxes(self, rank: int) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The global elements ``rank`` holds as boxes: each a ``(start, stop)`` per tensor
        dim; their union, in row-major order of the runs, is the local tensor."""
        runs = self.runs(rank)
        check_boxes(math.prod(len(r) for r in runs), f"rank {rank}'s boxes")
        return tuple(tuple((s, s + n) for s, n in combo) for combo in itertools.product(*runs))

    def local_slices(self, rank: int, box: tuple[tuple[int, int], ...]) -> tuple[slice, ...]:
        """Where the global ``box`` (``(start, stop)`` per tensor dim) lies in ``rank``'s
        local tensor, as one slice per dim; the box must lie inside one run of the rank's
        index list on every dim (a reshard's boxes do), else :class:`~mesh.ShardingError`."""
        runs = self.runs(rank)
        pairs = _few(box, "a box", len(runs), f"a box of the tensor {self.shape} has one "
                     "(start, stop) per dim")
        if len(pairs) != len(runs):
            raise ShardingError(f"a box of the tensor {self.shape} has one (start, stop) per "
                                f"dim, got {show(box)}")
        bounds = []
        for pair in pairs:
            ab = _few(pair, "a box's (start, stop)", 2, "a box has one (start, stop) per dim")
            if len(ab) != 2:
                raise ShardingError(f"a box has one (start, stop) per dim, got {show(box)}")
            a, b = as_int(ab[0], "a box's start"), as_int(ab[1], "a box's stop")
            if not 0 <= a <= b:
                raise ShardingError(f"a box's (start, stop) must have 0 <= start <= stop, got "
                                    f"{show(box)}")
            bounds.append((a, b))
        return tuple(_slice(r, a, b, rank, box) for r, (a, b) in zip(runs, bounds))

    def local(self, full: Any, rank: int) -> Any:
        """``rank``'s local array of the full NumPy array ``full``, as torch's
        ``distribute_tensor`` gives it: the rank's indices per dim; a :class:`Partial`
        dim's ranks each hold ``full / n`` for ``"sum"`` and ``full`` otherwise."""
        np = need_numpy("Sharding.local")
        if not isinstance(full, np.ndarray):
            raise MeshTypeError(f"Sharding.local needs a NumPy array of shape {self.shape}, "
                                f"got {show(full)}")
        if full.shape != self.shape:
            raise ShardingError(f"Sharding.local needs an array of shape {self.shape}, got one "
                                f"of shape {full.shape}")
        index = [np.array([s + j for s, n in runs for j in range(n)], dtype=np.int64)
                 for runs in self.runs(rank)]
        out = full[np.ix_(*index)] if index else full.copy()
        for i in self.partial_dims:
            p = self.placements[i]
            if isinstance(p, Partial) and p.op == "sum":
                out = out / self.view.shape[i]
        return out

    # ---- the whole tensor, per tensor dim -----------------------------------------------
    def segments(self, d: int) -> tuple[tuple[int, int, Label], ...]:
        """Tensor dim ``d`` cut into runs, each with the label of the ranks holding it:
        ``(start, length, label)`` sorted by start; they partition ``range(shape[d])``."""
        return self._segments[self._tensor_dim(d, "segments")]

    @functools.cached_property
    def _segments(self) -> tuple[tuple[tuple[int, int, Label], ...], ...]:
        return tuple(self._cut(d) for d in range(len(self.shape)))

    def _cut(self, d: int) -> tuple[tuple[int, int, Label], ...]:
        """Tensor dim ``d``'s segments: each prefix of the sharders' labels cuts its runs
        once (not once per label); the last cut is made as it is sorted, never kept as a
        list of its own (at :data:`MAX_TILES` pieces that list was half the memory)."""
        level: list[tuple[Label, Runs]] = [((), ((0, self.shape[d]),) if self.shape[d]
                                            else ())]
        *first, last = self.sharders(d) or ((-1, None),)
        for i, p in first:
            n = self.view.shape[i]
            level = [((*label, k), shard_runs(runs, p, n, k))
                     for label, runs in level for k in range(n)]
        if last[1] is None:
            return tuple((s, n, ()) for s, n in level[0][1])
        i, p = last
        n = self.view.shape[i]
        cut = ((s, m, (*label, k)) for label, runs in level for k in range(n)
               for s, m in shard_runs(runs, p, n, k))
        return tuple(sorted(cut, key=operator.itemgetter(0)))  # starts are distinct

    # ---- ranks from coordinates -------------------------------------------------------
    @functools.cached_property
    def _starts(self) -> Layout:
        return complement(self.view.layout, self.view.ranks.size)

    def holders(self, fixed: Mapping[int, int], *, limit: int = HOLDERS_LIMIT) -> Iterator[int]:
        """The ranks whose coordinates on the view dims in ``fixed`` (view dim index ->
        coordinate) are those values: every instance, every coordinate on the other dims (in
        row-major order, instance first); from each dim's offsets (few ranks) or by array
        arithmetic over the layout.  Refused before listing (typed errors): a view dim or
        coordinate outside the view (negatives are not counted from the end), more than
        ``limit`` ranks."""
        fixed = self._fixed(fixed)
        count = self.holder_count(fixed)
        check_limit(count, "the holders of a tile", limit, default=f"{HOLDERS_LIMIT:,}")
        return self._listed(fixed, [i for i in range(self.view.ndim) if i not in fixed], count)

    def holder_count(self, fixed: Mapping[int, int]) -> int:
        """How many ranks :meth:`holders` lists for ``fixed`` (counted, not listed)."""
        fixed = self._fixed(fixed)
        return self._starts.size * math.prod(n for i, n in enumerate(self.view.shape)
                                             if i not in fixed)

    def _fixed(self, fixed: object) -> dict[int, int]:
        """``holders``' ``fixed``, checked: view dims of the view, coordinates on them."""
        view = self.view
        if not isinstance(fixed, Mapping):
            raise MeshTypeError(f"holders' fixed must be a mapping of view dim (0 to "
                                f"{view.ndim - 1}: {view.names}) -> coordinate, got "
                                f"{show(fixed)}")
        if len(fixed) > view.ndim:
            raise ShardingError(f"holders' fixed names {len(fixed):,} view dims; the view "
                                f"{view.names} has {view.ndim}")
        out = {}
        for i, k in fixed.items():
            dim, at = as_int(i, "a view dim of holders' fixed"), as_int(k, "a coordinate")
            if not 0 <= dim < view.ndim:
                raise ShardingError(f"holders: view dim {show(i)} is not a dim of the view "
                                    f"{view.names} (0 to {view.ndim - 1})")
            if not 0 <= at < view.shape[dim]:
                raise ShardingError(f"holders: coordinate {show(k)} on view dim {dim} "
                                    f"({view.names[dim]!r}) is outside 0 to "
                                    f"{view.shape[dim] - 1}")
            out[dim] = at
        return out

    def _listed(self, fixed: dict[int, int], others: list[int], count: int) -> Iterator[int]:
        view = self.view
        offsets = self._offsets
        base = sum(view.layout[i](k) for i, k in fixed.items())
        if count <= _FEW and self._starts.size <= _FEW:
            for start in self._start_offsets:
                for free in itertools.product(*[offsets[i] for i in others]):
                    yield view.ranks(start + base + sum(free))
            return
        inner = make_layout(*(view.layout[i] for i in others))
        for row in rank_rows(view.ranks, self._starts, inner, base):
            yield from row

    @functools.cached_property
    def _offsets(self) -> tuple[tuple[int, ...], ...]:
        """Per view dim of at most :data:`_FEW` coordinates, the offset of each (a larger
        dim's are never summed: its holders are listed by array arithmetic)."""
        return tuple(tuple(self.view.layout[i](k) for k in range(n)) if n <= _FEW else ()
                     for i, n in enumerate(self.view.shape))

    @functools.cached_property
    def _start_offsets(self) -> tuple[int, ...]:
        """The offset of each instance's first rank (only asked for with few instances)."""
        return tuple(self._starts(j) for j in range(self._starts.size))


_FEW = 64
"""Holder listings this small are summed from per-dim offsets in Python."""


def check_boxes(count: int, what: str) -> None:
    """Refuse to list more than :data:`MAX_TILES` boxes (a typed error naming the count)."""
    if count > MAX_TILES:
        raise ShardingError(f"{what} would be {count:,} boxes, more than {MAX_TILES:,} "
                            "(mesh.MAX_TILES): split factors this large cut a tensor too finely")


def _slice(runs: Runs, a: int, b: int, rank: int, box: object) -> slice:
    """Global ``[a, b)`` inside one run of ``runs``, as a slice of local positions."""
    pos = 0
    for start, n in runs:
        if start <= a and b <= start + n:
            return slice(pos + a - start, pos + b - start)
        pos += n
    if a == b:
        return slice(0, 0)
    raise ShardingError(f"the box {show(box)} is not held by rank {rank} in one piece "
                        f"(its index list is {show(runs)})")



