"""Composition, complement and inverses, each with its admissibility check."""

from __future__ import annotations

import functools
from typing import Union

from ._errors import ComplementError, CompositionError, InverseError
from ._inttuple import IntTuple, _as_int
from ._layout import (
    Layout,
    _broadcast_flat,
    _by_mode,
    _check_layout,
    _coalesce,
    _coalesce_flat,
    _cosize,
    _flat_modes,
    _raw,
    _sorted_flat,
    _sorted_modes,
    _violation_in,
    make_layout,
)

Tiler = Union[Layout, int, None, tuple["Tiler", ...]]
"""A right operand: a Layout, an int ``n`` (meaning ``n:1``), ``None`` (leave the
mode alone) or a by-mode tuple of tilers lined up with the trailing modes."""

__all__ = ["composition", "complement", "right_inverse", "left_inverse", "Tiler"]

_TILER_KINDS = "a Layout, an int, None or a by-mode tuple"


def _compose_mode(
    a_shapes: tuple[int, ...], a_strides: tuple[int, ...], s: int, d: int,
    A: Layout, B: Layout,
) -> tuple[int, int] | tuple[tuple[int, ...], tuple[int, ...]]:
    """``coalesce(A) ∘ s:d`` as (shape, stride); raises when no layout equals it."""
    if d == 0:
        return s, 0
    rest_s, rest_d = s, d
    out_s: list[int] = []
    out_d: list[int] = []
    # From the innermost mode of A outwards; the outermost mode is unbounded.
    for k in range(len(a_shapes) - 1, 0, -1):
        a = a_shapes[k]
        if rest_d % a == 0:
            rest_d //= a  # B steps over this whole mode
            continue
        if a % rest_d:
            if rest_s == 1:  # a single point: any stride is right
                rest_d = -(-rest_d // a)
                continue
            raise CompositionError(
                f"composition {A} ∘ {B} is inadmissible: the stride {rest_d} left of B's mode "
                f"{s}:{d} neither divides nor is a multiple of A's mode size {a} "
                "(stride divisibility)"
            )
        avail = a // rest_d
        if rest_s <= avail:
            new = rest_s
        elif rest_s % avail:
            raise CompositionError(
                f"composition {A} ∘ {B} is inadmissible: B's mode {s}:{d} takes {avail} "
                f"elements from A's mode of size {a} but {rest_s} is not a multiple of {avail} "
                "(shape divisibility)"
            )
        else:
            new = avail
        if new != 1:
            out_s.append(new)
            out_d.append(rest_d * a_strides[k])
        rest_s //= new
        rest_d = 1
    if rest_s != 1 or not out_s:
        out_s.append(rest_s)
        out_d.append(rest_d * a_strides[0])
    if len(out_s) == 1:
        return out_s[0], out_d[0]
    out_s.reverse()
    out_d.reverse()
    return tuple(out_s), tuple(out_d)


def _compose_tree(
    a_shapes: tuple[int, ...], a_strides: tuple[int, ...],
    shape: IntTuple, stride: IntTuple, A: Layout, B: Layout,
) -> tuple[IntTuple, IntTuple]:
    if type(shape) is int:
        return _compose_mode(a_shapes, a_strides, shape, stride, A, B)  # type: ignore[arg-type]
    parts = [_compose_tree(a_shapes, a_strides, s, d, A, B)
             for s, d in zip(shape, stride)]  # type: ignore[arg-type]
    return tuple(p[0] for p in parts), tuple(p[1] for p in parts)


@functools.lru_cache(maxsize=8192)
def _composition(A: Layout, B: Layout) -> Layout:
    b_shapes, b_strides = _flat_modes(B)
    cosize = _cosize(b_shapes, b_strides)
    if cosize > A.size:
        raise CompositionError(
            f"composition {A} ∘ {B} is inadmissible: B reaches offset {cosize - 1} but A "
            f"is only defined on [0, {A.size}) (in bounds: cosize(B) <= size(A))"
        )
    flat = _coalesce(A)
    a_shapes, a_strides = _flat_modes(flat)
    if len(a_shapes) > 1 and type(B.shape) is not int:
        why = _violation_in(_sorted_flat(b_shapes, b_strides))
        if why is not None:
            raise CompositionError(
                f"composition {A} ∘ {B} is inadmissible: B's modes may carry across A's "
                f"modes because B is not tractable: {why}"
            )
    shape, stride = _compose_tree(a_shapes, a_strides, B.shape, B.stride, A, B)
    return _raw(shape, stride)


def composition(A: Layout, B: Tiler) -> Layout:
    """``A ∘ B``: the layout ``i -> A(B(i))`` on ``[0, size(B))``, shaped like B.

    ``B`` may be a Layout, an int ``n`` (meaning ``n:1``), or a by-mode tuple
    (lined up with A's trailing modes; ``None`` leaves a mode alone) that
    composes mode by mode.  Raises :class:`~layout.CompositionError` rather than
    return a wrong layout: B must stay inside A's domain
    (``cosize(B) <= size(A)``), each mode of B must divide A's modes, and a
    multi-mode B must be tractable unless A coalesces to a single mode.

    >>> print(composition(Layout((6, 2), (2, 1)), Layout(3, 2)))
    3:2
    >>> print(composition(Layout((3, 6), (7, 21)), Layout(4, 3)))
    (2,2):(7,63)
    >>> composition(Layout((6, 4), (5, 1)), Layout(6))
    Traceback (most recent call last):
    ...
    layout._errors.CompositionError: composition (6,4):(5,1) ∘ 6:1 ... (shape divisibility)
    >>> print(composition(Layout((4, 6)), Layout((2, 3), (1, 6))))
    (2,3):(1,6)
    >>> print(composition(Layout((4, 6), (6, 1)), (2, 3)))
    (2,3):(6,1)
    """
    _check_layout(A, "the left operand of composition")
    if B is None:
        return A
    if isinstance(B, Layout):
        return _composition(A, B)
    if isinstance(B, tuple):
        off = _by_mode(A, B, "tiler")
        modes = list(A)
        return make_layout(*modes[:off], *(composition(m, b) for m, b in zip(modes[off:], B)))
    n = _as_int(B, "the right operand of composition", _TILER_KINDS)
    if n < 1:
        raise CompositionError(f"composition with the int {n} is inadmissible: sizes are >= 1")
    return _composition(A, _raw(n, 1))


@functools.lru_cache(maxsize=8192)
def _complement(A: Layout, cotarget: int) -> Layout:
    modes = _sorted_modes(A)
    why = _violation_in(modes)
    if why is not None:
        raise ComplementError(
            f"complement({A}, {cotarget}) is inadmissible: A must be injective and "
            f"tractable, but {why}"
        )
    shapes: list[int] = []
    strides: list[int] = []
    cur = 1
    for d, s in modes:
        shapes.append(d // cur)
        strides.append(cur)
        cur = s * d
    shapes.append(-(-cotarget // cur))
    strides.append(cur)
    shapes.reverse()
    strides.reverse()
    return _coalesce_flat(tuple(shapes), tuple(strides))


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
    _check_layout(A, "the layout to complement")
    m = _as_int(cotarget, "the cotarget of complement")
    if m < 1:
        raise ComplementError(f"complement({A}, {m}) is inadmissible: the cotarget must be >= 1")
    return _complement(A, m)


@functools.lru_cache(maxsize=8192)
def _right_inverse(L: Layout) -> Layout:
    return _right_inverse_flat(*_flat_modes(L))


def _right_inverse_flat(shapes: tuple[int, ...], strides: tuple[int, ...]) -> Layout:
    index_strides = [1] * len(shapes)
    for k in range(len(shapes) - 1, 0, -1):
        index_strides[k - 1] = index_strides[k] * shapes[k]
    shapes_out: list[int] = []
    strides_out: list[int] = []
    cur = 1
    for d, s, r in sorted(zip(strides, shapes, index_strides)):
        if s == 1 or d == 0:
            continue
        if d != cur:
            break
        shapes_out.append(s)
        strides_out.append(r)
        cur = s * d
    shapes_out.reverse()
    strides_out.reverse()
    return _coalesce_flat(tuple(shapes_out), tuple(strides_out))


def right_inverse(L: Layout) -> Layout:
    """A layout R with ``L(R(i)) == i`` for every ``i < size(R)``, as large as possible.

    For injective L, ``size(R)`` is the largest n with ``[0, n)`` inside L's
    image.  Stride-0 modes are skipped (as CuTe C++ does; pycute gives up at
    them and returns ``1:0``).

    >>> print(right_inverse(Layout((4, 2), (1, 4))))
    (2,4):(1,2)
    """
    _check_layout(L)
    return _right_inverse(L)


@functools.lru_cache(maxsize=8192)
def _left_inverse(L: Layout) -> Layout:
    shapes, strides = _flat_modes(L)
    if _broadcast_flat(shapes, strides):
        why: str | None = "it has a stride-0 mode of size > 1"
    else:
        why = _violation_in(_sorted_flat(shapes, strides))
    if why is not None:
        raise InverseError(
            f"left_inverse({L}) is inadmissible: L must be injective and tractable, but {why}"
        )
    c_shapes, c_strides = _flat_modes(_complement(L, 1))
    return _right_inverse_flat(c_shapes + shapes, c_strides + strides)


def left_inverse(L: Layout) -> Layout:
    """A layout R with ``R(L(i)) == i`` for every ``i < size(L)``.

    L must be injective and tractable, else :class:`~layout.InverseError`.

    >>> L = Layout((2, 3), (1, 4))
    >>> R = left_inverse(L)
    >>> [R(L(i)) for i in range(L.size)]
    [0, 1, 2, 3, 4, 5]
    """
    _check_layout(L)
    return _left_inverse(L)


