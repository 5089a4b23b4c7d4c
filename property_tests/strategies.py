"""Hypothesis strategies for layouts and for pairs of layouts.

Sizes stay small so every law can be checked by enumeration: depth <= 2, rank
<= 4, sizes 1..6, strides 0..40, total size <= 512.

* :func:`layouts` — arbitrary layouts (any strides, so often non-injective).
* :func:`tractable_layouts` — complement-admissible layouts (optionally with
  broadcast and size-1 modes, which complement ignores).
* :func:`admissible_compositions` — ``(A, B)`` with B built from a refinement of
  ``coalesce(A)``'s shape, so the research notes' ``comp_ok(A, B)`` holds.
* :func:`arbitrary_compositions` — admissible or not, deliberately including the
  four pycute bug classes: shape divisibility, carry across modes, B out of
  bounds, size-1 modes.
"""

from __future__ import annotations

import math
from typing import Any

import pycute
from brute import flat, suffix
from cute_oracle import from_cute, to_cute  # tests/ is on sys.path (see conftest.py)
from hypothesis import strategies as st

from layout import Layout

MAX_SIZE = 512
MAX_STRIDE = 40

strides = st.integers(0, MAX_STRIDE)


def _nest(draw: st.DrawFn, leaves: list[Any]) -> Any:
    """Group a flat list into a random tree of depth <= 2 and rank <= 4, leaves in order.

    A single leaf may stay an int (a rank-1, depth-0 shape); a group of one leaf
    is sometimes a 1-tuple.  :func:`_regroup` applies the same tree to strides.
    """
    n = len(leaves)
    if n == 1 and draw(st.booleans()):
        return leaves[0]
    r = draw(st.integers(max(1, -(-n // 3)), min(4, n)))  # groups of at most 3 leaves
    cuts = sorted(draw(st.permutations(range(1, n)))[:r - 1])
    groups = [leaves[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, n])]
    if any(len(g) > 3 for g in groups):  # the draw did not respect the cap: regroup evenly
        groups = [leaves[i:i + 3] for i in range(0, n, 3)]
    tree = []
    for g in groups:
        if len(g) == 1 and draw(st.integers(0, 3)):
            tree.append(g[0])
        else:
            tree.append(tuple(g))
    return tuple(tree)


def _regroup(tree: Any, leaves: list[int]) -> Any:
    it = iter(leaves)

    def walk(t: Any) -> Any:
        if isinstance(t, int):
            return next(it)
        return tuple(walk(x) for x in t)

    return walk(tree)


@st.composite
def flat_shapes(draw: st.DrawFn, max_modes: int = 6, max_size: int = MAX_SIZE) -> list[int]:
    """A list of 1..max_modes sizes in 1..6 whose product stays <= max_size."""
    n = draw(st.integers(1, max_modes))
    out: list[int] = []
    total = 1
    for _ in range(n):
        s = draw(st.integers(1, max(1, min(6, max_size // total))))
        out.append(s)
        total *= s
    return out


@st.composite
def shapes(draw: st.DrawFn, max_size: int = MAX_SIZE) -> Any:
    """A nested shape: depth <= 2, rank <= 4, sizes 1..6, size <= max_size."""
    return _nest(draw, draw(flat_shapes(max_size=max_size)))


@st.composite
def layouts(draw: st.DrawFn, max_size: int = MAX_SIZE, compact_bias: bool = True) -> Layout:
    """An arbitrary layout: random nesting, random strides in 0..40.

    A third of the time the strides start from the compact row-major ones and are
    then perturbed, so coalescable and injective layouts are common too.
    """
    shape = draw(shapes(max_size=max_size))
    leaves = list(flat(shape))
    if compact_bias and draw(st.integers(0, 2)) == 0:
        base = list(flat(suffix(shape)))
        stride = [d if draw(st.integers(0, 3)) else draw(strides) for d in base]
    else:
        stride = [draw(strides) for _ in leaves]
    return Layout(shape, _regroup(shape, stride))


@st.composite
def tractable_layouts(draw: st.DrawFn, max_size: int = MAX_SIZE, max_cosize: int = 4096,
                      broadcast: bool = True) -> Layout:
    """A tractable layout: sorted by stride, each mode starts at a multiple of the previous end.

    Built in stride order from gaps, then shuffled and nested.  With ``broadcast``
    it may also carry stride-0 and size-1 modes (which tractability ignores).
    """
    sz = draw(flat_shapes(max_modes=4, max_size=max_size))
    pairs: list[tuple[int, int]] = []
    cur = 1
    for s in sz:
        gap = draw(st.integers(1, 4))
        if cur * gap * s > max_cosize:
            gap = 1
        d = cur * gap
        pairs.append((s, d))
        cur = s * d
    if broadcast:
        for _ in range(draw(st.integers(0, 1))):
            pairs.append((draw(st.integers(1, 2)), 0))
    pairs = draw(st.permutations(pairs))
    total = math.prod(s for s, _ in pairs)
    if total > max_size:  # a broadcast mode pushed the size over: drop it
        pairs = [p for p in pairs if p[1] != 0]
    shape = _nest(draw, [s for s, _ in pairs])
    return Layout(shape, _regroup(shape, [d for _, d in pairs]))


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def _refined_factors(draw: st.DrawFn, A: Layout) -> list[tuple[int, int]]:
    """``coalesce(A)``'s colex shape refined into prime factors, as (factor, block index).

    The primes of each mode of ``coalesce(A)`` come in a random order, so every chain of
    divisors of a mode's size can appear as consecutive runs (6 = 2*3 or 3*2).
    """
    ms = [(s, d) for s, d in zip(flat(A.shape), flat(A.stride))]
    # colex coalesce, written out here: innermost (last row-major) mode first
    out: list[list[int]] = []
    for s, d in reversed(ms):
        if s == 1:
            continue
        if out and out[-1][0] * out[-1][1] == d:
            out[-1][0] *= s
        else:
            out.append([s, d])
    factors: list[tuple[int, int]] = []
    for j, (s, _) in enumerate(out):
        factors.extend((p, j) for p in draw(st.permutations(_primes(s))))
    return factors


@st.composite
def sublayouts(draw: st.DrawFn, A: Layout, ragged: bool = True, nest: bool = True,
               max_modes: int = 3, extras: bool = True) -> Layout:
    """A B with ``comp_ok(A, B)``: its moving modes are runs of A's refined index factors.

    The domain ``[0, size(A))`` is split (colex) into the prime factors of
    ``coalesce(A)``'s modes; B takes 1..max_modes disjoint runs of consecutive
    factors (stride = product of the factors below the run, size = product of
    the run), in a random order.  With ``ragged`` the top run, when it lies in
    one mode of A, may end anywhere inside that mode (a ragged final edge,
    allowed by weak alignment).  With ``extras``, stride-0 modes may be mixed in.
    """
    fac = draw(_refined_factors(A))
    n = len(fac)
    bounds: list[tuple[int, int]] = []
    if n:
        k = draw(st.integers(1, min(max_modes, (n + 1) // 2)))
        cut = sorted(draw(st.permutations(range(n + 1)))[:2 * k])
        bounds = [(lo, hi) for lo, hi in zip(cut[::2], cut[1::2]) if lo < hi]
    runs = [(math.prod(f for f, _ in fac[lo:hi]), math.prod(f for f, _ in fac[:lo]))
            for lo, hi in bounds]
    if ragged and bounds and draw(st.booleans()):
        lo, hi = bounds[-1]
        blocks = {fac[i][1] for i in range(lo, hi)}
        if len(blocks) == 1:
            j = blocks.pop()
            top = max(i for i in range(n) if fac[i][1] == j) + 1
            avail = math.prod(f for f, _ in fac[lo:top])
            runs[-1] = (draw(st.integers(1, avail)), runs[-1][1])
    pairs = [(s, d) for s, d in runs if s > 1]
    if extras:
        for _ in range(draw(st.integers(0, 1))):
            pairs.append((draw(st.integers(1, 3)), 0))
    if not pairs:
        pairs = [(draw(st.integers(1, 3)), 0)] if extras else [(1, 0)]
    pairs = list(draw(st.permutations(pairs)))
    if nest:
        shape = _nest(draw, [s for s, _ in pairs])
        return Layout(shape, _regroup(shape, [d for _, d in pairs]))
    return Layout(tuple(s for s, _ in pairs), tuple(d for _, d in pairs))


@st.composite
def int_tilers(draw: st.DrawFn, A: Layout, ragged: bool = True) -> int:
    """An int n with ``comp_ok(A, n:1)``: a product of A's lowest refined factors, or ragged.

    Ragged (if allowed): any n up to the size of ``coalesce(A)``'s innermost mode.
    """
    fac = draw(_refined_factors(A))
    if ragged and fac and draw(st.booleans()):
        inner = math.prod(f for f, j in fac if j == 0)
        return draw(st.integers(1, inner))
    return math.prod(f for f, _ in fac[:draw(st.integers(0, len(fac)))])


@st.composite
def admissible_compositions(draw: st.DrawFn) -> tuple[Layout, Layout]:
    """``(A, B)`` with ``comp_ok(A, B)``: A arbitrary, B a sub-layout of ``coalesce(A)``."""
    A = draw(layouts())
    return A, draw(sublayouts(A))


@st.composite
def near_layouts(draw: st.DrawFn, A: Layout) -> Layout:
    """A B whose strides and sizes are drawn near A's shape: often in bounds, often not divisible.

    Strides are products of some of A's sizes times a small factor, or small ints;
    the size is drawn up to ``size(A)``.  Mostly inadmissible in some way.
    """
    a_sizes = [s for s in flat(A.shape) if s > 1] or [1]
    k = draw(st.integers(1, 3))
    pairs = []
    for _ in range(k):
        base = math.prod(draw(st.lists(st.sampled_from(a_sizes), max_size=2)))
        d = draw(st.one_of(st.just(base), st.integers(0, 6).map(base.__mul__),
                           st.integers(0, 12)))
        s = draw(st.integers(1, max(1, min(12, A.size // max(1, d)))))
        pairs.append((s, d))
    shape = _nest(draw, [s for s, _ in pairs])
    return Layout(shape, _regroup(shape, [d for _, d in pairs]))


@st.composite
def arbitrary_compositions(draw: st.DrawFn) -> tuple[Layout, Layout]:
    """``(A, B)``, admissible or not, drawn from several families.

    * ``admissible``: B a sub-layout of coalesce(A) (completeness is checked on these);
    * ``shape-divisibility``: B = n:1 or n:d for any n (pycute's ``(4,6):(1,5) ∘ 6:1``);
    * ``carry``: multi-mode B with each mode in bounds, any order (cutlass#2955);
    * ``out-of-bounds``: B reaching past ``size(A)``;
    * ``size-1``: size-1 modes with nonzero strides in A and B;
    * ``random``: independent random A and B (small B);
    * ``near``: B's strides/sizes drawn from A's sizes.
    """
    kind = draw(st.sampled_from(["admissible", "shape-divisibility", "carry", "out-of-bounds",
                                 "size-1", "random", "near"]))
    A = draw(layouts())
    if kind == "admissible":
        B = draw(sublayouts(A))
    elif kind == "shape-divisibility":
        d = draw(st.integers(1, 4))
        B = Layout(draw(st.integers(1, max(1, A.size // d))), d)
    elif kind == "carry":
        k = draw(st.integers(2, 3))
        pairs = []
        for _ in range(k):
            d = draw(st.integers(1, max(1, A.size // 2)))
            pairs.append((draw(st.integers(2, max(2, min(6, A.size // d)))), d))
        B = Layout(tuple(s for s, _ in pairs), tuple(d for _, d in pairs))
    elif kind == "out-of-bounds":
        B = draw(sublayouts(A))
        B = Layout((draw(st.integers(2, 4)), B.shape), (A.size, B.stride))
    elif kind == "size-1":
        A = Layout((1, *(A.shape if isinstance(A.shape, tuple) else (A.shape,)), 1),
                   (draw(strides), *(A.stride if isinstance(A.stride, tuple) else (A.stride,)),
                    draw(strides)))
        B = draw(sublayouts(A))
        B = Layout((1, B.shape, 1), (draw(st.integers(1, 40)), B.stride, draw(st.integers(1, 40))))
    elif kind == "random":
        B = draw(layouts(max_size=64))
    else:
        B = draw(near_layouts(A))
    return A, B


@st.composite
def by_mode_tilers(draw: st.DrawFn, A: Layout, admissible: bool = True,
                   ints: bool = True, nones: bool = True, ragged: bool = True
                   ) -> tuple[Any, ...]:
    """A by-mode tuple for A's trailing modes (never longer than A's rank).

    Each entry is a sub-layout of the matching mode (or, if allowed, an admissible
    int tiler ``n`` meaning ``n:1``, or ``None``); with ``admissible=False`` the
    entries are ``near_layouts`` and any ints up to ``size + 2``.  ``ragged=False``
    keeps every tile's span a divisor of its mode's size, as divides need.
    """
    modes = list(A)
    k = draw(st.integers(1, len(modes)))
    out: list[Any] = []
    for m in modes[len(modes) - k:]:
        choice = draw(st.integers(0, 5))
        if nones and choice == 0:
            out.append(None)
        elif ints and choice == 1:
            out.append(draw(int_tilers(m, ragged)) if admissible
                       else draw(st.integers(1, m.size + 2)))
        elif admissible:
            out.append(draw(sublayouts(m, ragged=ragged, extras=False)))
        else:
            out.append(draw(near_layouts(m)))
    return tuple(out)


def _oracle_complement(A: Layout, M: int) -> Layout:
    """pycute's complement, mirrored (correct for tractable A): used to build inputs only."""
    return from_cute(pycute.complement(to_cute(A), M))


@st.composite
def product_pairs(draw: st.DrawFn, max_size: int = 64, max_reps: int = 12
                  ) -> tuple[Layout, Layout]:
    """``(A, B)`` for ``logical_product``: A tractable and injective, B a sub-layout of A's
    complement, so ``comp_ok(complement(A, size(A)*cosize(B)), B)`` usually holds
    (tests still ``assume`` it)."""
    A = draw(tractable_layouts(broadcast=False, max_size=max_size))
    n = draw(st.integers(1, max_reps))
    star = _oracle_complement(A, A.size * n)
    return A, draw(sublayouts(star, ragged=False))


@st.composite
def complement_inputs(draw: st.DrawFn) -> tuple[Layout, int]:
    """``(A, M)``: tractable or arbitrary A, and any cotarget M (including M < 1 rarely)."""
    A = draw(st.one_of(tractable_layouts(), layouts()))
    M = draw(st.one_of(st.integers(1, 4 * MAX_SIZE), st.integers(-2, 0),
                       st.sampled_from([A.size, A.cosize, 2 * A.cosize])))
    return A, M


@st.composite
def slice_coords(draw: st.DrawFn, shape: Any) -> Any:
    """A coordinate for ``shape`` with some modes (at any level) replaced by None."""
    if draw(st.integers(0, 3)) == 0:
        return None
    if isinstance(shape, int):
        return draw(st.integers(0, shape - 1))
    return tuple(draw(slice_coords(s)) for s in shape)
