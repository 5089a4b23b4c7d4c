"""Zipped and tiled divides and products, blocked and raked products, and slicing.

Rearrangements of :func:`~layout.logical_divide` and
:func:`~layout.logical_product` results, plus :func:`slice_and_offset`.
"""

from __future__ import annotations

from collections.abc import Callable

from ._door import as_coord, coord_offset
from ._errors import LayoutTypeError
from ._inttuple import Coord, IntTuple
from ._layout import (
    Layout,
    Tiler,
    by_mode,
    check_layout,
    coalesce,
    logical_divide,
    logical_product,
    make_layout,
    within_depth,
)
from ._show import show

__all__ = [
    "zipped_divide",
    "tiled_divide",
    "zipped_product",
    "tiled_product",
    "blocked_product",
    "raked_product",
    "slice_and_offset",
]

_Split = Callable[[Layout, Tiler], Layout]


def _zipped(split: _Split, A: Layout, tiler: Tiler) -> Layout:
    """``split`` by mode, gathered into ``(firsts, seconds)`` of the two-mode results."""
    if tiler is None:
        return make_layout(A, Layout(1, 0))
    if not isinstance(tiler, tuple):
        return split(A, tiler)
    lead, parts = by_mode(A, tiler, "tiler", lambda m, t: _zipped(split, m, t))
    return make_layout(make_layout(*lead, *(p[0] for p in parts)),
                       make_layout(*(p[1] for p in parts)))


def zipped_divide(A: Layout, tiler: Tiler) -> Layout:
    """``logical_divide`` by mode, gathered into ``((rests...), (tiles...))``.

    >>> print(zipped_divide(Layout((4, 6)), (2, 3)))
    ((2,2),(2,3)):((12,3),(6,1))
    """
    check_layout(A)
    return _zipped(logical_divide, A, tiler)


def tiled_divide(A: Layout, tiler: Tiler) -> Layout:
    """``zipped_divide`` with the rests unpacked: ``(rest0, rest1, ..., (tiles...))``.

    >>> print(tiled_divide(Layout((4, 6)), (2, 3)))
    (2,2,(2,3)):(12,3,(6,1))
    """
    zd = zipped_divide(A, tiler)
    return make_layout(*zd[0], zd[1])


def zipped_product(A: Layout, tiler: Tiler) -> Layout:
    """``logical_product`` by mode, gathered into ``((repetitions...), (A's modes...))``.

    >>> print(zipped_product(Layout((2, 2)), (2, 2)))
    ((2,2),(2,2)):((1,2),(2,1))
    """
    check_layout(A)
    return _zipped(logical_product, A, tiler)


def tiled_product(A: Layout, tiler: Tiler) -> Layout:
    """``zipped_product`` with the repetitions unpacked: ``(rep0, rep1, ..., (A...))``.

    >>> print(tiled_product(Layout((2, 2)), (2, 2)))
    (2,2,(2,2)):(1,2,(2,1))
    """
    zp = zipped_product(A, tiler)
    return make_layout(*zp[0], zp[1])


def _pad(L: Layout, rank: int) -> Layout:
    return make_layout(*([Layout(1, 0)] * (rank - L.rank)), *L)


def _interleave(block: Layout, layout: Layout, block_inner: bool) -> Layout:
    check_layout(block, "the block")
    check_layout(layout)
    r = max(block.rank, layout.rank)
    padded = _pad(block, r)
    reps = logical_product(padded, _pad(layout, r))[0]
    return make_layout(*(coalesce(make_layout(rep, blk) if block_inner else make_layout(blk, rep))
                         for rep, blk in zip(reps, padded)))


def blocked_product(block: Layout, layout: Layout) -> Layout:
    """Tile ``block`` over ``layout`` mode by mode, each block contiguous.

    Mode ``k`` of the result is ``(layout_k repetitions, block_k)`` coalesced;
    the shorter operand is padded with leading ``1:0`` modes.

    >>> print(blocked_product(Layout((2, 2)), Layout((2, 3))))
    ((2,2),(3,2)):((12,2),(4,1))
    """
    return _interleave(block, layout, block_inner=True)


def raked_product(block: Layout, layout: Layout) -> Layout:
    """Interleave ``block`` over ``layout`` mode by mode (mode k is ``(block_k, rep_k)``).

    >>> print(raked_product(Layout((2, 2)), Layout((2, 3))))
    ((2,2),(2,3)):((2,12),(1,4))
    """
    return _interleave(block, layout, block_inner=False)


def _slice(crd: Coord, t: IntTuple) -> tuple[IntTuple, ...]:
    if crd is None:
        return (t,)
    if isinstance(crd, tuple):
        if isinstance(t, int) or len(crd) != len(t):
            raise LayoutTypeError(f"slice coordinate {show(crd)} does not match the structure "
                                  f"{show(t)}")
        return tuple([x for c, s in zip(crd, t) for x in _slice(c, s)])
    return ()


def slice_and_offset(crd: Coord, layout: Layout) -> tuple[Layout, int]:
    """Fix the modes of ``layout`` where ``crd`` has ints; keep those where it has ``None``.

    Returns ``(sublayout, offset)`` with
    ``layout(crd with sub_coordinate filled in) == offset + sublayout(sub_coordinate)``.

    >>> sub, off = slice_and_offset((1, None), Layout((2, 3)))
    >>> print(sub, off)
    (3,):(1,) 3
    """
    check_layout(layout)
    c = as_coord(crd)
    offset = coord_offset(c, layout.shape, layout.stride)
    return within_depth(_slice(c, layout.shape), _slice(c, layout.stride)), offset
