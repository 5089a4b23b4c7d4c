"""Nested integer tuples: the shapes, strides and coordinates of layouts.

Row-major (lexicographic) throughout: the *last* mode varies fastest, and an
integer index is split into coordinates by peeling the last mode first.

Every public helper validates its arguments at the door (ints or tuples of ints,
nested at most :data:`MAX_DEPTH` levels, sizes >= 1 and strides >= 0) and
raises a :class:`~layout.LayoutError` subclass naming the bad value; the
underscored twins assume valid input and are what the algebra uses internally.
"""

from __future__ import annotations

import math
import operator
import reprlib
from collections.abc import Callable
from typing import SupportsIndex, Union, cast

from ._errors import InvalidLayoutError, LayoutIndexError, LayoutTypeError

IntTuple = Union[int, tuple["IntTuple", ...]]
"""An ``int`` or a nested tuple of ``int``."""

Coord = Union[int, None, tuple["Coord", ...]]
"""A coordinate: like :data:`IntTuple`, where ``None`` marks a sliced mode."""

__all__ = [
    "MAX_DEPTH",
    "IntTuple",
    "Coord",
    "as_int",
    "as_int_tuple",
    "show",
    "fmt",
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

_BIG = 10**40  # ints at least this large are abbreviated in messages and str()


# ---- showing values in messages -------------------------------------------------------------

def _fmt_int(x: int) -> str:
    """``str(x)``, or an abbreviation such as ``~1.2346e5000`` for a huge int.

    Python refuses ``str()`` of ints over 4,300 digits, and a message should stay
    short; the abbreviation is computed from the top bits, without ``str(x)``.
    """
    if -_BIG < x < _BIG:
        return str(x)
    n = abs(x)
    shift = max(n.bit_length() - 64, 0)
    log10 = math.log10(n >> shift) + shift * math.log10(2)
    exp = math.floor(log10)
    return f"{'-' if x < 0 else ''}~{10 ** (log10 - exp):.4f}e{exp}"


def fmt(t: IntTuple) -> str:
    """CuTe's notation for an int tuple: ``(2,(3,4))``; a 1-tuple prints as ``(2,)``.

    >>> fmt((2, (3, 4))), fmt((2,)), fmt(10**50)
    ('(2,(3,4))', '(2,)', '~1.0000e50')
    """
    if isinstance(t, int):
        return _fmt_int(t)
    inner = ",".join([fmt(x) for x in t])
    return f"({inner},)" if len(t) == 1 else f"({inner})"


class _Repr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return _fmt_int(x)


_repr = _Repr()
_repr.maxlevel = 4
_repr.maxstring = _repr.maxother = 60


def show(value: object) -> str:
    """A short, never-failing ``repr`` of ``value`` for an error message.

    >>> show((1, [2, 3])), show(10**5000)
    ('(1, [2, 3])', '~1.0000e5000')
    """
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__: name the type instead
        return f"<{type(value).__name__} object>"


# ---- conversion at the door -----------------------------------------------------------------

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
    layout._errors.LayoutTypeError: a size must be an int, got 2.0 of type float
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


def as_int_tuple(value: object, what: str = "value") -> IntTuple:
    """``value`` as a nested tuple of plain ints, or a typed error naming it.

    Ints and integer-likes become ``int``; tuples (and tuple subclasses) become
    plain tuples.  Lists, sets, strings, floats and bools are refused
    (:class:`~layout.LayoutTypeError`); so is nesting deeper than
    :data:`MAX_DEPTH` (:class:`~layout.InvalidLayoutError`).  An empty tuple is a
    rank-0 mode (size 1, no leaves), at the top or nested.  Signs are not checked.

    >>> as_int_tuple((2, (3, 4)))
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


def check_sizes(t: IntTuple, what: str, low: int) -> IntTuple:
    """``t`` unchanged if every leaf is ``>= low``, else :class:`~layout.InvalidLayoutError`."""
    for x in _flatten(t):
        if x < low:
            raise InvalidLayoutError(f"every {'size' if low else 'stride'} must be >= {low}, got "
                                     f"{_fmt_int(x)} in {what} {fmt(t)}")
    return t


def as_shape(value: object, what: str = "shape") -> IntTuple:
    """A validated shape: a nested int tuple whose leaves are all >= 1."""
    return check_sizes(as_int_tuple(value, what), what, 1)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Whether ``a`` and ``b`` have the same nesting structure.

    >>> congruent((2, (3, 4)), (1, (5, 6))), congruent((2, 3), 6)
    (True, False)
    """
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(map(congruent, a, b))


def check_pair(shape: IntTuple, stride: IntTuple) -> None:
    """Raise :class:`~layout.InvalidLayoutError` unless ``shape:stride`` is a valid layout."""
    if not congruent(shape, stride):
        raise InvalidLayoutError(f"shape {fmt(shape)} and stride {fmt(stride)} are not "
                                 "congruent (they must have the same nesting structure)")
    check_sizes(shape, "shape", 1)
    check_sizes(stride, "stride", 0)


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
    s = as_int_tuple(shape, "shape")
    d = _suffix_product(check_sizes(s, "shape", 1), 1) if stride is None \
        else as_int_tuple(stride, "stride")
    check_pair(s, d)
    return s, d


# ---- the helpers, public (validated) and internal ------------------------------------------

def _flatten(t: IntTuple) -> tuple[int, ...]:
    if isinstance(t, int):
        return (t,)
    out: list[int] = []
    nested = False
    for x in t:
        if isinstance(x, int):
            out.append(x)
        else:
            out.extend(_flatten(x))
            nested = True
    return tuple(out) if nested else cast("tuple[int, ...]", t)  # flat: no copy


def _checked(t: object, what: str, low: int) -> IntTuple:
    return check_sizes(as_int_tuple(t, what), what, low)


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of ``t`` in order (leaves must be ints >= 0).

    >>> flatten((2, (3, 4))), flatten(5)
    ((2, 3, 4), (5,))
    """
    return _flatten(_checked(t, "an int tuple", 0))


def _product(t: IntTuple) -> int:
    if isinstance(t, int):
        return t
    p = 1
    for x in t:
        p *= x if isinstance(x, int) else _product(x)
    return p


def product(t: IntTuple) -> int:
    """The product of the leaves of ``t`` (1 for the empty tuple); leaves are ints >= 0.

    >>> product((2, (3, 4))), product(())
    (24, 1)
    """
    return _product(_checked(t, "an int tuple", 0))


def _suffix_product(shape: IntTuple, init: int) -> IntTuple:
    if isinstance(shape, int):
        return init
    out: list[IntTuple] = []
    for s in reversed(shape):
        out.append(_suffix_product(s, init))
        init *= _product(s)
    out.reverse()
    return tuple(out)


def suffix_product(shape: IntTuple, init: int = 1) -> IntTuple:
    """Row-major compact strides for ``shape``: the default stride of a layout.

    The mirror of CuTe's ``prefix_product``: each mode's stride is ``init``
    times the product of the modes after it.

    >>> suffix_product((2, (3, 4)))
    (12, (4, 1))
    """
    start = as_int(init, "init")
    if start < 0:
        raise InvalidLayoutError(f"init must be >= 0, got {_fmt_int(start)}")
    return _suffix_product(_checked(shape, "shape", 1), start)


def _shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            if len(a) != len(b):
                raise InvalidLayoutError(f"shape_div needs tuples of one length, got {fmt(a)} "
                                         f"and {fmt(b)}")
            return tuple([_shape_div(x, y) for x, y in zip(a, b)])
        out: list[IntTuple] = []
        for x in reversed(a):  # innermost (last) mode first
            out.append(_shape_div(x, b))
            b = _shape_div(b, _product(x))
        out.reverse()
        return tuple(out)
    if isinstance(b, tuple):
        return _shape_div(a, _product(b))
    if a % b and b % a:
        raise InvalidLayoutError(f"shape_div({_fmt_int(a)}, {_fmt_int(b)}): neither divides "
                                 "the other")
    return -(-a // b)


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Divide the shape ``a`` by ``b``, innermost (last) mode first: the mirror of CuTe's.

    An int ``b`` is divided out of ``a``'s modes from the last one outward, each
    mode absorbing what it can (``ceil(a_k / b)``, then ``b`` shrinks by
    ``a_k``); tuples divide mode by mode.  At each step one of the two ints
    must divide the other.  ``shape_div(a, b) == rev(cute.shape_div(rev(a), rev(b)))``.

    >>> shape_div((4, 3), 6), shape_div(((4, 3), 6), 36)
    ((2, 1), ((2, 1), 1))
    """
    return _shape_div(_checked(a, "shape_div's first argument", 1),
                      _checked(b, "shape_div's second argument", 1))


def _inner_product(a: IntTuple, b: IntTuple) -> int:
    if isinstance(a, int) or isinstance(b, int):
        return _product(a) * _product(b)  # congruent: both are ints here
    return sum([_inner_product(x, y) for x, y in zip(a, b)])


def inner_product(a: IntTuple, b: IntTuple) -> int:
    """The sum of the products of the leaves of two congruent int tuples.

    ``crd2idx(c, shape, stride) == inner_product(c, stride)`` for a coordinate
    ``c`` congruent to ``shape``.

    >>> inner_product((1, 2), (3, 2)), inner_product(((2, 3), 4), ((2, 1), 2))
    (7, 15)
    """
    x, y = _checked(a, "inner_product's first argument", 0), \
        _checked(b, "inner_product's second argument", 0)
    if not congruent(x, y):
        raise InvalidLayoutError(f"inner_product needs congruent int tuples, got {fmt(x)} and "
                                 f"{fmt(y)}")
    return _inner_product(x, y)


def map_pair(shape: IntTuple, stride: IntTuple,
             fn: Callable[[int, int], tuple[IntTuple, IntTuple]]) -> tuple[IntTuple, IntTuple]:
    """Apply ``fn(size, stride)`` to every leaf mode of a valid layout, keeping the nesting."""
    if isinstance(shape, int) or isinstance(stride, int):
        return fn(_product(shape), _product(stride))  # congruent: both are ints here
    parts = [map_pair(s, d, fn) for s, d in zip(shape, stride)]
    return tuple([p[0] for p in parts]), tuple([p[1] for p in parts])


# ---- coordinates ----------------------------------------------------------------------------

def as_coord(value: object, depth: int = 0) -> Coord:
    """A coordinate of plain ints, ``None`` and tuples, or a typed error naming it."""
    if type(value) is int or value is None:
        return value
    if isinstance(value, tuple):
        if depth >= MAX_DEPTH:
            raise InvalidLayoutError(f"a coordinate is nested deeper than MAX_DEPTH = {MAX_DEPTH}")
        return tuple([as_coord(v, depth + 1) for v in value])
    return as_int(value, "a coordinate", "an int, None or a tuple")


def _crd2idx(crd: object, shape: IntTuple, stride: IntTuple) -> int:
    """Offset of the coordinate ``crd`` (``None`` counts as 0) in the valid ``shape:stride``.

    ``crd`` is checked on the way: junk raises a typed error, integer-likes are converted.
    """
    if type(crd) is int:
        if crd >= 0:
            offset, rest = peel(crd, shape, stride)
            if rest == 0:
                return offset
        raise LayoutIndexError(f"coordinate {_fmt_int(crd)} is out of range for a mode of "
                               f"shape {fmt(shape)} (valid: 0 <= c < {_fmt_int(_product(shape))})")
    if crd is None:
        return 0
    if isinstance(crd, tuple):
        if isinstance(shape, int) or len(crd) != len(shape):
            raise LayoutIndexError(f"coordinate {show(crd)} does not match the shape "
                                   f"{fmt(shape)}: a tuple coordinate needs one entry per mode")
        total = 0
        for c, (s, d) in zip(crd, _modes(shape, stride)):
            # int leaves inline (the common case), anything else recursively
            total += c * d if type(c) is int and isinstance(s, int) and isinstance(d, int) \
                and 0 <= c < s else _crd2idx(c, s, d)
        return total
    return _crd2idx(as_int(crd, "a coordinate", "an int, None or a tuple"), shape, stride)


def peel(i: int, shape: IntTuple, stride: IntTuple) -> tuple[int, int]:
    """``(offset, rest)``: the index ``i >= 0`` split over the valid ``shape:stride``
    row-major (last mode first), the offset of its coordinate, and the quotient left
    over (0 exactly when ``i < size``).

    >>> peel(5, (2, 3), (3, 1)), peel(7, (2, 3), (3, 1))
    ((5, 0), (1, 1))
    """
    if isinstance(shape, int) or isinstance(stride, int):
        rest, c = divmod(i, _product(shape))
        return c * _product(stride), rest
    offset = 0
    for s, d in zip(reversed(shape), reversed(stride)):
        if isinstance(s, int) and isinstance(d, int):
            i, c = divmod(i, s)
            offset += c * d
        else:
            o, i = peel(i, s, d)
            offset += o
    return offset, i


def _plain_dot(crd: tuple[object, ...], shape: tuple[object, ...], stride: tuple[object, ...],
               depth: int) -> int | None:
    """``crd · stride`` when the three are congruent tuples of plain ints, with
    ``0 <= c < s`` and ``d >= 0`` at every leaf (so the layout is valid), else None.

    One pass that checks and computes: :func:`crd2idx`'s fast path for full coordinates.
    """
    if len(crd) != len(shape) or len(stride) != len(shape) or depth >= MAX_DEPTH:
        return None
    total = 0
    for c, s, d in zip(crd, shape, stride):
        if type(c) is int and type(s) is int and type(d) is int:
            if not 0 <= c < s or d < 0:
                return None
            total += c * d
        elif type(c) is tuple and type(s) is tuple and type(d) is tuple:
            sub = _plain_dot(c, s, d, depth + 1)
            if sub is None:
                return None
            total += sub
        else:
            return None
    return total


def _modes(shape: IntTuple, stride: IntTuple) -> list[tuple[IntTuple, IntTuple]]:
    """The top-level modes of a valid (congruent) ``shape:stride``."""
    if isinstance(shape, int) or isinstance(stride, int):
        return [(shape, stride)]
    return list(zip(shape, stride))


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
    if type(crd) is tuple and type(shape) is tuple and type(stride) is tuple:
        dot = _plain_dot(crd, shape, stride, 0)
        if dot is not None:
            return dot
    s, d = as_pair(shape, stride)
    return _crd2idx(crd, s, d)


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """Split the index ``idx`` into a coordinate congruent to ``shape``, row-major.

    The inverse of :func:`crd2idx` with the default (compact) stride.

    >>> idx2crd(5, (2, 3))
    (1, 2)
    >>> idx2crd(7, (2, (2, 2)))
    (1, (1, 1))
    """
    s = shape if type(shape) is int and shape >= 1 else as_shape(shape)
    i = as_int(idx, "index")
    n = _product(s)
    if i < 0 or i >= n:
        raise LayoutIndexError(f"index {_fmt_int(i)} is out of range for shape {fmt(s)} "
                               f"(valid: 0 <= i < {_fmt_int(n)})")
    return _idx2crd(i, s)


def _idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    if isinstance(shape, int):
        return idx
    out: list[IntTuple] = []
    for s in reversed(shape):
        n = _product(s)
        out.append(_idx2crd(idx % n, s))
        idx //= n
    out.reverse()
    return tuple(out)
