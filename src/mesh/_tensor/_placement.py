"""Placements of a tensor over one dim of a view, with torch DTensor's meaning, and the one
piece of arithmetic they share: which positions of a dim's current index list a shard keeps.

A tensor dim's *index list* is the ordered list of global indices a rank holds along it;
it starts as ``range(size)``, and each placement that shards the dim (left to right over
the view's dims) keeps a part of it, as torch's ``_compute_local_shape_and_global_offset``
does.  Lists are kept as *runs*: ``(start, length)`` pairs of consecutive global indices.

- :class:`Shard` keeps chunk ``k`` of ``n`` as ``torch.chunk`` cuts them: chunk size
  ``ceil(s / n)``, trailing chunks smaller or empty.
- :class:`StridedShard` (torch's ``_StridedShard``, what FSDP2 over TP produces) first cuts
  the list into ``split_factor`` chunks, then each of those into ``n``, and keeps chunk
  ``k`` of each, in order.

>>> shard_runs(((0, 8),), Shard(0), 3, 2)
((6, 2),)
>>> shard_runs(((0, 4),), StridedShard(0, 2), 2, 1)
((1, 1), (3, 1))
"""

from __future__ import annotations

from typing import Union

import attrs

from .._core import MeshTypeError, ShardingError, as_int, show

__all__ = ["PLACEMENTS", "REDUCE_OPS", "Partial", "Placement", "Replicate", "Runs", "Shard",
           "StridedShard", "as_placement", "chunk_runs", "shard_runs"]

Runs = tuple[tuple[int, int], ...]
"""An index list as runs of consecutive global indices, ``((start, length), ...)``."""

REDUCE_OPS = ("sum", "avg", "max", "min")
"""The reductions a :class:`Partial` may name: those of torch's ``Partial(reduce_op)`` that a
replicated value can be partitioned into (``"product"`` and the bitwise ones cannot)."""


def _dim(value: object) -> int:
    d = as_int(value, "a placement's tensor dim")
    if d < 0:
        raise ShardingError(f"a placement's tensor dim must be >= 0, got {d} (a negative dim "
                            "is resolved against the shape: write it as shape's ndim + dim)")
    return d


@attrs.frozen(repr=False)
class Shard:
    """Shard tensor dim ``dim`` over the view's dim at this position (torch's ``Shard``)."""

    dim: int = attrs.field(converter=_dim)

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


def _split_factor(value: object) -> int:
    sf = as_int(value, "split_factor")
    if sf < 1:
        raise ShardingError(f"split_factor must be a positive int, got {sf}")
    return sf


@attrs.frozen(repr=False)
class StridedShard:
    """Torch's ``_StridedShard(dim, split_factor=...)``: tensor dim ``dim`` cut into
    ``split_factor`` chunks, each sharded over this view dim, as FSDP2 sharding a TP shard
    produces (``split_factor`` is the number of TP shards)."""

    dim: int = attrs.field(converter=_dim)
    split_factor: int = attrs.field(converter=_split_factor)

    def __repr__(self) -> str:
        return f"StridedShard({self.dim}, split_factor={self.split_factor})"


@attrs.frozen(repr=False)
class Replicate:
    """Every rank along this view dim holds the whole (current) piece."""

    def __repr__(self) -> str:
        return "Replicate()"


def _op(value: object) -> str:
    if not isinstance(value, str) or value not in REDUCE_OPS:
        raise ShardingError(f"Partial's op must be one of {', '.join(REDUCE_OPS)}, "
                            f"got {show(value)}")
    return value


@attrs.frozen(repr=False)
class Partial:
    """Every rank along this view dim holds a partial value of the whole piece; the tensor
    is their reduction by ``op`` (torch's ``Partial(reduce_op)``)."""

    op: str = attrs.field(default="sum", converter=_op)

    def __repr__(self) -> str:
        return f"Partial({self.op!r})"


Placement = Union[Shard, StridedShard, Replicate, Partial]
PLACEMENTS = (Shard, StridedShard, Replicate, Partial)


def as_placement(value: object, where: str) -> Placement:
    """``value`` if it is one of this module's placements, else a typed error naming it."""
    if not isinstance(value, PLACEMENTS):
        raise MeshTypeError(f"{where} must be a mesh.Shard, StridedShard, Replicate or Partial "
                            f"(use backend.from_torch_placements for torch's), got {show(value)}")
    return value


def chunk_runs(runs: Runs, n: int, k: int) -> Runs:
    """Chunk ``k`` of ``n`` of the index list ``runs``, cut as ``torch.chunk`` does."""
    total = sum(length for _, length in runs)
    c = -(-total // n)
    lo, hi = min(k * c, total), min((k + 1) * c, total)
    out: list[tuple[int, int]] = []
    pos = 0
    for start, length in runs:
        a, b = max(lo, pos), min(hi, pos + length)
        if a < b:
            out.append((start + a - pos, b - a))
        pos += length
        if pos >= hi:
            break
    return tuple(out)


def _merged(pieces: list[tuple[int, int]]) -> Runs:
    """Runs with adjacent ones joined (``(0, 2), (2, 3)`` is ``(0, 5)``): one form per list."""
    out: list[tuple[int, int]] = []
    for start, length in pieces:
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((start, length))
    return tuple(out)


def shard_runs(runs: Runs, placement: Shard | StridedShard, n: int, k: int) -> Runs:
    """The part of the index list ``runs`` that coordinate ``k`` of a view dim of size ``n``
    keeps under ``placement``."""
    if isinstance(placement, StridedShard):
        sf = placement.split_factor
        return _merged([r for j in range(sf) for r in chunk_runs(chunk_runs(runs, sf, j), n, k)])
    return chunk_runs(runs, n, k)
