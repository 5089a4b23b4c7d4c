"""The :class:`Layout` value and the operations that need nothing but its modes."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from ._errors import (
    InvalidLayoutError,
    LayoutIndexError,
    LayoutTypeError,
    UndecidableError,
)
from ._inttuple import (
    Coord,
    IntTuple,
    _crd2idx,
    as_int_tuple,
    congruent,
    flatten,
    product,
    suffix_product,
)

if TYPE_CHECKING:
    from ._tiling import Tiler

__all__ = [
    "Layout",
    "make_layout",
    "coalesce",
    "filter",
    "is_injective",
    "is_compact",
    "is_tractable",
    "same_function",
    "INJECTIVITY_ENUMERATION_LIMIT",
]

INJECTIVITY_ENUMERATION_LIMIT = 1 << 26
"""Largest cosize for which :func:`is_injective` decides a non-tractable layout."""


def _check_values(shape: IntTuple, stride: IntTuple) -> None:
    if not congruent(shape, stride):
        raise InvalidLayoutError(
            f"shape {_fmt(shape)} and stride {_fmt(stride)} are not congruent "
            "(they must have the same nesting structure)"
        )
    for s in flatten(shape):
        if s < 1:
            raise InvalidLayoutError(f"every size must be >= 1, got {s} in shape {_fmt(shape)}")
    for d in flatten(stride):
        if d < 0:
            raise InvalidLayoutError(
                f"every stride must be >= 0, got {d} in stride {_fmt(stride)}"
            )


def _fmt(t: IntTuple) -> str:
    if type(t) is int:
        return str(t)
    inner = ",".join(_fmt(x) for x in t)  # type: ignore[union-attr]
    return f"({inner},)" if len(t) == 1 else f"({inner})"  # type: ignore[arg-type]


def _shape_conv(value: object) -> IntTuple:
    return as_int_tuple(value, "shape")


def _stride_conv(value: object) -> IntTuple | None:
    return None if value is None else as_int_tuple(value, "stride")


@attrs.frozen(repr=False)
class Layout:
    """A CuTe layout in row-major order: a function from indices to offsets.

    ``shape`` and ``stride`` are congruent nested int tuples (or ints).  The
    default stride is row-major compact.  The last mode varies fastest, so the
    index ``i`` is split into coordinates by peeling the last mode first and
    ``L(i) = sum(c_k * d_k)``.  Values are immutable, equal and hashable by
    (shape, stride); :meth:`same_function` compares them as functions.

    >>> L = Layout((2, 4))
    >>> print(L)
    (2,4):(4,1)
    >>> L(5), L(1, 1), L.size, L.cosize, L.rank
    (5, 5, 8, 8, 2)
    >>> print(Layout((2, (2, 2)), (1, (4, 2)))[1])
    (2,2):(4,2)
    """

    shape: IntTuple = attrs.field(converter=_shape_conv)
    stride: IntTuple = attrs.field(default=None, converter=_stride_conv)

    def __attrs_post_init__(self) -> None:
        if self.stride is None:
            object.__setattr__(self, "stride", suffix_product(self.shape))
        _check_values(self.shape, self.stride)

    # ---- queries -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The size of the domain: the product of the shape."""
        return product(self.shape)

    @property
    def cosize(self) -> int:
        """The size of the codomain: ``max(image) + 1``."""
        return _cosize(flatten(self.shape), flatten(self.stride))

    @property
    def rank(self) -> int:
        """The number of top-level modes (1 for an int shape)."""
        return 1 if type(self.shape) is int else len(self.shape)  # type: ignore[arg-type]

    @property
    def depth(self) -> int:
        """The nesting depth: 0 for an int shape, 1 for a flat tuple, ..."""
        return _depth(self.shape)

    def __len__(self) -> int:
        return self.rank

    def __bool__(self) -> bool:
        return True

    def __call__(self, *crd: Coord) -> int:
        """Evaluate by index ``L(i)`` or by coordinate ``L(c0, c1)`` / ``L((c0, (c1, c2)))``."""
        c: Coord = crd[0] if len(crd) == 1 else crd
        if type(c) is int and c >= self.size:
            raise LayoutIndexError(
                f"index {c} is outside the domain of {self} (valid: 0 <= i < {self.size})"
            )
        if _has_none(c):
            raise LayoutTypeError(
                f"coordinate {c} contains None; use slice_and_offset(crd, layout) to slice"
            )
        return _crd2idx(c, self.shape, self.stride)

    def __getitem__(self, key: int | slice) -> Layout:
        """The mode ``key`` as a Layout (or several modes, for a slice)."""
        shape = self.shape
        if type(key) is int and type(shape) is tuple and -len(shape) <= key < len(shape):
            return _raw(shape[key], self.stride[key])  # type: ignore[index]
        if type(shape) is int:
            modes: tuple[Layout, ...] = (self,)
        else:
            modes = tuple(_raw(s, d) for s, d in zip(self.shape, self.stride))  # type: ignore[arg-type]
        if isinstance(key, slice):
            return make_layout(*modes[key])
        if isinstance(key, bool) or not isinstance(key, int):
            raise LayoutTypeError(f"a mode index must be an int or a slice, got {key!r}")
        if not -len(modes) <= key < len(modes):
            raise LayoutIndexError(f"mode {key} is out of range for {self} of rank {self.rank}")
        return modes[key]

    def __iter__(self) -> Iterator[Layout]:
        """The top-level modes, each as a Layout."""
        if type(self.shape) is int:
            yield self
        else:
            for s, d in zip(self.shape, self.stride):  # type: ignore[arg-type]
                yield _raw(s, d)

    def __str__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"

    # ---- operations as methods -----------------------------------------------------------
    def coalesce(self, profile: object = None) -> Layout:
        """See :func:`layout.coalesce`."""
        return coalesce(self, profile)

    def filter(self) -> Layout:
        """See :func:`layout.filter`."""
        return filter(self)

    def composition(self, other: Tiler) -> Layout:
        """See :func:`layout.composition`: ``self ∘ other``."""
        from . import _algebra

        return _algebra.composition(self, other)

    def complement(self, cotarget: int = 1) -> Layout:
        """See :func:`layout.complement`."""
        from . import _algebra

        return _algebra.complement(self, cotarget)

    def right_inverse(self) -> Layout:
        """See :func:`layout.right_inverse`."""
        from . import _algebra

        return _algebra.right_inverse(self)

    def left_inverse(self) -> Layout:
        """See :func:`layout.left_inverse`."""
        from . import _algebra

        return _algebra.left_inverse(self)

    def logical_divide(self, tiler: Tiler) -> Layout:
        """See :func:`layout.logical_divide`."""
        from . import _tiling

        return _tiling.logical_divide(self, tiler)

    def logical_product(self, tiler: Tiler) -> Layout:
        """See :func:`layout.logical_product`."""
        from . import _tiling

        return _tiling.logical_product(self, tiler)

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


def _raw(shape: IntTuple, stride: IntTuple) -> Layout:
    """Build a Layout from values already known to be valid (internal fast path)."""
    obj = object.__new__(Layout)
    object.__setattr__(obj, "shape", shape)
    object.__setattr__(obj, "stride", stride)
    return obj


def _cosize(shapes: tuple[int, ...], strides: tuple[int, ...]) -> int:
    return sum([(s - 1) * d for s, d in zip(shapes, strides)]) + 1


def _depth(t: IntTuple) -> int:
    if type(t) is int:
        return 0
    return 1 + max((_depth(x) for x in t), default=0)  # type: ignore[union-attr]


def _has_none(c: object) -> bool:
    if c is None:
        return True
    return isinstance(c, tuple) and any(_has_none(x) for x in c)


def _flat_modes(L: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return flatten(L.shape), flatten(L.stride)


def _check_layout(x: object, what: str = "layout") -> Layout:
    if not isinstance(x, Layout):
        raise LayoutTypeError(f"{what} must be a Layout, got {x!r} of type {type(x).__name__}")
    return x


def make_layout(*layouts: Layout) -> Layout:
    """Concatenate layouts: each argument becomes one top-level mode.

    With no argument, the rank-0 layout ``():()`` (size 1).

    >>> print(make_layout(Layout(2, 4), Layout((3, 2))))
    (2,(3,2)):(4,(2,1))
    """
    for L in layouts:
        _check_layout(L, "every argument of make_layout")
    return _raw(tuple([L.shape for L in layouts]), tuple([L.stride for L in layouts]))


def _coalesce_flat(shapes: tuple[int, ...], strides: tuple[int, ...]) -> Layout:
    rs: list[int] = []
    rd: list[int] = []
    # Walk from the innermost (last) mode outwards, merging s1:d1 into an inner s0:d0
    # when d1 == s0 * d0, and dropping size-1 modes.
    for s, d in zip(reversed(shapes), reversed(strides)):
        if s == 1:
            continue
        if rs and rs[-1] * rd[-1] == d:
            rs[-1] *= s
        else:
            rs.append(s)
            rd.append(d)
    if not rs:
        return _raw(1, 0)
    if len(rs) == 1:
        return _raw(rs[0], rd[0])
    rs.reverse()
    rd.reverse()
    return _raw(tuple(rs), tuple(rd))


@functools.lru_cache(maxsize=8192)
def _coalesce(L: Layout) -> Layout:
    return _coalesce_flat(*_flat_modes(L))


def _by_mode(L: Layout, profile: tuple[object, ...], what: str) -> int:
    """Check a by-mode tuple against L; return the index of L's first mode it covers."""
    if len(profile) > L.rank:
        raise InvalidLayoutError(
            f"the by-mode {what} {profile!r} has {len(profile)} modes but {L} has only "
            f"{L.rank}; a by-mode tuple lines up with the trailing modes and may not be longer"
        )
    return L.rank - len(profile)


def coalesce(layout: Layout, profile: object = None) -> Layout:
    """The flattest layout equal to ``layout`` as a function on ``[0, size)``.

    Drops size-1 modes and merges ``s0:d0`` with an inner ``s1:d1`` when
    ``d0 == s1 * d1``.  With a by-mode ``profile`` tuple, only the modes it
    covers are coalesced (each separately; a tuple entry recurses); the profile
    lines up with the layout's trailing modes.

    >>> print(coalesce(Layout((2, (1, 6)), (1, (7, 2)))))
    (2,6):(1,2)
    >>> print(coalesce(Layout((2, 3, 4))))
    24:1
    >>> print(coalesce(Layout(((2, 3), (2, 2))), profile=(1,)))
    ((2,3),4):((12,4),1)
    """
    _check_layout(layout)
    if isinstance(profile, tuple):
        off = _by_mode(layout, profile, "profile")
        modes = list(layout)
        return make_layout(*modes[:off], *(
            coalesce(m, p) for m, p in zip(modes[off:], profile)))
    return _coalesce(layout)


def filter(layout: Layout) -> Layout:
    """``coalesce`` after dropping stride-0 modes: same image set, no broadcast modes.

    Returns ``1:0`` when nothing is left.

    >>> print(filter(Layout((2, 3, 4), (0, 4, 1))))
    12:1
    """
    _check_layout(layout)
    shapes, strides = _flat_modes(layout)
    keep = [(s, d) for s, d in zip(shapes, strides) if s != 1 and d != 0]
    return _coalesce_flat(tuple(s for s, _ in keep), tuple(d for _, d in keep))


def _sorted_flat(shapes: tuple[int, ...], strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """The (stride, size) pairs with size > 1 and stride > 0, by increasing stride."""
    return sorted((d, s) for s, d in zip(shapes, strides) if s > 1 and d > 0)


def _sorted_modes(layout: Layout) -> list[tuple[int, int]]:
    """:func:`_sorted_flat` of the flat modes of ``layout``."""
    return _sorted_flat(*_flat_modes(layout))


def _tractability_violation(layout: Layout) -> str | None:
    """Why ``layout`` is not tractable, or ``None`` if it is."""
    return _violation_in(_sorted_modes(layout))


def _violation_in(modes: list[tuple[int, int]]) -> str | None:
    """:func:`_tractability_violation` on the output of :func:`_sorted_modes`."""
    for (d0, s0), (d1, s1) in zip(modes, modes[1:]):
        if d1 % (s0 * d0):
            return (
                f"mode {s1}:{d1} does not start where mode {s0}:{d0} ends "
                f"({d1} is not a multiple of {s0}*{d0} = {s0 * d0})"
            )
    return None


def is_tractable(layout: Layout) -> bool:
    """Whether ``layout`` is admissible for :func:`complement`.

    Sort the flat modes of size > 1 and stride > 0 by stride; each stride must
    be a multiple of the previous mode's ``size * stride``.  Stride-0 modes are
    ignored, so a tractable layout is injective only if it has none.

    >>> is_tractable(Layout((2, 2), (1, 2))), is_tractable(Layout((2, 2), (3, 1)))
    (True, False)
    """
    _check_layout(layout)
    return _tractability_violation(layout) is None


def _broadcast_flat(shapes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether some mode of size > 1 has stride 0 (so the layout repeats offsets)."""
    return any(s > 1 and d == 0 for s, d in zip(shapes, strides))


def _has_broadcast(layout: Layout) -> bool:
    return _broadcast_flat(*_flat_modes(layout))


def is_injective(layout: Layout) -> bool:
    """Whether distinct indices in ``[0, size)`` map to distinct offsets.

    Decided without enumeration for tractable layouts; a non-tractable layout
    is decided exactly with a bitset of its codomain, which is allowed up to
    :data:`INJECTIVITY_ENUMERATION_LIMIT` (beyond it :class:`UndecidableError`).

    >>> is_injective(Layout((2, 2), (3, 1))), is_injective(Layout((2, 3), (2, 1)))
    (True, False)
    """
    _check_layout(layout)
    if _has_broadcast(layout):
        return False
    if _tractability_violation(layout) is None:
        return True
    cosize = layout.cosize
    if cosize > INJECTIVITY_ENUMERATION_LIMIT:
        raise UndecidableError(
            f"cannot decide whether the non-tractable layout {layout} is injective: its "
            f"cosize {cosize} exceeds the enumeration limit {INJECTIVITY_ENUMERATION_LIMIT}"
        )
    reached = 1  # bit k set <=> offset k is reached
    count = 1
    for d, s in _sorted_modes(layout):
        shifted = reached
        for c in range(1, s):
            shifted |= reached << (c * d)
        reached = shifted
        count *= s
        if reached.bit_count() != count:
            return False
    return True


def is_compact(layout: Layout) -> bool:
    """Whether ``layout`` is a bijection onto ``[0, size)``.

    >>> is_compact(Layout((2, 3), (1, 2))), is_compact(Layout((2, 3), (1, 3)))
    (True, False)
    """
    _check_layout(layout)
    if _has_broadcast(layout):
        return False
    expected = 1
    for d, s in _sorted_modes(layout):
        if d != expected:
            return False
        expected = s * d
    return True


def same_function(a: Layout, b: Layout) -> bool:
    """Whether ``a`` and ``b`` have the same size and agree on every index in ``[0, size)``.

    Two layouts are the same function exactly when their sizes and coalesced
    forms are equal.

    >>> same_function(Layout((2, 2), (2, 1)), Layout(4, 1)), Layout((2, 2)) == Layout(4)
    (True, False)
    """
    _check_layout(a)
    _check_layout(b)
    return a.size == b.size and _coalesce(a) == _coalesce(b)

