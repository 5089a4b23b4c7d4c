"""Brute-force law checkers shared by the ports of the upstream test suites.

The ``test_upstream_*`` files carry over the *cases* of NVIDIA CUTLASS's pycute and
CuTe C++ unit tests and of PyTorch's ``_pycute`` tests.  Every check here is
written out by enumeration, from a layout's ``shape`` and ``stride`` alone: nothing
in this module calls an operation of the package under test (not even evaluation),
so a law that holds here holds of the numbers, not of the code.

Conventions (row-major, the package's own): the *last* flat mode varies fastest, the
first mode of a divide is the rest and the first mode of a product is the repetition.
A CuTe (column-major) layout is brought over with :func:`cute`, its mirror image.

The one definition that is a decision rather than a fact is :func:`a_ext`, the
extension of ``A`` past ``size(A)`` that ``composition`` uses: take the canonical
(coalesced) flat modes of A and let the outermost (first) one run unbounded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Union

import pycute
from cute_oracle import from_cute

from layout import Layout

Nested = Union[int, tuple["Nested", ...]]
Mode = tuple[int, int]


# ---- building and naming cases ---------------------------------------------------------------

def cute(shape: Nested, stride: Nested | None = None) -> Layout:
    """Our mirror image of CuTe's ``shape:stride`` (default stride: CuTe's column-major one)."""
    return from_cute(pycute.Layout(shape, stride))


def fmt(t: Nested) -> str:
    """``(4,3)`` style text for a nested int tuple; a 1-tuple keeps its comma: ``(4,)``."""
    if isinstance(t, int):
        return str(t)
    if len(t) == 1:
        return f"({fmt(t[0])},)"
    return "(" + ",".join(fmt(x) for x in t) + ")"


def show(shape: Nested, stride: Nested | None = None) -> str:
    """A test id for a layout written the way its upstream suite writes it."""
    return fmt(shape) if stride is None else f"{fmt(shape)}:{fmt(stride)}"


def sub(L: Layout, k: int) -> Layout:
    """Top-level mode ``k`` of ``L``, built from its shape and stride."""
    assert isinstance(L.shape, tuple) and isinstance(L.stride, tuple), f"{L} has one mode"
    return Layout(L.shape[k], L.stride[k])


# ---- a layout as numbers ----------------------------------------------------------------------

def leaves(t: Nested) -> list[int]:
    """The ints of a nested tuple, in order."""
    if isinstance(t, int):
        return [t]
    return [x for part in t for x in leaves(part)]


def modes(L: Layout) -> list[Mode]:
    """The flat ``(size, stride)`` modes of ``L``, outermost first."""
    return list(_flat_modes(L.shape, L.stride))


@functools.lru_cache(maxsize=4096)
def _flat_modes(shape: Nested, stride: Nested) -> tuple[Mode, ...]:
    return tuple(zip(leaves(shape), leaves(stride)))


def size(L: Layout) -> int:
    return math.prod(leaves(L.shape))


def split(i: int, sizes: Sequence[int]) -> list[int]:
    """The row-major coordinates of index ``i`` over ``sizes`` (the last varies fastest)."""
    crd = [0] * len(sizes)
    for k in range(len(sizes) - 1, -1, -1):
        i, crd[k] = divmod(i, sizes[k])
    assert i == 0, "index outside the domain"
    return crd


def at(L: Layout, i: int) -> int:
    """``L(i)``, computed here; ``i`` must lie in ``[0, size(L))``."""
    if i < 0:
        raise AssertionError(f"the index {i} is outside the domain of {L}")
    off = 0
    for s, d in reversed(_flat_modes(L.shape, L.stride)):
        i, c = divmod(i, s)
        off += c * d
    if i != 0:
        raise AssertionError(f"an index past the domain [0, {size(L)}) of {L}")
    return off


def image(L: Layout) -> list[int]:
    return [at(L, i) for i in range(size(L))]


def cosize(L: Layout) -> int:
    return max(image(L)) + 1


def injective(L: Layout) -> bool:
    img = image(L)
    return len(set(img)) == len(img)


def canonical_modes(L: Layout) -> list[Mode]:
    """The coalesced flat modes of ``L``: size-1 modes dropped, an outer mode ``s1:d1``
    merged into the inner ``s0:d0`` when ``d1 == s0*d0``; ``[(1, 0)]`` if none is left."""
    inner_first: list[Mode] = []
    for s, d in reversed(modes(L)):
        if s == 1:
            continue
        if inner_first and d == inner_first[-1][0] * inner_first[-1][1]:
            s0, d0 = inner_first[-1]
            inner_first[-1] = (s0 * s, d0)
        else:
            inner_first.append((s, d))
    return list(reversed(inner_first)) or [(1, 0)]


def canonical(L: Layout) -> Layout:
    """:func:`canonical_modes` as a Layout: an int shape for one mode, a flat tuple otherwise."""
    ms = canonical_modes(L)
    if len(ms) == 1:
        return Layout(ms[0][0], ms[0][1])
    return Layout(tuple(s for s, _ in ms), tuple(d for _, d in ms))


def a_ext(A: Layout, x: int) -> int:
    """``A`` extended past ``size(A)``: the first canonical mode of ``A`` runs unbounded."""
    assert x >= 0
    ms = canonical_modes(A)
    off = 0
    for s, d in reversed(ms[1:]):
        x, c = divmod(x, s)
        off += c * d
    return off + x * ms[0][1]


def tractable(L: Layout) -> bool:
    """Complement-admissible: sorted by stride, each stride is a multiple of the previous
    mode's ``size*stride`` (size-1 and stride-0 modes are ignored)."""
    ms = sorted((d, s) for s, d in modes(L) if s > 1 and d > 0)
    return all(d1 % (s0 * d0) == 0 for (d0, s0), (d1, _) in zip(ms, ms[1:]))


def span(L: Layout) -> int:
    return max([s * d for s, d in modes(L) if s > 1 and d > 0], default=1)


def filtered_size(L: Layout) -> int:
    """``size(filter(L))``: the product of the sizes of the modes with a nonzero stride."""
    return math.prod(s for s, d in modes(L) if d > 0)


def complement_image(A: Layout, cotarget: int) -> list[int]:
    """The ordered image of ``complement(A, cotarget)`` for a tractable ``A``.

    ``[0, round_up(cotarget, span(A)))`` is tiled by ``image(A)`` translated to each
    element of the complement; the complement's elements are found greedily as the
    smallest offsets not yet covered.
    """
    n = -(-cotarget // span(A)) * span(A)
    reach = set(image(A))
    covered = [False] * n
    out: list[int] = []
    for y in range(n):
        if covered[y]:
            continue
        out.append(y)
        for a in reach:
            assert not covered[y + a], f"{A} is not tractable"
            covered[y + a] = True
    return out


def compatible(b: Nested, r: Nested) -> bool:
    """CuTe's ``compatible(b, r)``: same size, and every coordinate of ``b`` is one of ``r``."""
    if isinstance(b, int):
        return math.prod(leaves(r)) == b
    return isinstance(r, tuple) and len(r) == len(b) and all(map(compatible, b, r))


def is_layout_function(values: Sequence[int]) -> bool:
    """Whether some flat layout of size ``len(values)`` has exactly these values."""
    n = len(values)
    if n == 1:
        return values[0] == 0
    if values[0] != 0:
        return False
    e = values[1]
    for t in range(2, n + 1):  # t: the size of the innermost mode, whose stride is e
        if n % t:
            continue
        if values[t - 1] != (t - 1) * e:
            break  # a longer innermost mode would have to contain this one
        outer = values[::t]
        if all(values[q * t + j] == outer[q] + j * e for q in range(n // t) for j in range(t)) \
                and is_layout_function(outer):
            return True
    return False


def composition_exists(A: Layout, B: Layout) -> bool:
    """Whether some layout compatible with ``B`` equals ``i -> a_ext(A, B(i))``.

    Such a layout's restriction to each flat mode ``s:d`` of B is ``c -> a_ext(A, c*d)``,
    so it exists iff each of those is a layout and they add up to ``a_ext(A, B(i))``.
    """
    bm = modes(B)
    parts = [[a_ext(A, c * d) for c in range(s)] for s, d in bm]
    if not all(is_layout_function(p) for p in parts):
        return False
    sizes = [s for s, _ in bm]
    for i in range(size(B)):
        crd = split(i, sizes)
        if a_ext(A, sum(c * d for c, (_, d) in zip(crd, bm))) != sum(
                p[c] for c, p in zip(crd, parts)):
            return False
    return True


def same_values(X: Layout, Y: Layout) -> bool:
    """Equal size and equal values on the whole domain (the representation may differ)."""
    return size(X) == size(Y) and image(X) == image(Y)


# ---- the laws ---------------------------------------------------------------------------------

def check_coalesce(L: Layout, R: Layout) -> None:
    """``coalesce(L) == R``: the canonical flat form, with the same function as ``L``."""
    assert R.shape == canonical(L).shape and R.stride == canonical(L).stride, \
        f"coalesce({L}) gave {R}, expected {canonical(L)}"
    assert size(R) == size(L) and image(R) == image(L)


def check_composition(A: Layout, B: Layout, R: Layout) -> None:
    """``R = A ∘ B``: shaped like B, and ``R(i) == a_ext(A, B(i))`` for every ``i < size(B)``."""
    assert compatible(B.shape, R.shape), f"{R} is not compatible with B = {B}"
    for i in range(size(B)):
        assert at(R, i) == a_ext(A, at(B, i)), \
            f"({A} ∘ {B})({i}): R gives {at(R, i)}, A_ext(B(i)) = {a_ext(A, at(B, i))}"


def check_complement(A: Layout, cotarget: int, R: Layout) -> None:
    """``R = complement(A, cotarget)`` for a tractable ``A``.

    R's image, in order, is the greedy :func:`complement_image`: R is increasing, misses
    image(A) except at 0, and ``(R, A)`` covers ``[0, round_up(cotarget, span(A)))`` once.
    Also CuTe C++'s own post-conditions, by enumeration.
    """
    img = image(R)
    assert img == complement_image(A, cotarget), \
        f"complement({A}, {cotarget}) = {R} has image {img}"
    a_img = set(image(A))
    assert all(r not in a_img for r in img[1:])  # disjoint
    assert all(x < y for x, y in zip(img, img[1:]))  # ordered
    cos_r, cos_a = max(img) + 1, max(a_img) + 1
    cos_both = cos_r + cos_a - 1  # cosize of (R, A): both are increasing in every mode
    assert cos_both >= cotarget
    assert cos_r <= -(-cotarget // cos_a) * cos_a
    assert size(R) <= cos_r
    assert size(R) >= cotarget // filtered_size(A)
    assert cos_r >= cotarget // filtered_size(A)


def check_right_inverse(L: Layout, R: Layout) -> None:
    """``L(R(i)) == i`` on R's domain; for injective L, R is as large as it can be."""
    for i in range(size(R)):
        assert at(L, at(R, i)) == i, f"right_inverse({L}) = {R}: L(R({i})) != {i}"
    if injective(L):
        img = set(image(L))
        n = 0
        while n in img:
            n += 1
        assert size(R) == n, f"right_inverse({L}) = {R} has size {size(R)}, not {n}"


def check_left_inverse(L: Layout, R: Layout) -> None:
    """``R(L(i)) == i`` for every ``i < size(L)``."""
    for i in range(size(L)):
        assert at(R, at(L, i)) == i, f"left_inverse({L}) = {R}: R(L({i})) != {i}"


def check_logical_divide(A: Layout, B: Layout, R: Layout) -> None:
    """``R = logical_divide(A, B)`` for a tractable B, as ``(rest, tile)``.

    With ``C`` the ordered image of ``complement(B, size(A))``: R has two modes, the tile
    mode is shaped like B, ``size(R) == len(C) * size(B)`` and
    ``R(j, i) == a_ext(A, C[j] + B(i))``.
    """
    assert isinstance(R.shape, tuple) and len(R.shape) == 2, f"{R} does not have rank 2"
    assert compatible(B.shape, R.shape[1]), f"the tile mode of {R} is not shaped like {B}"
    C = complement_image(B, size(A))
    assert size(R) == len(C) * size(B)
    for k in range(size(R)):
        j, i = divmod(k, size(B))
        assert at(R, k) == a_ext(A, C[j] + at(B, i)), f"logical_divide({A}, {B}) = {R} at {k}"


def check_logical_product(A: Layout, B: Layout, R: Layout) -> None:
    """``R = logical_product(A, B)`` for a tractable A, as ``(repetition, A)``.

    The second mode is A itself; the first is shaped like B and sends ``i`` to
    ``C[B(i)]``, with ``C`` the ordered image of ``complement(A, size(A) * cosize(B))``.
    """
    assert isinstance(R.shape, tuple) and len(R.shape) == 2, f"{R} does not have rank 2"
    assert sub(R, 1) == A, f"the second mode of {R} is not A = {A}"
    assert compatible(B.shape, R.shape[0]), f"the first mode of {R} is not shaped like {B}"
    C = complement_image(A, size(A) * cosize(B))
    rep = sub(R, 0)
    assert [at(rep, i) for i in range(size(B))] == [C[at(B, i)] for i in range(size(B))]
    assert size(R) == size(A) * size(B)
    if injective(A) and injective(B):
        assert injective(R)
