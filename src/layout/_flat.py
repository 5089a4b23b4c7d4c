"""The algebra on flat modes: ``(shapes, strides)`` tuples of ints, outermost mode first.

Every operation of the package reduces to these: the public functions in
:mod:`layout._layout` flatten their operands, call one helper here and wrap
the result.  Helpers raise a :class:`~layout.LayoutError` subclass whose
message says which condition failed (the caller adds the operands' names).
Nothing here builds a :class:`~layout.Layout`.
"""

from __future__ import annotations

import functools
import math

from ._errors import ComplementError, CompositionError, InverseError, UndecidableError
from ._inttuple import IntTuple, flatten, fmt, map_pair
from ._show import fmt_int

__all__ = [
    "Flat",
    "INJECTIVITY_ENUMERATION_LIMIT",
    "INJECTIVITY_LISTING_LIMIT",
    "coalesce",
    "complement",
    "compose",
    "cosize",
    "has_broadcast",
    "is_compact",
    "is_injective",
    "left_inverse",
    "right_inverse",
    "sorted_modes",
    "tractability_violation",
]

Flat = tuple[tuple[int, ...], tuple[int, ...]]
"""Flat modes: ``(sizes, strides)``, outermost first; ``((1,), (0,))`` is the trivial layout."""

INJECTIVITY_ENUMERATION_LIMIT = 1 << 26
"""The largest codomain (after reduction) :func:`is_injective` decides with a bitset."""

INJECTIVITY_LISTING_LIMIT = 1 << 20
"""The largest domain (after reduction) :func:`is_injective` decides by listing offsets."""

_TRIVIAL: Flat = ((1,), (0,))


def cosize(shapes: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """``max(image) + 1`` (strides are >= 0)."""
    return sum([(s - 1) * d for s, d in zip(shapes, strides)]) + 1


def has_broadcast(shapes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether some mode of size > 1 has stride 0 (so the layout repeats offsets)."""
    return any([s > 1 and d == 0 for s, d in zip(shapes, strides)])


def _coalesce(shapes: tuple[int, ...], strides: tuple[int, ...]) -> Flat:
    rs: list[int] = []
    rd: list[int] = []
    # From the innermost (last) mode outwards: drop size-1 modes, and merge an outer
    # mode s1:d1 into the inner s0:d0 when it starts where that one ends (d1 == s0*d0).
    for s, d in zip(reversed(shapes), reversed(strides)):
        if s == 1:
            continue
        if rs and rs[-1] * rd[-1] == d:
            rs[-1] *= s
        else:
            rs.append(s)
            rd.append(d)
    if not rs:
        return _TRIVIAL
    rs.reverse()
    rd.reverse()
    return tuple(rs), tuple(rd)


coalesce = functools.lru_cache(maxsize=8192)(_coalesce)
"""The canonical flat form: equal functions on ``[0, size)`` have equal coalesced forms."""


def _mode(s: int, d: int) -> str:
    """``s:d`` for a message, huge ints abbreviated."""
    return f"{fmt_int(s)}:{fmt_int(d)}"


def sorted_modes(shapes: tuple[int, ...], strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """The ``(stride, size)`` pairs of the modes that move (size > 1, stride > 0), by stride."""
    return sorted([(d, s) for s, d in zip(shapes, strides) if s > 1 and d > 0])


def tractability_violation(modes: list[tuple[int, int]]) -> str | None:
    """Why the :func:`sorted_modes` ``modes`` are not a chain, or None if they are.

    A chain (tractable layout): each stride is a multiple of the previous
    mode's ``size * stride``, so the modes nest like the digits of a number.
    """
    for (d0, s0), (d1, s1) in zip(modes, modes[1:]):
        if d1 % (s0 * d0):
            return (f"mode {_mode(s1, d1)} does not start where mode {_mode(s0, d0)} ends "
                    f"({fmt_int(d1)} is not a multiple of {fmt_int(s0)}*{fmt_int(d0)} = "
                    f"{fmt_int(s0 * d0)})")
    return None


# ---- composition ----------------------------------------------------------------------------

def _compose_mode(a_shapes: tuple[int, ...], a_strides: tuple[int, ...], s: int, d: int,
                  alone: bool) -> tuple[IntTuple, IntTuple]:
    """``A ∘ s:d`` for a coalesced flat A, with A's first (outer) mode unbounded.

    **Invariant.** Walking A's modes from the innermost outwards, ``rest_s``
    elements of B are still to place and ``rest_d`` is B's stride measured in
    units of the current mode of A.  Each mode either is stepped over whole
    (``rest_d`` is a multiple of its size: divide it out) or takes
    ``avail = size // rest_d`` of B's elements, which B must fill exactly
    (shape divisibility) unless all of them fit; the rest continue with stride 1
    in the next mode out.  The outer mode takes whatever is left, unbounded:
    that is CuTe's extension of A past its size.  When ``rest_d`` and the size
    do not divide each other (stride divisibility fails), the mode can still
    hold all the remaining elements if ``(rest_s - 1) * rest_d < size``; that
    is accepted only when this is B's only moving mode (``alone``): beside
    other modes of B, the sums could carry into the next mode of A.

    >>> _compose_mode((6, 4), (1, 6), 12, 2, True)   # (6,4):(1,6) ∘ 12:2
    ((6, 2), (1, 12))

    Here mode 4:6 takes ``avail = 4 // 2 = 2`` elements at stride ``2*6 = 12``,
    and the remaining 6 run over mode 6:1 with stride 1.
    """
    if d == 0:
        return s, 0
    rest_s, rest_d = s, d
    out: list[tuple[int, int]] = []  # the result's (size, stride) modes, innermost first
    for k in range(len(a_shapes) - 1, 0, -1):
        taken, next_s, next_d = _place(a_shapes[k], rest_s, rest_d, (s, d), alone)
        if taken != 1:
            out.append((taken, rest_d * a_strides[k]))
        rest_s, rest_d = next_s, next_d
    if rest_s != 1 or not out:
        out.append((rest_s, rest_d * a_strides[0]))  # the outer mode, unbounded
    if len(out) == 1:
        return out[0]
    out.reverse()
    return tuple([m[0] for m in out]), tuple([m[1] for m in out])


def _place(a: int, rest_s: int, rest_d: int, b: tuple[int, int], alone: bool
           ) -> tuple[int, int, int]:
    """One step of :func:`_compose_mode`'s walk: B's ``rest_s`` elements left, ``rest_d``
    units of A's mode of size ``a`` apart, meet that mode (``b`` is B's mode, for messages).

    Returns ``(taken, rest_s, rest_d)``: how many elements the mode takes (each
    ``rest_d`` of its units apart; 1 means none to record), and what is left for the
    next mode out.
    """
    if rest_d % a == 0:  # stepped over whole
        return 1, rest_s, rest_d // a
    if a % rest_d:
        if rest_s == 1:  # a single element sits at offset 0 whatever the stride
            return 1, 1, -(-rest_d // a)
        if alone and (rest_s - 1) * rest_d < a:  # every element inside this mode
            return rest_s, 1, rest_d
        raise CompositionError(
            f"the stride {fmt_int(rest_d)} left of B's mode {_mode(*b)} neither divides "
            f"nor is a multiple of A's mode size {fmt_int(a)} (stride divisibility)")
    avail = a // rest_d
    if rest_s > avail and rest_s % avail:
        raise CompositionError(
            f"B's mode {_mode(*b)} takes {fmt_int(avail)} elements from A's mode of size "
            f"{fmt_int(a)} but {fmt_int(rest_s)} is not a multiple of {fmt_int(avail)} "
            "(shape divisibility)")
    new = min(rest_s, avail)
    return new, rest_s // new, 1


@functools.lru_cache(maxsize=8192)
def compose(a_shape: IntTuple, a_stride: IntTuple, b_shape: IntTuple, b_stride: IntTuple
            ) -> tuple[IntTuple, IntTuple]:
    """``A ∘ B`` as ``(shape, stride)`` shaped like B, on CuTe's extended domain.

    A is taken as the function ``coalesce(A)`` with its outer mode unbounded, so
    B may reach past ``size(A)``.  A multi-mode B must be a chain (tractable)
    unless A coalesces to one mode, or its modes could carry across A's modes.
    """
    a_shapes, a_strides = coalesce(flatten(a_shape), flatten(a_stride))
    moving = sorted_modes(flatten(b_shape), flatten(b_stride))
    if len(a_shapes) > 1 and type(b_shape) is not int:
        why = tractability_violation(moving)
        if why is not None:
            raise CompositionError(f"B's modes may carry across A's modes because B is not "
                                   f"tractable: {why}")
    alone = len(moving) <= 1
    return map_pair(b_shape, b_stride,
                    lambda s, d: _compose_mode(a_shapes, a_strides, s, d, alone))


# ---- complement and inverses ----------------------------------------------------------------

@functools.lru_cache(maxsize=8192)
def complement(shapes: tuple[int, ...], strides: tuple[int, ...], cotarget: int) -> Flat:
    """The offsets the layout misses, up to ``cotarget``, as a coalesced flat layout.

    Each gap between consecutive modes (sorted by stride) becomes a mode, and
    a last, outer mode repeats the whole up to ``cotarget``.
    """
    modes = sorted_modes(shapes, strides)
    why = tractability_violation(modes)
    if why is not None:
        raise ComplementError(f"A must be injective and tractable, but {why}")
    out_s: list[int] = []
    out_d: list[int] = []
    cur = 1
    for d, s in modes:
        out_s.append(d // cur)
        out_d.append(cur)
        cur = s * d
    out_s.append(-(-cotarget // cur))
    out_d.append(cur)
    out_s.reverse()
    out_d.reverse()
    return coalesce(tuple(out_s), tuple(out_d))


def _right_inverse(shapes: tuple[int, ...], strides: tuple[int, ...]) -> Flat:
    # The index stride of every mode (row-major), then the modes in increasing offset
    # stride as long as each starts exactly where the previous one ends.
    index_strides = _index_strides(shapes)
    out_s: list[int] = []
    out_d: list[int] = []
    cur = 1
    for d, s, r in sorted(zip(strides, shapes, index_strides)):
        if s == 1 or d == 0:
            continue
        if d != cur:
            break
        out_s.append(s)
        out_d.append(r)
        cur = s * d
    out_s.reverse()
    out_d.reverse()
    return coalesce(tuple(out_s), tuple(out_d))


right_inverse = functools.lru_cache(maxsize=8192)(_right_inverse)
"""R with ``L(R(i)) == i`` on the largest ``[0, n)`` in L's image (stride-0 modes skipped)."""


@functools.lru_cache(maxsize=8192)
def left_inverse(shapes: tuple[int, ...], strides: tuple[int, ...]) -> Flat:
    """R with ``R(L(i)) == i``.

    For a tractable L: the right inverse of ``(complement(L), L)``, as CuTe
    computes it.  Otherwise, if L's moving modes sorted by stride form a
    *divisibility chain* (each stride divides the next, and each mode ends
    at or before the next one starts: ``s_k * d_k <= d_(k+1)``), every offset
    of L reads as mixed-radix digits with radices ``d_(k+1) / d_k``, and R
    reads them back: ``(s_n, ..., d_2/d_1, d_1) : (r_n, ..., r_1, 0)`` with
    ``r_k`` the index stride of mode k.  Else no such R is known here.

    >>> left_inverse((2, 4), (5, 1))   # offsets 0..3 and 5..8: (2,5):(4,1)
    ((2, 5), (4, 1))
    """
    if has_broadcast(shapes, strides):
        raise InverseError("L must be injective, but it has a stride-0 mode of size > 1")
    modes = sorted_modes(shapes, strides)
    if tractability_violation(modes) is None:
        c_shapes, c_strides = complement(shapes, strides, 1)
        return _right_inverse(c_shapes + shapes, c_strides + strides)
    index_strides = _index_strides(shapes)
    ranked = sorted([(d, s, r) for s, d, r in zip(shapes, strides, index_strides)
                     if s > 1 and d > 0])
    out_s: list[int] = [ranked[0][0]]  # the offsets below the smallest stride: skipped
    out_d: list[int] = [0]
    for (d0, s0, r0), (d1, _, _) in zip(ranked, ranked[1:]):
        if d1 % d0 or s0 * d0 > d1:
            raise InverseError(
                f"L must be injective and tractable or a divisibility chain, but mode "
                f"{fmt_int(s0)}:{fmt_int(d0)} and the next stride {fmt_int(d1)} are neither "
                f"({fmt_int(d1)} is not a multiple of {fmt_int(s0)}*{fmt_int(d0)}, and "
                + (f"{fmt_int(d0)} does not divide it)" if d1 % d0 else "the modes overlap)"))
        out_s.append(d1 // d0)
        out_d.append(r0)
    _, s_n, r_n = ranked[-1]
    out_s.append(s_n)
    out_d.append(r_n)
    out_s.reverse()
    out_d.reverse()
    return coalesce(tuple(out_s), tuple(out_d))


def _index_strides(shapes: tuple[int, ...]) -> list[int]:
    """Row-major index stride of every flat mode: the product of the sizes after it."""
    out = [1] * len(shapes)
    for k in range(len(shapes) - 1, 0, -1):
        out[k - 1] = out[k] * shapes[k]
    return out


# ---- predicates -----------------------------------------------------------------------------

def is_compact(shapes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether the layout is a bijection onto ``[0, size)``."""
    if has_broadcast(shapes, strides):
        return False
    expected = 1
    for d, s in sorted_modes(shapes, strides):
        if d != expected:
            return False
        expected = s * d
    return True


def is_injective(shapes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether distinct indices map to distinct offsets, without listing the domain.

    The moving modes are reduced first: a common factor of the strides is
    divided out; the smallest mode is split off while every other stride is a
    multiple of its span (``size * stride``), and the largest while it starts
    past everything the others reach; either way the layout is injective
    exactly when the rest is.  Two modes remaining are decided in closed form
    (``(s1,s2):(d1,d2)`` collides iff ``d2/g < s1`` and ``d1/g < s2``,
    ``g = gcd(d1, d2)``), and so is any colliding pair among more.  Three or
    more entangled modes are decided by listing their offsets (up to
    :data:`INJECTIVITY_LISTING_LIMIT` of them) or with a bitset of the
    reachable offsets built by doubling (``O(log s)`` shifts per mode, up to
    :data:`INJECTIVITY_ENUMERATION_LIMIT` offsets), whichever is cheaper;
    beyond both, :class:`~layout.UndecidableError`.
    """
    if has_broadcast(shapes, strides):
        return False
    modes = _reduce(sorted_modes(shapes, strides))
    if len(modes) <= 1:
        return True
    if len(modes) == 2:  # two modes collide exactly when the pairwise test says so
        return not _collide(*modes)
    if any([_collide(a, b) for i, a in enumerate(modes) for b in modes[i + 1:]]):
        return False
    return _entangled_injective(modes, shapes, strides)


def _reduce(modes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The :func:`sorted_modes` ``modes`` with the modes split off that cannot collide.

    A common factor of the strides is divided out; the smallest mode goes while
    every other stride is a multiple of its span, the largest while it starts past
    everything the others reach.  The rest is injective exactly when ``modes`` are.
    """
    while len(modes) > 2:
        g = math.gcd(*[d for d, _ in modes])
        if g > 1:
            modes = [(d // g, s) for d, s in modes]
        d0, s0 = modes[0]
        if all([d % (s0 * d0) == 0 for d, _ in modes[1:]]):
            modes = modes[1:]
            continue
        if modes[-1][0] > sum([(s - 1) * d for d, s in modes[:-1]]):
            modes = modes[:-1]
            continue
        break
    return modes


def _entangled_injective(modes: list[tuple[int, int]], shapes: tuple[int, ...],
                         strides: tuple[int, ...]) -> bool:
    """Whether three or more reduced, pairwise non-colliding ``(stride, size)`` modes are
    injective: by listing their offsets or with a bitset, whichever is cheaper
    (``shapes:strides`` is the whole layout, for the message when neither fits)."""
    size = math.prod([s for _, s in modes])
    reach = cosize(tuple([s for _, s in modes]), tuple([d for d, _ in modes]))
    if size <= INJECTIVITY_LISTING_LIMIT and size * 64 <= reach:
        offsets = [0]
        for d, s in modes:
            offsets = [o + c * d for o in offsets for c in range(s)]
        return len(set(offsets)) == size
    if reach > INJECTIVITY_ENUMERATION_LIMIT:
        entangled = ", ".join(_mode(s, d) for d, s in modes)
        raise UndecidableError(
            f"cannot decide whether {fmt(shapes)}:{fmt(strides)} is injective: after reduction "
            f"its entangled modes {entangled} have {fmt_int(size)} elements and "
            f"reach {fmt_int(reach)} offsets, beyond both the listing limit "
            f"{INJECTIVITY_LISTING_LIMIT} and the bitset limit {INJECTIVITY_ENUMERATION_LIMIT}")
    reached = 1  # bit k set <=> offset k is reached
    for d, s in modes:
        reached, disjoint = _spread(reached, s, d)
        if not disjoint:
            return False
    return True


def _collide(a: tuple[int, int], b: tuple[int, int]) -> bool:
    (d1, s1), (d2, s2) = a, b
    g = math.gcd(d1, d2)
    return d2 // g < s1 and d1 // g < s2


def _spread(reached: int, s: int, d: int) -> tuple[int, bool]:
    """The union of ``reached << c*d`` for ``c < s``, and whether those copies were disjoint.

    Built by doubling, ``O(log s)`` shifts instead of ``s``: ``n`` copies and
    the same shifted by ``n*d`` make ``2n``; a set bit of ``s`` adds one more.
    Every copy is disjoint from every other exactly when each union is.
    """
    result, n = 0, 0  # result holds n copies: reached shifted by 0, d, ..., (n-1)*d
    for bit in reversed(range(s.bit_length())):
        doubled = result << (n * d)  # copies n .. 2n-1
        if result & doubled:
            return 0, False
        result, n = result | doubled, 2 * n
        if (s >> bit) & 1:
            one = reached << (n * d)  # copy n
            if result & one:
                return 0, False
            result, n = result | one, n + 1
    return result, True
