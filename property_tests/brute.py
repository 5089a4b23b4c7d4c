"""Brute-force definitions that the laws are stated in.

Everything here is written from the definitions, by enumeration, without calling
the code under test (``layout``'s operations), so a law checked against these
helpers cannot pass because the implementation agrees with itself.  A layout is
read only through its ``shape`` and ``stride`` attributes.

Row-major throughout, like the package: the last flat mode varies fastest, so
the image of a layout is ``itertools.product`` over its flat modes.  Where the
research notes (``research/cute-algebra-laws.md``) state a predicate in CuTe's
colexicographic order (``comp_ok``, ``aligned``), it is applied to the reversed
flat modes, which is exactly the mirror ``rev``.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

IntTuple = Any  # an int or a nested tuple of ints (kept loose: test helpers)

#: How many pairs each raise-or-correct law has checked in this process, and how
#: many of them raised.  Reported at the end of the run by ``conftest.py``.
CHECKED: collections.Counter[str] = collections.Counter()


def flat(t: IntTuple) -> tuple[int, ...]:
    """The leaves of a nested int tuple, in order."""
    if isinstance(t, int):
        return (t,)
    return tuple(x for sub in t for x in flat(sub))


def prod(t: IntTuple) -> int:
    out = 1
    for x in flat(t):
        out *= x
    return out


def modes(L: Any) -> list[tuple[int, int]]:
    """The flat ``(size, stride)`` pairs of L, outermost first."""
    return list(zip(flat(L.shape), flat(L.stride)))


def nontrivial(L: Any) -> list[tuple[int, int]]:
    """The flat modes with size > 1 and stride > 0 (the ones that move)."""
    return [(s, d) for s, d in modes(L) if s > 1 and d > 0]


def size(L: Any) -> int:
    return prod(L.shape)


def image(L: Any) -> list[int]:
    """``[L(i) for i in range(size(L))]``, row-major, by enumeration."""
    ms = modes(L)
    return [sum(c * d for c, (_, d) in zip(crd, ms))
            for crd in itertools.product(*(range(s) for s, _ in ms))]


def image_of(pairs: list[tuple[int, int]]) -> list[int]:
    """The image of the flat layout with these ``(size, stride)`` modes."""
    return [sum(c * d for c, (_, d) in zip(crd, pairs))
            for crd in itertools.product(*(range(s) for s, _ in pairs))]


def injective(L: Any) -> bool:
    img = image(L)
    return len(set(img)) == len(img)


def compact(L: Any) -> bool:
    return sorted(image(L)) == list(range(size(L)))


def tractable_modes(pairs: list[tuple[int, int]]) -> bool:
    """Sorted by stride, each mode starts where the previous one ends (a multiple of it)."""
    ms = sorted((d, s) for s, d in pairs if s > 1 and d > 0)
    return all(d1 % (s0 * d0) == 0 for (d0, s0), (d1, _) in zip(ms, ms[1:]))


def tractable(L: Any) -> bool:
    return tractable_modes(modes(L))


def span(L: Any) -> int:
    return max((s * d for s, d in nontrivial(L)), default=1)


def round_up(m: int, k: int) -> int:
    return -(-m // k) * k


def cosize(L: Any) -> int:
    return max(image(L)) + 1


def suffix(shape: IntTuple, init: int = 1) -> IntTuple:
    """Row-major compact strides of ``shape`` (the last leaf moves fastest), starting at ``init``:
    ``suffix((2, (3, 4))) == (12, (4, 1))``."""
    if isinstance(shape, int):
        return init
    out = []
    for s in reversed(shape):
        out.append(suffix(s, init))
        init *= prod(s)
    return tuple(reversed(out))


def dot(crd: IntTuple, stride: IntTuple) -> int:
    """The inner product of congruent nested int tuples."""
    if isinstance(crd, int):
        return crd * stride
    return sum(dot(c, d) for c, d in zip(crd, stride))


def coords(shape: tuple[int, ...] | list[int]) -> Any:
    """Every coordinate of a flat shape, row-major (the last coordinate moves fastest)."""
    return itertools.product(*(range(s) for s in shape))


def idx2crd(i: int, shape: IntTuple) -> IntTuple:
    """Row-major split of ``i`` into a coordinate congruent to ``shape``."""
    if isinstance(shape, int):
        return i
    out = []
    for s in reversed(shape):
        n = prod(s)
        out.append(idx2crd(i % n, s))
        i //= n
    return tuple(reversed(out))


def crd2off(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    """The offset of a coordinate (an int coordinate for a tuple mode is split row-major)."""
    if isinstance(crd, int) and not isinstance(shape, int):
        crd = idx2crd(crd, shape)
    if isinstance(shape, int):
        return int(crd) * int(stride)
    return sum(crd2off(c, s, d) for c, s, d in zip(crd, shape, stride))


def colex_coalesce(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """CuTe's coalesce of colex-ordered flat modes (innermost first): the canonical form."""
    out: list[tuple[int, int]] = []
    for s, d in pairs:
        if s == 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1] = (out[-1][0] * s, out[-1][1])
        else:
            out.append((s, d))
    return out or [(1, 0)]


def coalesced(L: Any) -> list[tuple[int, int]]:
    """The flat ``(size, stride)`` modes of ``coalesce(L)``, outermost first (row-major)."""
    return list(reversed(colex_coalesce(list(reversed(modes(L))))))


def extended(L: Any, x: int) -> int:
    """``L`` on CuTe's extended domain: ``coalesce(L)`` with its outer (first) mode unbounded.

    ``x`` is split row-major over every mode but the first, which takes the rest.
    """
    ms = coalesced(L)
    off = 0
    for s, d in reversed(ms[1:]):
        x, c = divmod(x, s)
        off += c * d
    return off + x * ms[0][1]


def _aligned(x: int, a: list[int], weak: bool) -> bool:
    """The notes' ``aligned(x, A)`` for A's coalesced colex shape ``a``."""
    p = 1
    for j, aj in enumerate(a):
        if x % p == 0:
            q = x // p
            if j == len(a) - 1 or (q <= aj if weak else aj % q == 0):
                return True
        p *= aj
    return False


def comp_ok(A: Any, B: Any) -> bool:
    """The research notes' sufficient precondition for ``composition(A, B)``, extended.

    Stated there in CuTe's colex order; here applied to ``rev`` of both operands
    (the reversed flat modes), which is the row-major reading of the same rule.
    The notes' in-bounds condition ``cosize(B) <= size(A)`` is dropped: B may
    reach past A's size, where A is read on its extended domain (:func:`extended`),
    whose outer mode is unbounded (the alignment test already treats it so):

    * B tractable and ``filter(B)`` injective;
    * no size-1 mode of B has a nonzero stride;
    * every moving mode ``s:d`` of B has ``d`` aligned and ``s*d`` weakly aligned
      to the coalesced shape of A.
    """
    if not tractable(B):
        return False
    moving = nontrivial(B)
    if len(set(image_of(moving))) != prod(tuple(s for s, _ in moving)):
        return False
    if any(s == 1 and d != 0 for s, d in modes(B)):
        return False
    a = [s for s, _ in colex_coalesce(list(reversed(modes(A))))]
    return all(_aligned(d, a, weak=False) and _aligned(s * d, a, weak=True) for s, d in moving)


def compatible(b: IntTuple, r: IntTuple) -> bool:
    """CuTe's ``compatible(B, R)``: every coordinate of shape b is one of shape r."""
    if isinstance(b, int):
        return prod(r) == b
    return not isinstance(r, int) and len(b) == len(r) and all(map(compatible, b, r))


def assert_complement_law(A: Any, M: int, R: Any) -> None:
    """The complement law (research notes §2.6) for ``R = complement(A, M)``, by enumeration.

    R is ordered (strides descending, image ascending); ``image(R)[1:]`` misses
    ``image(A)``; ``(R, filter(A))`` is injective and its image is exactly
    ``[0, round_up(M, span(A)))`` (so of size M when ``span(A) | M``).
    """
    moving_r = nontrivial(R)
    strides = [d for _, d in moving_r]
    assert strides == sorted(strides, reverse=True) and len(set(strides)) == len(strides)
    img_r = image(R)
    assert img_r == sorted(img_r)
    assert not set(img_r[1:]) & set(image(A))
    together = image_of(moving_r + nontrivial(A))  # (R, filter(A))
    assert len(set(together)) == len(together), f"(R, filter(A)) is not injective for {R}"
    k = span(A)
    assert sorted(together) == list(range(round_up(M, k)))
    if M % k == 0:
        assert len(together) == M


# ---- rank tensors (NumPy), for the mesh laws ------------------------------------------------

def lines(tensor: Any, axes: tuple[int, ...], position: dict[int, int]) -> list[tuple[int, ...]]:
    """Every line of the rank tensor read along ``axes`` (row-major, the first listed axis
    outer), the other axes fixed, ordered by ``position`` (rank -> offset) of its first rank.

    The groups of a view dim made of the world dims ``axes`` (one, or several flattened)."""
    import numpy as np

    moved = np.moveaxis(tensor, axes, range(-len(axes), 0))
    size = prod(tuple(tensor.shape[a] for a in axes))
    out = [tuple(int(r) for r in row) for row in moved.reshape(-1, size)]
    return sorted(out, key=lambda g: position[g[0]])


def without_slices(tensor: Any, axis: int, failed: Any) -> Any:
    """The rank tensor with every slice along ``axis`` that holds a failed rank removed."""
    import numpy as np

    dead = [i for i in range(tensor.shape[axis])
            if set(np.take(tensor, i, axis=axis).flat) & set(failed)]
    return np.delete(tensor, dead, axis=axis)


def replaced(tensor: Any, failed: Any, spares: Any) -> Any:
    """The rank tensor with the i-th lowest failed rank replaced by the i-th spare."""
    out = tensor.copy()
    for gone, spare in zip(sorted(failed), spares):
        out[tensor == gone] = spare
    return out
