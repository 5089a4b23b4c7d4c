"""Divides, products and slicing: built from composition and complement."""

from __future__ import annotations

from collections.abc import Callable

from ._algebra import _TILER_KINDS, Tiler, complement, composition
from ._errors import LayoutTypeError
from ._inttuple import Coord, IntTuple, _as_int, _crd2idx
from ._layout import Layout, _by_mode, _check_layout, _raw, coalesce, make_layout

__all__ = [
    "Tiler",
    "logical_divide",
    "zipped_divide",
    "tiled_divide",
    "logical_product",
    "zipped_product",
    "tiled_product",
    "blocked_product",
    "raked_product",
    "slice_and_offset",
]


def _as_layout(t: Layout | int, what: str) -> Layout:
    if isinstance(t, Layout):
        return t
    return Layout(_as_int(t, what, _TILER_KINDS))


def _by_mode_apply(op: Callable[[Layout, Tiler], Layout], A: Layout, tiler: tuple[Tiler, ...]
                   ) -> Layout:
    off = _by_mode(A, tiler, "tiler")
    modes = list(A)
    return make_layout(*modes[:off], *(op(m, t) for m, t in zip(modes[off:], tiler)))


def logical_divide(A: Layout, tiler: Tiler) -> Layout:
    """Split A into (rest, tile): ``A ∘ (complement(B, size(A)), B)``.

    The first mode is the outer one: mode 1 walks one tile of A (B's
    elements), mode 0 walks from tile to tile.  A by-mode tuple divides A's
    trailing modes one by one.

    >>> print(logical_divide(Layout(12), Layout(3, 2)))
    ((2,2),3):((6,1),2)
    """
    _check_layout(A)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        return _by_mode_apply(logical_divide, A, tiler)
    B = _as_layout(tiler, "a tiler")
    return composition(A, make_layout(complement(B, A.size), B))


def logical_product(A: Layout, tiler: Tiler) -> Layout:
    """Repeat A along B: ``(complement(A, size(A) * cosize(B)) ∘ B, A)``.

    The first mode is the repetition, the second is A itself.  An int ``n``
    means ``n:1`` (pycute instead runs a divide there, a known bug).

    >>> print(logical_product(Layout((2, 2)), Layout(3)))
    (3,(2,2)):(4,(2,1))
    """
    _check_layout(A)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        return _by_mode_apply(logical_product, A, tiler)
    B = _as_layout(tiler, "a tiler")
    return make_layout(composition(complement(A, A.size * B.cosize), B), A)


def _hier_unzip(split: Callable[[Layout, Tiler], Layout], A: Layout, tiler: Tiler) -> Layout:
    if tiler is None:
        return make_layout(A, _raw(1, 0))
    if isinstance(tiler, tuple):
        off = _by_mode(A, tiler, "tiler")
        modes = list(A)
        parts = [_hier_unzip(split, m, t) for m, t in zip(modes[off:], tiler)]
        return make_layout(make_layout(*modes[:off], *(p[0] for p in parts)),
                           make_layout(*(p[1] for p in parts)))
    return split(A, tiler)


def zipped_divide(A: Layout, tiler: Tiler) -> Layout:
    """``logical_divide`` by mode, gathered into ``((rests...), (tiles...))``.

    >>> print(zipped_divide(Layout((4, 6)), (2, 3)))
    ((2,2),(2,3)):((12,3),(6,1))
    """
    _check_layout(A)
    return _hier_unzip(logical_divide, A, tiler)


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
    _check_layout(A)
    return _hier_unzip(logical_product, A, tiler)


def tiled_product(A: Layout, tiler: Tiler) -> Layout:
    """``zipped_product`` with the repetitions unpacked: ``(rep0, rep1, ..., (A...))``.

    >>> print(tiled_product(Layout((2, 2)), (2, 2)))
    (2,2,(2,2)):(1,2,(2,1))
    """
    zp = zipped_product(A, tiler)
    return make_layout(*zp[0], zp[1])


def _pad(L: Layout, rank: int) -> Layout:
    return make_layout(*([_raw(1, 0)] * (rank - L.rank)), *L)


def _interleave(block: Layout, layout: Layout, block_inner: bool) -> Layout:
    _check_layout(block)
    _check_layout(layout)
    r = max(block.rank, layout.rank)
    padded = _pad(block, r)
    reps = logical_product(padded, _pad(layout, r))[0]
    modes = []
    for rep, blk in zip(reps, padded):
        modes.append(coalesce(make_layout(rep, blk) if block_inner else make_layout(blk, rep)))
    return make_layout(*modes)


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
        if type(t) is int or len(crd) != len(t):  # type: ignore[arg-type]
            raise LayoutTypeError(f"slice coordinate {crd} does not match the structure {t}")
        out: list[IntTuple] = []
        for c, s in zip(crd, t):  # type: ignore[arg-type]
            out.extend(_slice(c, s))
        return tuple(out)
    return ()


def slice_and_offset(crd: Coord, layout: Layout) -> tuple[Layout, int]:
    """Fix the modes of ``layout`` where ``crd`` has ints; keep those where it has ``None``.

    Returns ``(sublayout, offset)`` with
    ``layout(crd with sub_coordinate filled in) == offset + sublayout(sub_coordinate)``.

    >>> sub, off = slice_and_offset((1, None), Layout((2, 3)))
    >>> print(sub), off
    (3,):(1,)
    (None, 3)
    """
    _check_layout(layout)
    offset = _crd2idx(crd, layout.shape, layout.stride)
    shape = _slice(crd, layout.shape)
    stride = _slice(crd, layout.stride)
    return _raw(shape, stride), offset
