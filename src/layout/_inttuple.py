"""The int-tuple algebra: nested integer tuples as the shapes, strides and coordinates of layouts.

Row-major (lexicographic) throughout: the *last* mode varies fastest, and an
integer index is split into coordinates by peeling the last mode first.

Every function here trusts its arguments: ints or tuples of ints, within
:data:`~layout.MAX_DEPTH`, sizes >= 1 and strides >= 0, and congruent where two
are combined.  User input reaches them only through :mod:`layout._door`, whose
public functions of the same names check at the door and then call these; the
rest of the package, which holds valid values already, calls them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union, cast

from ._errors import InvalidLayoutError
from ._show import fmt_int

IntTuple = Union[int, tuple["IntTuple", ...]]
"""An ``int`` or a nested tuple of ``int``."""

Coord = Union[int, None, tuple["Coord", ...]]
"""A coordinate: like :data:`IntTuple`, where ``None`` marks a sliced mode."""

__all__ = [
    "IntTuple",
    "Coord",
    "fmt",
    "congruent",
    "flatten",
    "product",
    "suffix_product",
    "shape_div",
    "inner_product",
    "idx2crd",
    "peel",
    "modes",
    "map_pair",
]


def fmt(t: IntTuple, sep: str = ",") -> str:
    """CuTe's notation for an int tuple: ``(2,(3,4))``; a 1-tuple prints as ``(2,)``.

    With ``sep=", "`` it is Python's ``repr`` (huge ints abbreviated either way).

    >>> fmt((2, (3, 4))), fmt((2,)), fmt(10**50), fmt((2, (3, 4)), ", ")
    ('(2,(3,4))', '(2,)', '~1.0000e50', '(2, (3, 4))')
    """
    if isinstance(t, int):
        return fmt_int(t)
    inner = sep.join([fmt(x, sep) for x in t])
    return f"({inner},)" if len(t) == 1 else f"({inner})"


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Whether ``a`` and ``b`` have the same nesting structure.

    >>> congruent((2, (3, 4)), (1, (5, 6))), congruent((2, 3), 6)
    (True, False)
    """
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(map(congruent, a, b))


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order; a flat tuple is returned as it is (no copy)."""
    if isinstance(t, int):
        return (t,)
    out: list[int] = []
    nested = False
    for x in t:
        if isinstance(x, int):
            out.append(x)
        else:
            out.extend(flatten(x))
            nested = True
    return tuple(out) if nested else cast("tuple[int, ...]", t)


def product(t: IntTuple) -> int:
    """The product of the leaves of ``t`` (1 for the empty tuple)."""
    if isinstance(t, int):
        return t
    p = 1
    for x in t:
        p *= x if isinstance(x, int) else product(x)
    return p


def suffix_product(shape: IntTuple, init: int = 1) -> IntTuple:
    """Row-major compact strides for ``shape``: ``init`` times the product of the modes after."""
    if isinstance(shape, int):
        return init
    out: list[IntTuple] = []
    for s in reversed(shape):
        out.append(suffix_product(s, init))
        init *= product(s)
    out.reverse()
    return tuple(out)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """``a`` divided by ``b``, innermost (last) mode first; see :func:`layout.shape_div`.

    Raises :class:`~layout.InvalidLayoutError` where neither of two ints divides
    the other, or two tuples differ in length.
    """
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            if len(a) != len(b):
                raise InvalidLayoutError(f"shape_div needs tuples of one length, got {fmt(a)} "
                                         f"and {fmt(b)}")
            return tuple([shape_div(x, y) for x, y in zip(a, b)])
        out: list[IntTuple] = []
        for x in reversed(a):  # innermost (last) mode first
            out.append(shape_div(x, b))
            b = shape_div(b, product(x))
        out.reverse()
        return tuple(out)
    if isinstance(b, tuple):
        return shape_div(a, product(b))
    if a % b and b % a:
        raise InvalidLayoutError(f"shape_div({fmt_int(a)}, {fmt_int(b)}): neither divides "
                                 "the other")
    return -(-a // b)


def inner_product(a: IntTuple, b: IntTuple) -> int:
    """The sum of the products of the leaves of congruent ``a`` and ``b``: *the* dot product.

    The offset of a coordinate congruent to a shape is ``inner_product(crd, stride)``;
    every such offset in the package is computed here.

    >>> inner_product((1, (2, 3)), (6, (3, 1)))
    15
    """
    if isinstance(a, int):
        return a * cast(int, b)  # congruent: b is an int too
    total = 0
    for x, y in zip(a, cast("tuple[Any, ...]", b)):  # congruent: y is an int where x is
        total += x * y if type(x) is int else inner_product(x, y)
    return total


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """The coordinate congruent to ``shape`` of the index ``0 <= idx < product(shape)``."""
    if isinstance(shape, int):
        return idx
    out: list[IntTuple] = []
    for s in reversed(shape):
        n = product(s)
        out.append(idx2crd(idx % n, s))
        idx //= n
    out.reverse()
    return tuple(out)


def peel(i: int, shape: IntTuple, stride: IntTuple) -> tuple[int, int]:
    """``(offset, rest)``: the index ``i >= 0`` split over ``shape:stride``
    row-major (last mode first), the offset of its coordinate, and the quotient left
    over (0 exactly when ``i < size``).

    >>> peel(5, (2, 3), (3, 1)), peel(7, (2, 3), (3, 1))
    ((5, 0), (1, 1))
    """
    if isinstance(shape, int) or isinstance(stride, int):
        rest, c = divmod(i, product(shape))
        return c * product(stride), rest
    offset = 0
    for s, d in zip(reversed(shape), reversed(stride)):
        if isinstance(s, int) and isinstance(d, int):
            i, c = divmod(i, s)
            offset += c * d
        else:
            o, i = peel(i, s, d)
            offset += o
    return offset, i


def modes(shape: IntTuple, stride: IntTuple) -> list[tuple[IntTuple, IntTuple]]:
    """The top-level modes of a congruent ``shape:stride``."""
    if isinstance(shape, int) or isinstance(stride, int):
        return [(shape, stride)]
    return list(zip(shape, stride))


def map_pair(shape: IntTuple, stride: IntTuple,
             fn: Callable[[int, int], tuple[IntTuple, IntTuple]]) -> tuple[IntTuple, IntTuple]:
    """Apply ``fn(size, stride)`` to every leaf mode of ``shape:stride``, keeping the nesting."""
    if isinstance(shape, int) or isinstance(stride, int):
        return fn(product(shape), product(stride))  # congruent: both are ints here
    parts = [map_pair(s, d, fn) for s, d in zip(shape, stride)]
    return tuple([p[0] for p in parts]), tuple([p[1] for p in parts])
