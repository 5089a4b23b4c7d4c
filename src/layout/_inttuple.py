"""Nested integer tuples: the shapes, strides and coordinates of layouts.

Row-major (lexicographic) throughout: the *last* mode varies fastest, and an
integer index is split into coordinates by peeling the last mode first.
"""

from __future__ import annotations

import operator
from typing import Union

from ._errors import InvalidLayoutError, LayoutIndexError, LayoutTypeError

IntTuple = Union[int, tuple["IntTuple", ...]]
"""An ``int`` or an arbitrarily nested tuple of ``int``."""

Coord = Union[int, None, tuple["Coord", ...]]
"""A coordinate: like :data:`IntTuple`, where ``None`` marks a sliced mode."""

__all__ = [
    "IntTuple",
    "Coord",
    "as_int_tuple",
    "flatten",
    "product",
    "suffix_product",
    "congruent",
    "crd2idx",
    "idx2crd",
]


def _as_int(value: object, what: str, expected: str = "an int") -> int:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise LayoutTypeError(f"{what} must be an int, got the bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise LayoutTypeError(
            f"{what} must be {expected}, got {value!r} of type {type(value).__name__}"
        ) from None


def as_int_tuple(value: object, what: str = "value") -> IntTuple:
    """Return ``value`` as a nested int tuple, or raise :class:`LayoutTypeError`.

    Ints (and objects with ``__index__``, such as NumPy integers) become plain
    ``int``; bools, floats, strings and lists are rejected.  The empty tuple is
    accepted only as the whole value (a rank-0 layout), never nested
    (:class:`InvalidLayoutError`).

    >>> as_int_tuple((2, (3, 4)))
    (2, (3, 4))
    """
    if type(value) is int:
        return value
    if isinstance(value, tuple):
        return tuple(_nested_int_tuple(v, what, value) for v in value)
    return _as_int(value, what, "an int or a nested tuple of ints")


def _nested_int_tuple(value: object, what: str, whole: tuple[object, ...]) -> IntTuple:
    if type(value) is int:
        return value
    if isinstance(value, tuple):
        if not value:
            raise InvalidLayoutError(
                f"{what} {whole!r} contains an empty nested tuple (); only the whole {what} "
                "may be () (a rank-0 layout)"
            )
        return tuple(_nested_int_tuple(v, what, whole) for v in value)
    return _as_int(value, what, "an int or a nested tuple of ints")


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order.

    >>> flatten((2, (3, 4)))
    (2, 3, 4)
    """
    if type(t) is int:
        return (t,)
    for x in t:  # type: ignore[union-attr]
        if type(x) is not int:
            break
    else:
        return t  # type: ignore[return-value]  # already flat: the common case
    out: list[int] = []
    for x in t:  # type: ignore[union-attr]
        if type(x) is int:
            out.append(x)
        else:
            out.extend(flatten(x))
    return tuple(out)


def product(t: IntTuple) -> int:
    """The product of the leaves of ``t`` (1 for the empty tuple).

    >>> product((2, (3, 4)))
    24
    """
    if type(t) is int:
        return t
    p = 1
    for x in t:  # type: ignore[union-attr]
        p *= x if type(x) is int else product(x)
    return p


def suffix_product(shape: IntTuple, init: int = 1) -> IntTuple:
    """Row-major compact strides for ``shape``: the default stride of a layout.

    >>> suffix_product((2, (3, 4)))
    (12, (4, 1))
    """
    if type(shape) is int:
        return init
    out: list[IntTuple] = []
    for s in reversed(shape):  # type: ignore[arg-type]
        out.append(suffix_product(s, init))
        init *= product(s)
    out.reverse()
    return tuple(out)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Whether ``a`` and ``b`` have the same nesting structure.

    >>> congruent((2, (3, 4)), (1, (5, 6))), congruent((2, 3), 6)
    (True, False)
    """
    if type(a) is int or type(b) is int:
        return type(a) is int and type(b) is int
    return len(a) == len(b) and all(map(congruent, a, b))  # type: ignore[arg-type]


def _crd2idx(crd: Coord, shape: IntTuple, stride: IntTuple) -> int:
    if crd is None:
        return 0
    if type(crd) is int:
        if type(shape) is int and 0 <= crd < shape:
            return crd * stride  # type: ignore[return-value]
        if crd < 0 or crd >= product(shape):
            raise LayoutIndexError(
                f"coordinate {crd} is out of range for a mode of shape {shape} "
                f"(valid: 0 <= c < {product(shape)})"
            )
        if type(shape) is int:
            return crd * stride  # type: ignore[return-value]
        result = 0
        for s, d in zip(reversed(shape), reversed(stride)):  # type: ignore[arg-type]
            n = product(s)
            result += _crd2idx(crd % n, s, d)
            crd //= n
        return result
    if isinstance(crd, tuple):
        if type(shape) is int or len(crd) != len(shape):  # type: ignore[arg-type]
            raise LayoutIndexError(
                f"coordinate {crd} does not match the shape {shape}: a tuple coordinate "
                "needs one entry per mode"
            )
        return sum(map(_crd2idx, crd, shape, stride))  # type: ignore[arg-type]
    raise LayoutTypeError(f"a coordinate must be an int, None or a tuple, got {crd!r}")


def crd2idx(crd: Coord, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Map a coordinate (or an index) to an offset, row-major.

    ``stride`` defaults to the row-major compact stride of ``shape``.  An int
    coordinate for a tuple mode is split over that mode, last sub-mode fastest;
    ``None`` counts as 0.  Out-of-range coordinates raise
    :class:`~layout.LayoutIndexError`.

    >>> crd2idx((1, 2), (2, 3))
    5
    >>> crd2idx(5, (2, 3), (1, 2))
    5
    """
    if stride is not None and _plain_pair(shape, stride):
        return _crd2idx(crd, shape, stride)  # already exact ints, congruent: no copies
    shape = as_int_tuple(shape, "shape")
    stride = suffix_product(shape) if stride is None else as_int_tuple(stride, "stride")
    if not congruent(shape, stride):
        raise InvalidLayoutError(f"shape {shape} and stride {stride} are not congruent")
    return _crd2idx(crd, shape, stride)


def _plain_pair(shape: object, stride: object) -> bool:
    """Whether shape and stride are congruent non-empty nested tuples of exact ints."""
    if type(shape) is int:
        return type(stride) is int
    return (type(shape) is tuple and type(stride) is tuple and len(shape) == len(stride) != 0
            and all(map(_plain_pair, shape, stride)))


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """Split the index ``idx`` into a coordinate congruent to ``shape``, row-major.

    The inverse of :func:`crd2idx` with the default (compact) stride.

    >>> idx2crd(5, (2, 3))
    (1, 2)
    >>> idx2crd(7, (2, (2, 2)))
    (1, (1, 1))
    """
    shape = as_int_tuple(shape, "shape")
    idx = _as_int(idx, "index")
    n = product(shape)
    if idx < 0 or idx >= n:
        raise LayoutIndexError(f"index {idx} is out of range for shape {shape} "
                               f"(valid: 0 <= i < {n})")
    return _idx2crd(idx, shape)


def _idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    if type(shape) is int:
        return idx
    out: list[IntTuple] = []
    for s in reversed(shape):  # type: ignore[arg-type]
        n = product(s)
        out.append(_idx2crd(idx % n, s))
        idx //= n
    out.reverse()
    return tuple(out)
