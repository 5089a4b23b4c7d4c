"""Checks at the door: user input becomes plain, valid int tuples or a typed error.

Conversion (:func:`as_int`, :func:`_as_int_tuple`, :func:`as_coord`), the
nesting limit :data:`MAX_DEPTH`, validation of layouts (:func:`as_pair`) and
coordinates (:func:`coord_offset`), and the public int-tuple functions: each
checks its arguments here, then calls the one implementation of the same name
in :mod:`layout._inttuple`.  Every failure is a :class:`~layout.LayoutError`
subclass naming the bad value.
"""

from __future__ import annotations

import operator
from typing import SupportsIndex, cast

from . import _inttuple as algebra
from ._errors import InvalidLayoutError, LayoutIndexError, LayoutTypeError
from ._inttuple import Coord, IntTuple, fmt
from ._show import fmt_int, show

__all__ = [
    "MAX_DEPTH",
    "as_int",
    "as_coord",
    "as_pair",
    "check_nesting",
    "coord_offset",
    "flatten",
    "product",
    "suffix_product",
    "shape_div",
    "inner_product",
    "crd2idx",
    "idx2crd",
]

MAX_DEPTH = 32
"""The deepest nesting a shape, stride or coordinate may have (an int has depth 0,
a flat tuple depth 1).  Deeper input is refused with :class:`~layout.InvalidLayoutError`,
so every layout that exists can be printed and measured without deep recursion."""


# ---- conversion -----------------------------------------------------------------------------

def as_int(value: object, what: str, expected: str = "an int", *,
           error: type[Exception] = LayoutTypeError) -> int:
    """``value`` as a plain ``int``, or ``error`` (a :class:`~layout.LayoutTypeError` by
    default) naming it: the one integer conversion of every package here.

    Accepts ints and integer-likes with ``__index__`` (NumPy and torch integer
    scalars); refuses bools (also NumPy's), floats, strings and everything else.

    >>> as_int(3, "a size")
    3
    >>> as_int(2.0, "a size")
    Traceback (most recent call last):
    ...
    layout.LayoutTypeError: a size must be an int, got 2.0 of type float
    """
    if type(value) is int:
        return value
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise error(f"{what} must be an int, got the bool {show(value)}")
    try:
        return operator.index(cast("SupportsIndex", value))
    except Exception:
        raise error(
            f"{what} must be {expected}, got {show(value)} of type {type(value).__name__}"
        ) from None


def _as_int_tuple(value: object, what: str = "value") -> IntTuple:
    """``value`` as a nested tuple of plain ints, or a typed error naming it.

    Ints and integer-likes become ``int``; tuples (and tuple subclasses) become
    plain tuples.  Lists, sets, strings, floats and bools are refused
    (:class:`~layout.LayoutTypeError`); so is nesting deeper than
    :data:`MAX_DEPTH` (:class:`~layout.InvalidLayoutError`).  An empty tuple is a
    rank-0 mode (size 1, no leaves), at the top or nested.  Signs are not checked.

    >>> _as_int_tuple((2, (3, 4)))
    (2, (3, 4))
    """
    return _convert(value, what, value, 0)


def _convert(value: object, what: str, whole: object, depth: int) -> IntTuple:
    if type(value) is int:
        return value
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise InvalidLayoutError(f"{what} {show(whole)} is nested deeper than the limit "
                                     f"MAX_DEPTH = {MAX_DEPTH}")
        return tuple([_convert(v, what, whole, depth + 1) for v in value])
    return as_int(value, what, "an int or a nested tuple of ints")


def as_coord(value: object, depth: int = 0) -> Coord:
    """A coordinate of plain ints, ``None`` and tuples, or a typed error naming it."""
    if type(value) is int or value is None:
        return value
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise InvalidLayoutError(f"a coordinate is nested deeper than MAX_DEPTH = {MAX_DEPTH}")
        return tuple([as_coord(v, depth + 1) for v in value])
    return as_int(value, "a coordinate", "an int, None or a tuple")


def check_nesting(value: object, what: str) -> None:
    """Raise :class:`~layout.InvalidLayoutError` if ``value`` nests tuples deeper than
    :data:`MAX_DEPTH` (it looks no deeper than that, so it never recurses far)."""
    if not _within(value, 0):
        raise InvalidLayoutError(f"{what} {show(value)} is nested deeper than the limit "
                                 f"MAX_DEPTH = {MAX_DEPTH}")


def _within(value: object, depth: int) -> bool:
    if not isinstance(value, tuple):
        return True
    return depth < MAX_DEPTH and all([_within(v, depth + 1) for v in value])


# ---- layouts --------------------------------------------------------------------------------

def _check_sizes(t: IntTuple, what: str, low: int) -> IntTuple:
    """``t`` unchanged if every leaf is ``>= low``, else :class:`~layout.InvalidLayoutError`."""
    for x in algebra.flatten(t):
        if x < low:
            raise InvalidLayoutError(f"every {'size' if low else 'stride'} must be >= {low}, got "
                                     f"{fmt_int(x)} in {what} {fmt(t)}")
    return t


def _checked(t: object, what: str, low: int) -> IntTuple:
    """``t`` converted (:func:`_as_int_tuple`), its leaves checked to be ``>= low``."""
    return _check_sizes(_as_int_tuple(t, what), what, low)


def _valid_pair(shape: object, stride: object, depth: int = 0) -> bool:
    """Whether ``shape:stride`` is already a valid layout of exact ints (no copies made)."""
    if type(shape) is int:
        return type(stride) is int and shape >= 1 and stride >= 0
    if type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride) \
            or depth >= MAX_DEPTH:
        return False
    for s, d in zip(shape, stride):
        if type(s) is int:
            if type(d) is not int or s < 1 or d < 0:
                return False
        elif not _valid_pair(s, d, depth + 1):
            return False
    return True


def as_pair(shape: object, stride: object | None) -> tuple[IntTuple, IntTuple]:
    """A validated ``(shape, stride)``; ``stride`` None means row-major compact."""
    if _valid_pair(shape, stride):
        return cast(IntTuple, shape), cast(IntTuple, stride)  # the common case: no copies
    s = _as_int_tuple(shape, "shape")
    d = algebra.suffix_product(_check_sizes(s, "shape", 1)) if stride is None \
        else _as_int_tuple(stride, "stride")
    if not algebra.congruent(s, d):
        raise InvalidLayoutError(f"shape {fmt(s)} and stride {fmt(d)} are not "
                                 "congruent (they must have the same nesting structure)")
    _check_sizes(s, "shape", 1)
    _check_sizes(d, "stride", 0)
    return s, d


# ---- coordinates ----------------------------------------------------------------------------

def _natural(crd: object, shape: IntTuple) -> IntTuple:
    """``crd`` as the coordinate congruent to the valid ``shape`` that it names, or
    :class:`~layout.LayoutIndexError`: ``None`` is 0, an int for a tuple mode is split
    over that mode, integer-likes are converted and junk refused on the way."""
    if type(crd) is int:
        n = algebra.product(shape)
        if 0 <= crd < n:
            return algebra.idx2crd(crd, shape)
        raise LayoutIndexError(f"coordinate {fmt_int(crd)} is out of range for a mode of "
                               f"shape {fmt(shape)} (valid: 0 <= c < {fmt_int(n)})")
    if crd is None:
        return algebra.idx2crd(0, shape)
    if isinstance(crd, tuple):
        if isinstance(shape, int) or len(crd) != len(shape):
            raise LayoutIndexError(f"coordinate {show(crd)} does not match the shape "
                                   f"{fmt(shape)}: a tuple coordinate needs one entry per mode")
        return tuple([_natural(c, s) for c, s in zip(crd, shape)])
    return _natural(as_int(crd, "a coordinate", "an int, None or a tuple"), shape)


def _is_natural(crd: object, shape: object, stride: object, depth: int = 0) -> bool:
    """Whether ``crd``, ``shape`` and ``stride`` are congruent tuples of plain ints with
    ``0 <= c < s`` and ``d >= 0`` at every leaf (so the layout is valid too), in one pass."""
    if type(crd) is not tuple or type(shape) is not tuple or type(stride) is not tuple \
            or len(crd) != len(shape) or len(stride) != len(shape) or depth >= MAX_DEPTH:
        return False
    for c, s, d in zip(crd, shape, stride):
        if type(c) is int and type(s) is int and type(d) is int:
            if not 0 <= c < s or d < 0:
                return False
        elif not _is_natural(c, s, d, depth + 1):
            return False
    return True


def coord_offset(crd: object, shape: IntTuple, stride: IntTuple) -> int:
    """The offset of the coordinate ``crd`` in the valid ``shape:stride``, checked on the
    way (see :func:`crd2idx`): ``inner_product`` of its natural coordinate and the stride."""
    natural = crd if _is_natural(crd, shape, stride) else _natural(crd, shape)
    return algebra.inner_product(cast(IntTuple, natural), stride)


# ---- the public int-tuple functions: check, then call the algebra ---------------------------

def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order (leaves must be ints >= 0).

    >>> flatten((2, (3, 4))), flatten(5)
    ((2, 3, 4), (5,))
    """
    return algebra.flatten(_checked(t, "an int tuple", 0))


def product(t: IntTuple) -> int:
    """The product of the leaves of ``t`` (1 for the empty tuple); leaves are ints >= 0.

    >>> product((2, (3, 4))), product(())
    (24, 1)
    """
    return algebra.product(_checked(t, "an int tuple", 0))


def suffix_product(shape: IntTuple, init: int = 1) -> IntTuple:
    """Row-major compact strides for ``shape``: the default stride of a layout.

    The mirror of CuTe's ``prefix_product``: each mode's stride is ``init``
    times the product of the modes after it.

    >>> suffix_product((2, (3, 4)))
    (12, (4, 1))
    """
    start = as_int(init, "init")
    if start < 0:
        raise InvalidLayoutError(f"init must be >= 0, got {fmt_int(start)}")
    return algebra.suffix_product(_checked(shape, "shape", 1), start)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Divide the shape ``a`` by ``b``, innermost (last) mode first: the mirror of CuTe's.

    An int ``b`` is divided out of ``a``'s modes from the last one outward, each
    mode absorbing what it can (``ceil(a_k / b)``, then ``b`` shrinks by
    ``a_k``); tuples divide mode by mode.  At each step one of the two ints
    must divide the other.  ``shape_div(a, b) == rev(cute.shape_div(rev(a), rev(b)))``.

    >>> shape_div((4, 3), 6), shape_div(((4, 3), 6), 36)
    ((2, 1), ((2, 1), 1))
    """
    return algebra.shape_div(_checked(a, "shape_div's first argument", 1),
                             _checked(b, "shape_div's second argument", 1))


def inner_product(a: IntTuple, b: IntTuple) -> int:
    """The sum of the products of the leaves of two congruent int tuples.

    ``crd2idx(c, shape, stride) == inner_product(c, stride)`` for a coordinate
    ``c`` congruent to ``shape``.

    >>> inner_product((1, 2), (3, 2)), inner_product(((2, 3), 4), ((2, 1), 2))
    (7, 15)
    """
    x, y = _checked(a, "inner_product's first argument", 0), \
        _checked(b, "inner_product's second argument", 0)
    if not algebra.congruent(x, y):
        raise InvalidLayoutError(f"inner_product needs congruent int tuples, got {fmt(x)} and "
                                 f"{fmt(y)}")
    return algebra.inner_product(x, y)


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
    if _is_natural(crd, shape, stride):  # the common case: nothing to convert
        return algebra.inner_product(cast(IntTuple, crd), cast(IntTuple, stride))
    s, d = as_pair(shape, stride)
    return coord_offset(crd, s, d)


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """Split the index ``idx`` into a coordinate congruent to ``shape``, row-major.

    The inverse of :func:`crd2idx` with the default (compact) stride.

    >>> idx2crd(5, (2, 3))
    (1, 2)
    >>> idx2crd(7, (2, (2, 2)))
    (1, (1, 1))
    """
    s = shape if type(shape) is int and shape >= 1 else _checked(shape, "shape", 1)
    i = as_int(idx, "index")
    n = algebra.product(s)
    if i < 0 or i >= n:
        raise LayoutIndexError(f"index {fmt_int(i)} is out of range for shape {fmt(s)} "
                               f"(valid: 0 <= i < {fmt_int(n)})")
    return algebra.idx2crd(i, s)
