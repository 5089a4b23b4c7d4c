"""Conjugacy with NVIDIA's pycute: every operation is the mirror of its CuTe namesake.

``rev`` reverses modes at every nesting level; ``op(X, Y) == rev(cute_op(rev(X),
rev(Y)))``.  Structural equality (``==`` on shape and stride), not just equal
functions.  Compared only on inputs where pycute's own answer is correct: the
admissible ones (pycute must not raise there, and its answer is checked against
the law by brute force before it is used as the expected value).
"""

from __future__ import annotations

from typing import Any

import brute
import pycute
from cute_oracle import cute_blocked_product, from_cute, rev, tiler_to_cute, to_cute
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import (
    admissible_compositions,
    by_mode_tilers,
    int_tilers,
    layouts,
    product_pairs,
    slice_coords,
    sublayouts,
    tractable_layouts,
)

from layout import (
    Layout,
    blocked_product,
    coalesce,
    complement,
    composition,
    filter,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    slice_and_offset,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)


def _cute_call(L: Layout, crd: Any) -> int:
    return int(to_cute(L)(rev(crd)))


@given(layouts())
def test_evaluation_mirrors_pycute(L: Layout) -> None:
    """Law 1: ``L(i) == cute(rev(L))(i)`` for every index i < size(L)."""
    n = brute.size(L)
    assert [L(i) for i in range(n)] == [int(to_cute(L)(i)) for i in range(n)] == brute.image(L)


@given(layouts(), st.data())
def test_coordinate_evaluation_mirrors_pycute(L: Layout, data: st.DataObject) -> None:
    """Law 1 by coordinate: ``L(c) == cute(rev(L))(rev(c))`` for a natural coordinate c."""
    i = data.draw(st.integers(0, brute.size(L) - 1))
    crd = brute.idx2crd(i, L.shape)
    assert L(crd) == _cute_call(L, crd) == brute.crd2off(crd, L.shape, L.stride)


@given(layouts())
def test_coalesce_mirrors_pycute(L: Layout) -> None:
    """``coalesce(L) == rev(cute.coalesce(rev(L)))`` (coalesce has no precondition)."""
    assert coalesce(L) == from_cute(pycute.coalesce(to_cute(L)))


@given(layouts(), st.data())
def test_by_mode_coalesce_mirrors_pycute(L: Layout, data: st.DataObject) -> None:
    """``coalesce(L, profile) == rev(cute.coalesce(rev(L), rev(profile)))``.

    The profile lines up with L's trailing modes (CuTe's: leading), so its mirror
    is the reversed tuple.
    """
    k = data.draw(st.integers(1, L.rank))
    profile = tuple(data.draw(st.sampled_from([1, (1,) * m.rank])) for m in list(L)[L.rank - k:])
    expected = from_cute(pycute.coalesce(to_cute(L), tiler_to_cute(profile)))
    assert coalesce(L, profile) == expected


@given(layouts())
def test_filter_mirrors_pycute(L: Layout) -> None:
    """``filter(L) == rev(cute.filter(rev(L)))``."""
    assert filter(L) == from_cute(pycute.filter(to_cute(L)))


@given(admissible_compositions())
def test_composition_mirrors_pycute(pair: tuple[Layout, Layout]) -> None:
    """On admissible pairs (``comp_ok``), ``A ∘ B == rev(cute.composition(rev(A), rev(B)))``.

    pycute's answer is first checked to be ``A ∘ B`` as a function.
    """
    A, B = pair
    assert brute.comp_ok(A, B)
    C = from_cute(pycute.composition(to_cute(A), to_cute(B)))
    img = brute.image(A)
    assert brute.image(C) == [img[x] for x in brute.image(B)]
    assert composition(A, B) == C


@given(layouts(), st.data())
def test_int_composition_mirrors_pycute(A: Layout, data: st.DataObject) -> None:
    """``A ∘ n == rev(cute.composition(rev(A), n))`` for an admissible int n (``n:1``)."""
    n = data.draw(int_tilers(A))
    assert n == 1 or brute.comp_ok(A, Layout(n, 1))
    C = from_cute(pycute.composition(to_cute(A), n))
    assert brute.image(C) == brute.image(A)[:n]
    assert composition(A, n) == C


@given(layouts(), st.data())
def test_by_mode_composition_mirrors_pycute(A: Layout, data: st.DataObject) -> None:
    """``composition(A, tiler) == rev(cute.composition(rev(A), rev(tiler)))`` by mode."""
    tiler = data.draw(by_mode_tilers(A))
    expected = from_cute(pycute.composition(to_cute(A), tiler_to_cute(tiler)))
    assert composition(A, tiler) == expected


@given(tractable_layouts(), st.integers(1, 2048))
def test_complement_mirrors_pycute(A: Layout, M: int) -> None:
    """For tractable A and M >= 1: ``complement(A, M) == rev(cute.complement(rev(A), M))``
    (pycute's answer first checked against the complement law)."""
    expected = from_cute(pycute.complement(to_cute(A), M))
    brute.assert_complement_law(A, M, expected)
    assert complement(A, M) == expected


@given(layouts())
def test_right_inverse_mirrors_pycute(L: Layout) -> None:
    """``right_inverse(L) == rev(cute.right_inverse(rev(L)))`` when L has no broadcast mode.

    A stride-0 mode of size > 1 makes pycute stop and return ``1:0`` (research
    notes §4.8); this package skips such modes as CuTe C++ does, a deliberate
    difference, so those inputs are left to the right-inverse laws instead.
    """
    assume(all(d > 0 for s, d in brute.modes(L) if s > 1))
    expected = from_cute(pycute.right_inverse(to_cute(L)))
    img = brute.image(L)
    assert [img[x] for x in brute.image(expected)] == list(range(brute.size(expected)))
    assert right_inverse(L) == expected


@given(tractable_layouts(broadcast=False))
def test_left_inverse_mirrors_pycute(L: Layout) -> None:
    """For injective tractable L: ``left_inverse(L) == rev(cute.left_inverse(rev(L)))``
    (pycute's answer first checked to be a left inverse)."""
    expected = from_cute(pycute.left_inverse(to_cute(L)))
    img = brute.image(expected)
    assert [img[x] for x in brute.image(L)] == list(range(brute.size(L)))
    assert left_inverse(L) == expected


@given(layouts(), st.data())
def test_logical_divide_mirrors_pycute(A: Layout, data: st.DataObject) -> None:
    """``logical_divide(A, B) == rev(cute.logical_divide(rev(A), rev(B)))`` when admissible.

    Admissible: ``comp_ok(A, (complement(B, size(A)), B))`` (checked with pycute's
    complement mirrored, which is correct for the tractable B drawn here).
    """
    B = data.draw(sublayouts(A, ragged=False, extras=False))
    star = from_cute(pycute.complement(to_cute(B), brute.size(A)))
    assert brute.comp_ok(A, make_layout(star, B))
    expected = from_cute(pycute.logical_divide(to_cute(A), to_cute(B)))
    img = brute.image(A)
    assert brute.image(expected[1]) == [img[x] for x in brute.image(B)]  # the tile is A ∘ B
    assert sorted(brute.image(expected)) == sorted(img)  # span(B) | size(A): a permutation
    assert logical_divide(A, B) == expected


@given(layouts(), st.data())
def test_zipped_and_tiled_divide_mirror_pycute(A: Layout, data: st.DataObject) -> None:
    """By-mode ``zipped_divide``/``tiled_divide`` equal the mirrors of pycute's."""
    tiler = data.draw(by_mode_tilers(A, ragged=False))
    ct = tiler_to_cute(tiler)
    assert zipped_divide(A, tiler) == from_cute(pycute.zipped_divide(to_cute(A), ct))
    assert tiled_divide(A, tiler) == from_cute(pycute.tiled_divide(to_cute(A), ct))


def _product_admissible(A: Layout, B: Layout) -> bool:
    """``comp_ok(complement(A, size(A)*cosize(B)), B)`` with pycute's complement, mirrored."""
    star = from_cute(pycute.complement(to_cute(A), brute.size(A) * brute.cosize(B)))
    return brute.comp_ok(star, B)


@given(product_pairs())
def test_logical_product_mirrors_pycute(pair: tuple[Layout, Layout]) -> None:
    """``logical_product(A, B) == rev(cute.logical_product(rev(A), rev(B)))`` for a Layout B.

    Only Layout tilers: pycute's ``logical_product(A, int)`` runs a divide (notes
    §4.6).  Compared where ``comp_ok(complement(A, size(A)*cosize(B)), B)``.
    """
    A, B = pair
    assume(_product_admissible(A, B))
    expected = from_cute(pycute.logical_product(to_cute(A), to_cute(B)))
    assert expected[1] == A and brute.size(expected) == brute.size(A) * brute.size(B)
    assert logical_product(A, B) == expected


@st.composite
def _product_tilers(draw: st.DrawFn) -> tuple[Layout, tuple[Layout, ...]]:
    pairs = [draw(product_pairs(max_size=8, max_reps=4)) for _ in range(draw(st.integers(1, 3)))]
    lead = [draw(layouts(max_size=4)) for _ in range(draw(st.integers(0, 1)))]
    return make_layout(*lead, *(a for a, _ in pairs)), tuple(b for _, b in pairs)


@given(_product_tilers())
def test_zipped_and_tiled_product_mirror_pycute(case: tuple[Layout, tuple[Layout, ...]]) -> None:
    """By-mode ``zipped_product``/``tiled_product`` equal the mirrors of pycute's
    (Layout tilers only)."""
    A, tiler = case
    modes = list(A)[A.rank - len(tiler):]
    assume(all(_product_admissible(m, t) for m, t in zip(modes, tiler)))
    ct = tiler_to_cute(tiler)
    assert zipped_product(A, tiler) == from_cute(pycute.zipped_product(to_cute(A), ct))
    assert tiled_product(A, tiler) == from_cute(pycute.tiled_product(to_cute(A), ct))


@given(product_pairs(max_size=24, max_reps=12), st.booleans())
def test_blocked_and_raked_product_mirror_cute(pair: tuple[Layout, Layout], raked: bool) -> None:
    """``blocked_product``/``raked_product`` equal the mirror of CuTe C++'s definition.

    pycute lacks them; ``cute_oracle.cute_blocked_product`` builds C++'s definition
    from pycute primitives.  Compared where the underlying logical product of the
    operands padded to a common rank is admissible.
    """
    block, lay = pair
    r = max(block.rank, lay.rank)
    pad = [Layout(1, 0)]
    pb = make_layout(*pad * (r - block.rank), *block)
    pl = make_layout(*pad * (r - lay.rank), *lay)
    assume(_product_admissible(pb, pl))
    expected = from_cute(cute_blocked_product(to_cute(block), to_cute(lay), raked=raked))
    assert brute.size(expected) == brute.size(block) * brute.size(lay)
    op = raked_product if raked else blocked_product
    assert op(block, lay) == expected


@given(layouts(), st.data())
def test_slice_and_offset_mirrors_pycute(L: Layout, data: st.DataObject) -> None:
    """``slice_and_offset(c, L) == rev(cute.slice_and_offset(rev(c), rev(L)))``."""
    crd = data.draw(slice_coords(L.shape))
    sub, off = slice_and_offset(crd, L)
    csub, coff = pycute.slice_and_offset(rev(crd), to_cute(L))
    assert (sub, off) == (from_cute(csub), coff)


