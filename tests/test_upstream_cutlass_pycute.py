"""The cases of NVIDIA CUTLASS's pycute unit tests, mirrored to row-major.

Source: https://github.com/NVIDIA/cutlass at commit
7107b05535f8977f5ecb9d01ee203205b1fd9bc4, ``test/python/pycute/``:
``test_coalesce.py``, ``test_complement.py``, ``test_composition.py``,
``test_int_tuple.py``, ``test_left_inverse.py``, ``test_right_inverse.py``.
(``test_typing.py`` tests pycute's ``Integer`` type alias; nothing here corresponds.)
The pycute installed as the oracle (``nvidia-cutlass==4.2.0.0``) has the same
``layout.py`` and ``int_tuple.py`` as that commit, up to the copyright year.

Only the cases are carried over.  Each is written as upstream writes it, in CuTe's
column-major order, and brought over with ``cute`` (its mirror image, ``rev`` at every
level).  Each test asserts

* the law, by enumeration in ``upstream_cases`` (never with this package's operations);
* upstream's answer: ours equals pycute's, mirrored (``from_cute``).  pycute is the
  reference here, so computing that expected value with it is fine.

Upstream cases whose pycute answer breaks the law, asserted to raise here:

* complement of ``(4,6):(1,6)`` and ``(4,10):(1,10)`` (default cotarget 1): A is injective
  but not tractable (6 and 10 are not multiples of 4), so no layout R makes ``(A, R)``
  cover ``[0, n)``.  pycute returns ``1:0`` (offsets 4, 5, 10, 11, ... are never reached)
  and ``2:4`` (8, 9, 18, 19, ... are not); both pass upstream's disjointness check.  We
  raise ``ComplementError``.

Every other case is answered exactly as pycute answers it: no composition here has B
past size(A) with an A whose extension depends on its representation, and each
right_inverse case with a stride-0 mode gives ``1:0`` whether or not that mode is skipped.

The int-tuple cases use ``layout.product``, ``layout.inner_product``,
``layout.shape_div`` (CuTe's ``shape_div`` mirrored: it divides from the last mode) and
``layout.suffix_product`` (the mirror of CuTe's ``prefix_product``); the expected values
are upstream's, mirrored by hand.
"""

from __future__ import annotations

import pycute
import pytest
import upstream_tables as tables
from cute_oracle import from_cute, rev
from upstream_cases import (
    Nested,
    check_coalesce,
    check_complement,
    check_composition,
    check_left_inverse,
    check_right_inverse,
    complement_image,
    composition_exists,
    image,
    show,
    tractable,
)
from upstream_tables import layouts, pairs

from layout import (
    ComplementError,
    coalesce,
    complement,
    composition,
    inner_product,
    left_inverse,
    product,
    right_inverse,
    shape_div,
    suffix_product,
)

CuteLayout = tuple[Nested, Nested | None]
"""``(shape, stride)`` in CuTe order as upstream writes it; ``None`` is CuTe's default stride."""
CUTLASS = "NVIDIA/cutlass"  # its cases of ``upstream_tables`` (one table with torch's)


def ids(cases: list[CuteLayout]) -> list[str]:
    return [show(*c) for c in cases]


def pair_ids(cases: list[tuple[CuteLayout, CuteLayout]]) -> list[str]:
    return [f"{show(*a)} o {show(*b)}" for a, b in cases]


# ---- coalesce ---------------------------------------------------------------------------------

COALESCE: list[CuteLayout] = layouts(tables.COALESCE, CUTLASS)


@pytest.mark.parametrize(("shape", "stride"), COALESCE, ids=ids(COALESCE))
def test_coalesce(shape: Nested, stride: Nested | None) -> None:
    P = pycute.Layout(shape, stride)
    L = from_cute(P)
    R = coalesce(L)
    check_coalesce(L, R)
    assert R == from_cute(pycute.coalesce(P))


# ---- complement -------------------------------------------------------------------------------

COMPLEMENT: list[CuteLayout] = layouts(tables.COMPLEMENT, CUTLASS)

COMPLEMENT_NOT_TRACTABLE: list[CuteLayout] = layouts(tables.COMPLEMENT_NOT_TRACTABLE, CUTLASS)


@pytest.mark.parametrize(("shape", "stride"), COMPLEMENT, ids=ids(COMPLEMENT))
def test_complement(shape: Nested, stride: Nested | None) -> None:
    P = pycute.Layout(shape, stride)
    A = from_cute(P)
    assert tractable(A)
    R = complement(A)  # the default cotarget is 1, as in pycute
    check_complement(A, 1, R)
    assert R == from_cute(pycute.complement(P))


@pytest.mark.parametrize(("shape", "stride"), COMPLEMENT_NOT_TRACTABLE,
                         ids=ids(COMPLEMENT_NOT_TRACTABLE))
def test_complement_of_a_non_tractable_layout_raises(shape: Nested, stride: Nested | None
                                                     ) -> None:
    P = pycute.Layout(shape, stride)
    A = from_cute(P)
    assert not tractable(A)
    # pycute's answer passes upstream's disjointness check but does not cover: some
    # offset below cosize(A) is neither in A's image nor reached by (R, A)
    wrong = from_cute(pycute.complement(P))
    covered = {r + a for r in image(wrong) for a in image(A)}
    assert any(x not in covered for x in range(max(image(A)) + 1))
    with pytest.raises(ComplementError):
        complement(A)


def test_the_greedy_complement_image_is_the_tiling_complement() -> None:
    # a sanity check of the brute-force helper itself on a case worked by hand:
    # CuTe (2,4):(1,4) reaches {0,1,4,5,...,12,13}; its complement is {0, 2}
    assert complement_image(from_cute(pycute.Layout((2, 4), (1, 4))), 1) == [0, 2]


# ---- composition ------------------------------------------------------------------------------

COMPOSITION: list[tuple[CuteLayout, CuteLayout]] = pairs(tables.COMPOSITION, CUTLASS)


@pytest.mark.parametrize(("a", "b"), COMPOSITION, ids=pair_ids(COMPOSITION))
def test_composition(a: CuteLayout, b: CuteLayout) -> None:
    PA, PB = pycute.Layout(*a), pycute.Layout(*b)
    A, B = from_cute(PA), from_cute(PB)
    assert composition_exists(A, B)
    R = composition(A, B)
    check_composition(A, B, R)
    assert R == from_cute(pycute.composition(PA, PB))


# ---- right_inverse and left_inverse -----------------------------------------------------------

RIGHT_INVERSE: list[CuteLayout] = layouts(tables.RIGHT_INVERSE, CUTLASS)


@pytest.mark.parametrize(("shape", "stride"), RIGHT_INVERSE, ids=ids(RIGHT_INVERSE))
def test_right_inverse(shape: Nested, stride: Nested | None) -> None:
    P = pycute.Layout(shape, stride)
    L = from_cute(P)
    R = right_inverse(L)
    check_right_inverse(L, R)
    assert R == from_cute(pycute.right_inverse(P))


LEFT_INVERSE: list[CuteLayout] = layouts(tables.LEFT_INVERSE, CUTLASS)


@pytest.mark.parametrize(("shape", "stride"), LEFT_INVERSE, ids=ids(LEFT_INVERSE))
def test_left_inverse(shape: Nested, stride: Nested | None) -> None:
    P = pycute.Layout(shape, stride)
    L = from_cute(P)
    R = left_inverse(L)
    check_left_inverse(L, R)
    assert R == from_cute(pycute.left_inverse(P))


# ---- int tuples -------------------------------------------------------------------------------
# Upstream's values, mirrored by hand: arguments and results reversed at every level.

@pytest.mark.parametrize(("t", "expected"), [
    (2, 2),
    ((2, 3), 6),           # CuTe (3,2)
])
def test_product(t: Nested, expected: int) -> None:
    assert product(t) == expected


def test_product_of_a_product() -> None:
    assert product(product((4, (3, 2)))) == 24  # CuTe ((2,3),4)


@pytest.mark.parametrize(("a", "b", "expected"), [
    (2, 3, 6),
    ((2, 1), (2, 3), 7),                  # CuTe (1,2).(3,2)
    ((4, (3, 2)), (2, (1, 2)), 15),       # CuTe ((2,3),4).((2,1),2)
])
def test_inner_product(a: Nested, b: Nested, expected: int) -> None:
    assert inner_product(a, b) == expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    ((4, 3), 6, (2, 1)),                  # CuTe shape_div((3,4), 6) == (1,2)
    ((4, 3), 12, (1, 1)),
    ((4, 3), 36, (1, 1)),
    ((6, (4, 3)), 36, (2, (1, 1))),       # CuTe shape_div(((3,4),6), 36) == ((1,1),2)
    (((4, 3), 6), 36, ((2, 1), 1)),       # CuTe shape_div((6,(3,4)), 36) == (1,(1,2))
])
def test_shape_div(a: Nested, b: Nested, expected: Nested) -> None:
    assert shape_div(a, b) == expected
    assert rev(pycute.shape_div(rev(a), rev(b))) == expected


@pytest.mark.parametrize(("shape", "expected"), [
    (2, 1),                                              # CuTe prefix_product(2) == 1
    ((2, 3), (3, 1)),                                    # CuTe (3,2) -> (1,3)
    ((4, 2, 3), (6, 3, 1)),                              # CuTe (3,2,4) -> (1,3,6)
    ((4, (3, 2)), (6, (2, 1))),                          # CuTe ((2,3),4) -> ((1,2),6)
    (((1, 2, 5), (2, 1, 2), (3, 2)),                     # CuTe ((2,3),(2,1,2),(5,2,1))
     ((240, 120, 24), (12, 12, 6), (2, 1))),             # -> ((1,2),(6,12,12),(24,120,240))
])
def test_suffix_product_mirrors_prefix_product(shape: Nested, expected: Nested) -> None:
    assert suffix_product(shape) == expected
    assert rev(pycute.prefix_product(rev(shape))) == expected
