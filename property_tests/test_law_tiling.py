"""Laws of the divide and product families (research notes §2.12-13), row-major.

``logical_divide(A, B) = A ∘ (complement(B, size(A)), B)`` is (rest, tile);
``logical_product(A, B) = (complement(A, size(A)*cosize(B)) ∘ B, A)`` is
(repetition, A): the first mode is the outer one.
"""

from __future__ import annotations

from collections import Counter

import brute
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import by_mode_tilers, layouts, product_pairs, sublayouts

from layout import (
    Layout,
    blocked_product,
    complement,
    composition,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)


@st.composite
def _divide_pairs(draw: st.DrawFn) -> tuple[Layout, Layout]:
    A = draw(layouts())
    return A, draw(sublayouts(A, ragged=False, extras=False))


@given(_divide_pairs())
def test_logical_divide_is_rest_then_tile(pair: tuple[Layout, Layout]) -> None:
    """``logical_divide(A, B) == make_layout(A ∘ complement(B, size(A)), A ∘ B)``."""
    A, B = pair
    ld = logical_divide(A, B)
    assert ld == make_layout(composition(A, complement(B, brute.size(A))), composition(A, B))


@given(_divide_pairs())
def test_logical_divide_permutes_a(pair: tuple[Layout, Layout]) -> None:
    """If ``span(B) | size(A)`` (and the divide is admissible): ``size(ld) == size(A)``, its
    image is a permutation of A's, and its tile mode is ``i -> A(B(i))``."""
    A, B = pair
    assume(brute.size(A) % brute.span(B) == 0)
    ld = logical_divide(A, B)
    img_a = brute.image(A)
    assert brute.size(ld) == brute.size(A)
    assert sorted(brute.image(ld)) == sorted(img_a)
    assert brute.image(ld[1]) == [img_a[x] for x in brute.image(B)]


@given(_divide_pairs())
def test_zipped_divide_by_a_layout_is_logical_divide(pair: tuple[Layout, Layout]) -> None:
    """For a single-Layout tiler: ``zipped_divide(A, B) == logical_divide(A, B)``, and
    ``tiled_divide(A, B) == make_layout(*zd[0], zd[1])``."""
    A, B = pair
    zd = zipped_divide(A, B)
    assert zd == logical_divide(A, B)
    assert tiled_divide(A, B) == make_layout(*zd[0], zd[1])


@given(layouts(), st.data())
def test_zipped_divide_tile_mode_is_composition(A: Layout, data: st.DataObject) -> None:
    """By-mode tiler: ``zipped_divide(A, t)[1] == composition(A', t)`` as a tile (the mirror
    of CuTe's ``layout<0>(zipped_divide(a, b)) == composition(a, b)``), restricted to the
    covered modes; the rests gather, in order, into mode 0; ``tiled_divide`` unpacks them."""
    tiler = data.draw(by_mode_tilers(A, ragged=False))
    zd = zipped_divide(A, tiler)
    off = A.rank - len(tiler)
    covered = make_layout(*list(A)[off:])
    assert zd[1] == composition(covered, tuple(Layout(1, 0) if t is None else t for t in tiler))
    ld = logical_divide(A, tiler)
    covered_modes = list(A)[off:]
    rests = [m if t is None else ld[k][0]
             for k, (m, t) in enumerate(zip(covered_modes, tiler), off)]
    assert zd[0] == make_layout(*list(A)[:off], *rests)
    assert tiled_divide(A, tiler) == make_layout(*zd[0], zd[1])
    assert brute.size(zd) == brute.size(ld) and Counter(brute.image(zd)) == Counter(
        brute.image(ld))


@given(product_pairs())
def test_logical_product_is_repetition_then_a(pair: tuple[Layout, Layout]) -> None:
    """``logical_product(A, B) == make_layout(complement(A, size(A)*cosize(B)) ∘ B, A)``."""
    A, B = pair
    lp = logical_product(A, B)
    assert lp[1] == A
    assert lp[0] == composition(complement(A, brute.size(A) * brute.cosize(B)), B)


@given(product_pairs())
def test_logical_product_size_and_injectivity(pair: tuple[Layout, Layout]) -> None:
    """A tractable and injective, the product admissible: ``size(lp) == size(A) * size(B)``;
    B injective ⇒ lp injective; A and B compact ⇒ lp compact."""
    A, B = pair
    star = complement(A, brute.size(A) * brute.cosize(B))
    assume(brute.comp_ok(star, B))
    lp = logical_product(A, B)
    assert brute.size(lp) == brute.size(A) * brute.size(B)
    if brute.injective(B):
        assert brute.injective(lp)
    if brute.compact(A) and brute.compact(B):
        assert brute.compact(lp)


@given(product_pairs(max_size=16, max_reps=6), st.integers(1, 3))
def test_zipped_and_tiled_product_by_a_layout(pair: tuple[Layout, Layout], k: int) -> None:
    """For a single-Layout tiler ``zipped_product == logical_product``; by mode, the
    repetitions gather into mode 0 and A's modes into mode 1; ``tiled_product`` unpacks
    the repetitions."""
    A, B = pair
    assert zipped_product(A, B) == logical_product(A, B)
    big = make_layout(*[A] * k)
    tiler = (B,) * k
    zp = zipped_product(big, tiler)
    assert zp[1] == big
    assert zp[0] == make_layout(*[logical_product(A, B)[0]] * k)
    assert tiled_product(big, tiler) == make_layout(*zp[0], zp[1])


@given(product_pairs(max_size=24, max_reps=12))
def test_blocked_and_raked_products_reassociate_the_logical_product(
        pair: tuple[Layout, Layout]) -> None:
    """``blocked_product(A, B)`` and ``raked_product(A, B)`` have rank ``max(rank)``, size
    ``size(A)*size(B)``, and the same offsets (with multiplicity) as the logical product
    of the operands padded to a common rank; mode k of the blocked product is, as a
    function, ``(rep_k, A_k)`` and of the raked one ``(A_k, rep_k)``."""
    A, B = pair
    r = max(A.rank, B.rank)
    pa = make_layout(*[Layout(1, 0)] * (r - A.rank), *A)
    pb = make_layout(*[Layout(1, 0)] * (r - B.rank), *B)
    star = complement(pa, brute.size(pa) * brute.cosize(pb))
    assume(brute.comp_ok(star, pb))
    lp = logical_product(pa, pb)
    bp, rp = blocked_product(A, B), raked_product(A, B)
    for P in (bp, rp):
        assert P.rank == r
        assert brute.size(P) == brute.size(A) * brute.size(B)
        assert Counter(brute.image(P)) == Counter(brute.image(lp))
    for k in range(r):
        rep, blk = lp[0][k], pa[k]
        assert brute.image(bp[k]) == brute.image(make_layout(rep, blk))
        assert brute.image(rp[k]) == brute.image(make_layout(blk, rep))
