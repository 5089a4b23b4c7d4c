"""The :class:`Layout` value and the operations it offers as methods.

Each public function checks its operands, flattens them and calls one helper of
:mod:`layout._flat`, which holds the algebra; the by-mode forms (a tuple right
operand) go through :func:`by_mode`, the one loop over a layout's modes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar, Union

import attrs

from . import _flat
from ._door import MAX_DEPTH, as_coord, as_int, as_pair, check_nesting, coord_offset
from ._errors import (
    ComplementError,
    CompositionError,
    InvalidLayoutError,
    InverseError,
    LayoutIndexError,
    LayoutTypeError,
)
from ._inttuple import Coord, IntTuple, flatten, fmt, modes, peel, product
from ._show import fmt_int, show

__all__ = [
    "Layout",
    "Tiler",
    "by_mode",
    "check_layout",
    "within_depth",
    "make_layout",
    "coalesce",
    "filter",
    "composition",
    "complement",
    "right_inverse",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "is_injective",
    "is_compact",
    "is_tractable",
    "same_function",
]


@attrs.frozen(repr=False, init=False)
class Layout:
    """A CuTe layout in row-major order: a function from indices to offsets.

    ``shape`` and ``stride`` are congruent nested int tuples (or ints), sizes
    >= 1 and strides >= 0, nested at most :data:`~layout.MAX_DEPTH` levels.
    The default stride is row-major compact.  The last mode varies fastest,
    so the index ``i`` is split into coordinates by peeling the last mode
    first and ``L(i) = sum(c_k * d_k)``; ``L(i)`` is defined for
    ``0 <= i < size`` only.  Values are immutable, equal and hashable by
    (shape, stride), and pickle through the constructor;
    :meth:`same_function` compares them as functions.

    >>> L = Layout((2, 4))
    >>> print(L)
    (2,4):(4,1)
    >>> L(5), L(1, 1), L.size, L.cosize, L.rank
    (5, 5, 8, 8, 2)
    >>> print(Layout((2, (2, 2)), (1, (4, 2)))[1])
    (2,2):(4,2)
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: object, stride: object = None) -> None:
        """Convert and check at the door: every Layout that exists is valid."""
        self.__attrs_init__(*as_pair(shape, stride))

    @classmethod
    def _trusted(cls, shape: IntTuple, stride: IntTuple) -> Layout:
        """A Layout from a shape and stride already known valid (no checks)."""
        made = object.__new__(cls)  # attrs' frozen __attrs_init__, without its call overhead
        object.__setattr__(made, "shape", shape)
        object.__setattr__(made, "stride", stride)
        return made

    def __reduce__(self) -> tuple[type[Layout], tuple[IntTuple, IntTuple]]:
        return Layout, (self.shape, self.stride)  # unpickling validates again

    # ---- queries -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The size of the domain: the product of the shape."""
        return product(self.shape)

    @property
    def cosize(self) -> int:
        """The size of the codomain: ``max(image) + 1``."""
        return _flat.cosize(flatten(self.shape), flatten(self.stride))

    @property
    def rank(self) -> int:
        """The number of top-level modes (1 for an int shape)."""
        return 1 if isinstance(self.shape, int) else len(self.shape)

    @property
    def depth(self) -> int:
        """The nesting depth: 0 for an int shape, 1 for a flat tuple, ..."""
        return _depth(self.shape)

    def __len__(self) -> int:
        return self.rank

    def __bool__(self) -> bool:
        # Every layout is a value, never "empty": without this, the rank-0 layout ():()
        # would be falsy through __len__, and `layout or default` would misfire.
        return True

    def __call__(self, *crd: Coord) -> int:
        """Evaluate by index ``L(i)`` or by coordinate ``L(c0, c1)`` / ``L((c0, (c1, c2)))``."""
        c = crd[0] if len(crd) == 1 else crd
        if type(c) is not int:
            c = as_coord(c)
            if _has_none(c):
                raise LayoutTypeError(f"coordinate {show(c)} contains None; use "
                                      "slice_and_offset(crd, layout) to slice")
        if type(c) is int:
            if c >= 0:
                offset, rest = peel(c, self.shape, self.stride)
                if rest == 0:
                    return offset
            raise LayoutIndexError(f"index {fmt_int(c)} is outside the domain of {self} "
                                   f"(valid: 0 <= i < {fmt_int(self.size)})")
        return coord_offset(c, self.shape, self.stride)

    def __getitem__(self, key: int | slice) -> Layout:
        """The mode ``key`` as a Layout (several modes, concatenated, for a slice)."""
        shape, stride = self.shape, self.stride
        if type(key) is int and isinstance(shape, tuple) and isinstance(stride, tuple) \
                and -len(shape) <= key < len(shape):
            return Layout._trusted(shape[key], stride[key])  # the common case
        modes = self._modes()
        if isinstance(key, slice):
            start, stop, step = (None if v is None else as_int(v, "a mode slice bound")
                                 for v in (key.start, key.stop, key.step))
            if step == 0:
                raise InvalidLayoutError(f"a mode slice's step must not be 0, got {show(key)}")
            return make_layout(*modes[start:stop:step])
        k = as_int(key, "a mode index", "an int or a slice")
        if not -len(modes) <= k < len(modes):
            raise LayoutIndexError(f"mode {fmt_int(k)} is out of range for {self} of rank "
                                   f"{self.rank}")
        return modes[k]

    def __iter__(self) -> Iterator[Layout]:
        """The top-level modes, each as a Layout."""
        return iter(self._modes())

    def _modes(self) -> tuple[Layout, ...]:
        if isinstance(self.shape, int):
            return (self,)
        return tuple([Layout._trusted(s, d) for s, d in modes(self.shape, self.stride)])

    def __str__(self) -> str:
        return f"{fmt(self.shape)}:{fmt(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({fmt(self.shape, ', ')}, {fmt(self.stride, ', ')})"

    # ---- the operations, as methods ------------------------------------------------------
    def coalesce(self, profile: object = None) -> Layout:
        """See :func:`layout.coalesce`."""
        return coalesce(self, profile)

    def filter(self) -> Layout:
        """See :func:`layout.filter`."""
        return filter(self)

    def composition(self, other: Tiler) -> Layout:
        """See :func:`layout.composition`: ``self ∘ other``."""
        return composition(self, other)

    def complement(self, cotarget: int = 1) -> Layout:
        """See :func:`layout.complement`."""
        return complement(self, cotarget)

    def right_inverse(self) -> Layout:
        """See :func:`layout.right_inverse`."""
        return right_inverse(self)

    def left_inverse(self) -> Layout:
        """See :func:`layout.left_inverse`."""
        return left_inverse(self)

    def logical_divide(self, tiler: Tiler) -> Layout:
        """See :func:`layout.logical_divide`."""
        return logical_divide(self, tiler)

    def logical_product(self, tiler: Tiler) -> Layout:
        """See :func:`layout.logical_product`."""
        return logical_product(self, tiler)

    def is_injective(self) -> bool:
        """See :func:`layout.is_injective`."""
        return is_injective(self)

    def is_compact(self) -> bool:
        """See :func:`layout.is_compact`."""
        return is_compact(self)

    def is_tractable(self) -> bool:
        """See :func:`layout.is_tractable`."""
        return is_tractable(self)

    def same_function(self, other: Layout) -> bool:
        """See :func:`layout.same_function`."""
        return same_function(self, other)


Tiler = Union[Layout, int, None, tuple["Tiler", ...]]
"""A right operand: a Layout, an int ``n`` (meaning ``n:1``), ``None`` (leave the
mode alone) or a by-mode tuple of tilers lined up with the trailing modes."""

_TILER_KINDS = "a Layout, an int, None or a by-mode tuple"

T = TypeVar("T")


# ---- building values ------------------------------------------------------------------------

def _from_flat(flat: _flat.Flat) -> Layout:
    """The Layout of flat modes: an int shape for one mode, a flat tuple otherwise."""
    shapes, strides = flat
    return Layout._trusted(*((shapes[0], strides[0]) if len(shapes) == 1 else flat))


def within_depth(shape: IntTuple, stride: IntTuple) -> Layout:
    """The Layout of valid modes whose nesting may have grown past the limit: refused
    (:class:`~layout.InvalidLayoutError`) when deeper than :data:`~layout.MAX_DEPTH`."""
    if _depth(shape) > MAX_DEPTH:
        raise InvalidLayoutError(f"the result {fmt(shape)}:{fmt(stride)} would be nested deeper "
                                 f"than MAX_DEPTH = {MAX_DEPTH}")
    return Layout._trusted(shape, stride)


def _depth(t: IntTuple) -> int:
    if isinstance(t, int):
        return 0
    d = 0
    for x in t:
        if not isinstance(x, int):  # ints add nothing: skip the call (the common case)
            d = max(d, _depth(x))
    return d + 1


def _has_none(c: object) -> bool:
    if c is None:
        return True
    return isinstance(c, tuple) and any([_has_none(x) for x in c])


def check_layout(x: object, what: str = "layout") -> Layout:
    """``x`` if it is a Layout, else :class:`~layout.LayoutTypeError` naming ``what``."""
    if not isinstance(x, Layout):
        raise LayoutTypeError(f"{what} must be a Layout, got {show(x)} of type "
                              f"{type(x).__name__}")
    return x


def _flat_of(L: Layout) -> _flat.Flat:
    return flatten(L.shape), flatten(L.stride)


def by_mode(A: Layout, tiler: tuple[object, ...], what: str,
             op: Callable[[Layout, Any], T]) -> tuple[list[Layout], list[T]]:
    """A by-mode right operand: ``op(mode, t)`` for each of A's trailing modes and ``t``.

    The tuple lines up with A's *trailing* modes (as NumPy broadcasting does);
    returns A's leading modes, untouched, and the results.
    """
    check_nesting(tiler, f"the by-mode {what}")
    modes = A._modes()
    if len(tiler) > len(modes):
        raise InvalidLayoutError(
            f"the by-mode {what} {show(tiler)} has {len(tiler)} modes but {A} has only "
            f"{len(modes)}; a by-mode tuple lines up with the trailing modes and may not be longer")
    off = len(modes) - len(tiler)
    return list(modes[:off]), [op(m, t) for m, t in zip(modes[off:], tiler)]


def _as_layout(t: object, what: str) -> Layout:
    """A non-tuple tiler as a Layout: itself, or ``n:1`` for an int ``n >= 1``."""
    if isinstance(t, Layout):
        return t
    n = as_int(t, what, _TILER_KINDS)
    if n < 1:
        raise InvalidLayoutError(f"{what} {fmt_int(n)} is not a size: an int tiler n means "
                                 "n:1 and must be >= 1")
    return Layout._trusted(n, 1)


def make_layout(*layouts: Layout) -> Layout:
    """Concatenate layouts: each argument becomes one top-level mode.

    With no argument, the rank-0 layout ``():()`` (size 1).

    >>> print(make_layout(Layout(2, 4), Layout((3, 2))))
    (2,(3,2)):(4,(2,1))
    """
    for L in layouts:
        check_layout(L, "every argument of make_layout")
    return within_depth(tuple([L.shape for L in layouts]), tuple([L.stride for L in layouts]))


# ---- coalesce and filter --------------------------------------------------------------------

def coalesce(layout: Layout, profile: object = None) -> Layout:
    """The flattest layout equal to ``layout`` as a function on ``[0, size)``.

    Drops size-1 modes and merges ``s0:d0`` with an inner ``s1:d1`` when
    ``d0 == s1 * d1``.  With a by-mode ``profile`` tuple, only the modes it
    covers are coalesced (each separately; a tuple entry recurses, an int or
    None entry coalesces the whole mode); the profile lines up with the
    layout's trailing modes.

    >>> print(coalesce(Layout((2, (1, 6)), (1, (7, 2)))))
    (2,6):(1,2)
    >>> print(coalesce(Layout((2, 3, 4))))
    24:1
    >>> print(coalesce(Layout(((2, 3), (2, 2))), profile=(1,)))
    ((2,3),4):((12,4),1)
    """
    check_layout(layout)
    if isinstance(profile, tuple):
        lead, done = by_mode(layout, profile, "profile", coalesce)
        return make_layout(*lead, *done)
    if profile is not None:
        as_int(profile, "a coalesce profile", "None, an int or a by-mode tuple")
    return _from_flat(_flat.coalesce(*_flat_of(layout)))


def filter(layout: Layout) -> Layout:
    """``coalesce`` after dropping stride-0 modes: same image set, no broadcast modes.

    Returns ``1:0`` when nothing is left.

    >>> print(filter(Layout((2, 3, 4), (0, 4, 1))))
    12:1
    """
    check_layout(layout)
    keep = [(s, d) for s, d in zip(*_flat_of(layout)) if d != 0]
    return _from_flat(_flat.coalesce(tuple([s for s, _ in keep]), tuple([d for _, d in keep])))


# ---- composition ----------------------------------------------------------------------------

def composition(A: Layout, B: Tiler) -> Layout:
    """``A ∘ B``: the layout ``i -> A(B(i))`` for ``i`` in ``[0, size(B))``, shaped like B.

    ``B`` may be a Layout, an int ``n`` (meaning ``n:1``), ``None`` (A
    itself), or a by-mode tuple (lined up with A's trailing modes) that
    composes mode by mode.

    **Extended domain (as CuTe).** B may reach past ``size(A)``: A is then
    read as ``coalesce(A)`` with its outer (first) mode unbounded.  Using
    the coalesced form makes the answer depend only on A as a function on
    ``[0, size(A))``: ``(1,3):(14,17)`` and ``3:17`` are the same function,
    and both give ``composition(_, 4:1) == 4:17``.  (Evaluating ``A(i)``
    itself stays strict: ``i >= size(A)`` raises.)

    Raises :class:`~layout.CompositionError` where no layout equals that
    function: B's strides and sizes must divide A's modes (stride and shape
    divisibility), and a multi-mode B must be tractable unless A coalesces to
    one mode, so that B's modes cannot carry across A's modes.

    >>> print(composition(Layout((6, 2), (2, 1)), Layout(3, 2)))
    3:2
    >>> print(composition(Layout((3, 6), (7, 21)), Layout(4, 3)))
    (2,2):(7,63)
    >>> print(composition(Layout(4), Layout(4, 2)))   # past A's size
    4:2
    >>> composition(Layout((6, 4), (5, 1)), Layout(6))
    Traceback (most recent call last):
    ...
    layout.CompositionError: composition (6,4):(5,1) ∘ 6:1 ... (shape divisibility)
    >>> print(composition(Layout((4, 6), (6, 1)), (2, 3)))
    (2,3):(6,1)
    """
    check_layout(A, "the left operand of composition")
    if B is None:
        return A
    if isinstance(B, tuple):
        lead, done = by_mode(A, B, "tiler", composition)
        return make_layout(*lead, *done)
    right = _as_layout(B, "the right operand of composition")
    try:
        shape, stride = _flat.compose(A.shape, A.stride, right.shape, right.stride)
    except CompositionError as e:
        raise CompositionError(f"composition {A} ∘ {right} is inadmissible: {e}") from None
    return within_depth(shape, stride)


# ---- complement and inverses ----------------------------------------------------------------

def complement(A: Layout, cotarget: int = 1) -> Layout:
    """The layout of the offsets A does not reach, up to ``cotarget``.

    ``R = complement(A, M)`` has descending strides; ``(R, filter(A))`` is
    injective and its image is exactly ``[0, round_up(M, span(A)))``.
    Stride-0 modes of A are ignored.  A must be tractable (see
    :func:`~layout.is_tractable`) and ``M >= 1``, else
    :class:`~layout.ComplementError`.

    >>> print(complement(Layout(4, 2), 24))
    (3,2):(8,1)
    >>> print(complement(Layout((2, 2), (4, 1)), 16))
    (2,2):(8,2)
    """
    check_layout(A, "the layout to complement")
    m = as_int(cotarget, "the cotarget of complement")
    if m < 1:
        raise ComplementError(f"complement({A}, {fmt_int(m)}) is inadmissible: the cotarget "
                              "must be >= 1")
    try:
        return _from_flat(_flat.complement(*_flat_of(A), m))
    except ComplementError as e:
        raise ComplementError(f"complement({A}, {fmt_int(m)}) is inadmissible: {e}"
                                    ) from None


def right_inverse(L: Layout) -> Layout:
    """A layout R with ``L(R(i)) == i`` for every ``i < size(R)``, as large as possible.

    For injective L, ``size(R)`` is the largest n with ``[0, n)`` inside L's
    image.  Stride-0 modes are skipped (as CuTe C++ does; pycute gives up at
    them and returns ``1:0``).

    >>> print(right_inverse(Layout((4, 2), (1, 4))))
    (2,4):(1,2)
    """
    check_layout(L)
    return _from_flat(_flat.right_inverse(*_flat_of(L)))


def left_inverse(L: Layout) -> Layout:
    """A layout R with ``R(L(i)) == i`` for every ``i < size(L)``.

    L must be injective and tractable, else :class:`~layout.InverseError`.

    >>> L = Layout((2, 3), (1, 4))
    >>> R = left_inverse(L)
    >>> [R(L(i)) for i in range(L.size)]
    [0, 1, 2, 3, 4, 5]
    """
    check_layout(L)
    try:
        return _from_flat(_flat.left_inverse(*_flat_of(L)))
    except InverseError as e:
        raise InverseError(f"left_inverse({L}) is inadmissible: {e}") from None


# ---- divide and product ---------------------------------------------------------------------

def logical_divide(A: Layout, tiler: Tiler) -> Layout:
    """Split A into (rest, tile): ``A ∘ (complement(B, size(A)), B)``.

    The first mode is the outer one: mode 1 walks one tile of A (B's
    elements), mode 0 walks from tile to tile.  A by-mode tuple divides A's
    trailing modes one by one.  When B's span does not divide ``size(A)``,
    the last tile runs past A's size (composition's extended domain).

    >>> print(logical_divide(Layout(12), Layout(3, 2)))
    ((2,2),3):((6,1),2)
    """
    check_layout(A)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        lead, done = by_mode(A, tiler, "tiler", logical_divide)
        return make_layout(*lead, *done)
    B = _as_layout(tiler, "a tiler")
    return composition(A, make_layout(complement(B, A.size), B))


def logical_product(A: Layout, tiler: Tiler) -> Layout:
    """Repeat A along B: ``(complement(A, size(A) * cosize(B)) ∘ B, A)``.

    The first mode is the repetition, the second is A itself.  An int ``n``
    means ``n:1`` (pycute instead runs a divide there, a known bug).

    >>> print(logical_product(Layout((2, 2)), Layout(3)))
    (3,(2,2)):(4,(2,1))
    """
    check_layout(A)
    if tiler is None:
        return A
    if isinstance(tiler, tuple):
        lead, done = by_mode(A, tiler, "tiler", logical_product)
        return make_layout(*lead, *done)
    B = _as_layout(tiler, "a tiler")
    return make_layout(composition(complement(A, A.size * B.cosize), B), A)


# ---- predicates -----------------------------------------------------------------------------

def is_tractable(layout: Layout) -> bool:
    """Whether ``layout`` is admissible for :func:`complement`.

    Sort the flat modes of size > 1 and stride > 0 by stride; each stride must
    be a multiple of the previous mode's ``size * stride``.  Stride-0 modes are
    ignored, so a tractable layout is injective only if it has none.

    >>> is_tractable(Layout((2, 2), (1, 2))), is_tractable(Layout((2, 2), (3, 1)))
    (True, False)
    """
    check_layout(layout)
    return _flat.tractability_violation(_flat.sorted_modes(*_flat_of(layout))) is None


def is_injective(layout: Layout) -> bool:
    """Whether distinct indices in ``[0, size)`` map to distinct offsets.

    Decided from the modes' structure (never by listing the domain): see
    :func:`layout._flat.is_injective`.  Only a non-tractable layout with three
    or more entangled modes reaching more than
    ``INJECTIVITY_ENUMERATION_LIMIT`` offsets raises
    :class:`~layout.UndecidableError`.

    >>> is_injective(Layout((2, 2), (3, 1))), is_injective(Layout((2, 3), (2, 1)))
    (True, False)
    >>> is_injective(Layout((2**22, 3), (2, 3)))   # 2*3 == 3*2: a collision
    False
    """
    check_layout(layout)
    return _flat.is_injective(*_flat_of(layout))


def is_compact(layout: Layout) -> bool:
    """Whether ``layout`` is a bijection onto ``[0, size)``.

    >>> is_compact(Layout((2, 3), (1, 2))), is_compact(Layout((2, 3), (1, 3)))
    (True, False)
    """
    check_layout(layout)
    return _flat.is_compact(*_flat_of(layout))


def same_function(a: Layout, b: Layout) -> bool:
    """Whether ``a`` and ``b`` have the same size and agree on every index in ``[0, size)``.

    Two layouts are the same function exactly when their coalesced forms are
    equal (which implies equal sizes).

    >>> same_function(Layout((2, 2), (2, 1)), Layout(4, 1)), Layout((2, 2)) == Layout(4)
    (True, False)
    """
    check_layout(a)
    check_layout(b)
    return _flat.coalesce(*_flat_of(a)) == _flat.coalesce(*_flat_of(b))
