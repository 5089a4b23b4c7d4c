"""The cases of PyTorch's ``_pycute`` unit tests, which are already row-major.

Source: https://github.com/pytorch/pytorch, ``test/distributed/_pycute/``, at the newest
stored version of each file that could be identified (several were stored; the one
chosen is the one whose cases include the others'):

* ``test_coalesce.py`` @ 7d303d7de511f690e0ae45835ef39a9930beeca2 (expected values for
  every case; 1c3b0ef9e87c5d592626f945754e615919d29a4d has a subset of them)
* ``test_complement.py`` @ 159bd768bed1865efce77d9fabae432493e277c1 (same cases as
  ca6ceb6d7e0c107e43a274aa3e679a4597297cce, plus a hardware classification)
* ``test_composition.py`` @ 49422489549437a54749ebfc1e81c25a07896185
* ``test_int_tuple.py`` @ 50bb1fe492b0393d551e48b35a23f91474ab88d1 (f34fa1515024423a239c
  e26f33a8b65ea9252502 lacks the rank-0 ``crd2idx`` case)
* ``test_left_inverse.py`` @ 81a74cd5db840cbd4ce2d9d5182e26719a7bb7ca
* ``test_right_inverse.py`` @ c3bcdcb24504ce04d8bb68bf561076d11da00619 (identical cases
  at 1182a0b87c368107fc8f005469a0536120238959)
* ``test_typing.py`` tests the ``Integer`` type alias: nothing here corresponds.

Torch's copy of pycute is row-major like this package, so the cases need no ``rev``
and are compared with ``torch.distributed._pycute`` (torch 2.13) directly.  The
exception is ``shape_div``: torch kept pycute's column-major one (it divides from the
first mode), while ``layout.shape_div`` is its mirror image (from the last mode); those
cases are mirrored by hand.  Each test asserts the law by enumeration
(``upstream_cases``, never this package's operations) and torch's answer; expected
values that upstream writes out are written out here too.

Upstream cases whose torch answer breaks the law, asserted to raise here:

* complement of ``(4,6):(1,6)`` and ``(4,10):(1,10)`` (cotarget 1): injective, not
  tractable; torch returns ``1:0`` and ``2:4``, which satisfy upstream's disjointness check
  but leave offsets uncovered.  ``ComplementError``.
* composition ``(4,6,8,10):(2,3,5,7) ∘ 6:12`` ("Case when not meet stride divisibility
  condition"): upstream itself expects torch's ``AssertionError``; B's offsets
  0, 12, ..., 60 map to 0, 19, 38, 57, 76, 30, which no layout does.  ``CompositionError``.

Not ported: the five ``idx2crd(idx, shape, stride)`` calls of ``test_idx2crd_basic`` with a
stride other than 1 (``layout.idx2crd`` takes no stride); the stride-1 ones are ported
with the two-argument form, which means the same.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed._pycute as tp
import upstream_tables as tables
from upstream_cases import (
    Nested,
    at,
    check_coalesce,
    check_complement,
    check_composition,
    check_left_inverse,
    check_right_inverse,
    composition_exists,
    image,
    show,
    size,
    tractable,
)
from upstream_tables import layouts, pairs

from layout import (
    ComplementError,
    CompositionError,
    Coord,
    Layout,
    coalesce,
    complement,
    composition,
    crd2idx,
    idx2crd,
    inner_product,
    left_inverse,
    product,
    right_inverse,
    shape_div,
    suffix_product,
)

TorchLayout = tuple[Nested, Nested | None]
"""``(shape, stride)`` as upstream writes it; ``None`` is the row-major default stride."""


TORCH = "pytorch/pytorch"  # its cases of ``upstream_tables`` (one table with CUTLASS's)


def ours(L: TorchLayout) -> Layout:
    return Layout(*L)


def theirs(L: TorchLayout) -> Any:
    return tp.Layout(*L)


def from_torch(T: Any) -> Layout:
    return Layout(T.shape, T.stride)


def ids(cases: list[TorchLayout]) -> list[str]:
    return [show(*c) for c in cases]


# ---- coalesce ---------------------------------------------------------------------------------

# upstream's expected coalesce of each of its cases
_COALESCED: dict[TorchLayout, TorchLayout] = {
    (1, 0): (1, 0),
    (1, 1): (1, 0),
    ((1, 1), (42, 3)): (1, 0),
    ((1, 1, 1), (17, 4, 3)): (1, 0),
    ((2, 4), None): (8, 1),
    ((2, 4, 6), None): (48, 1),
    ((2, 4, 6), (1, 6, 2)): ((2, 4, 6), (1, 6, 2)),
    ((2, 1, 6), (1, 7, 2)): ((2, 6), (1, 2)),
    ((2, 1, 6), (4, 7, 8)): ((2, 6), (4, 8)),
    ((2, (4, 6)), None): (48, 1),
    ((1, 2), (8, 1)): (2, 1),
    ((2, 4), (4, 1)): (8, 1),
    ((2, 4, 6), (24, 6, 1)): (48, 1),
    ((2, 1, 3), (2, 4, 4)): ((2, 3), (2, 4)),
    (((2, 2), (2, 2)), ((1, 4), (8, 32))): ((2, 2, 2, 2), (1, 4, 8, 32)),
    (((2, 2), (2, 2)), ((32, 8), (4, 1))): ((2, 4, 2), (32, 4, 1)),
}
COALESCE: list[tuple[TorchLayout, TorchLayout]] = [(a, _COALESCED[a])
                                                   for a in layouts(tables.COALESCE, TORCH)]


@pytest.mark.parametrize(("a", "expected"), COALESCE, ids=[show(*c[0]) for c in COALESCE])
def test_coalesce(a: TorchLayout, expected: TorchLayout) -> None:
    L = ours(a)
    R = coalesce(L)
    check_coalesce(L, R)
    assert R == Layout(*expected)
    assert R == from_torch(tp.coalesce(theirs(a)))


# ---- complement -------------------------------------------------------------------------------

COMPLEMENT: list[TorchLayout] = layouts(tables.COMPLEMENT, TORCH)

COMPLEMENT_NOT_TRACTABLE: list[TorchLayout] = layouts(tables.COMPLEMENT_NOT_TRACTABLE, TORCH)


@pytest.mark.parametrize("a", COMPLEMENT, ids=ids(COMPLEMENT))
def test_complement(a: TorchLayout) -> None:
    A = ours(a)
    assert tractable(A)
    R = complement(A)  # cotarget 1, torch's default too
    check_complement(A, 1, R)
    assert R == from_torch(tp.complement(theirs(a)))


@pytest.mark.parametrize("a", COMPLEMENT_NOT_TRACTABLE, ids=ids(COMPLEMENT_NOT_TRACTABLE))
def test_complement_of_a_non_tractable_layout_raises(a: TorchLayout) -> None:
    A = ours(a)
    assert not tractable(A)
    wrong = from_torch(tp.complement(theirs(a)))
    covered = {r + x for r in image(wrong) for x in image(A)}
    assert any(y not in covered for y in range(max(image(A)) + 1))
    with pytest.raises(ComplementError):
        complement(A)


# ---- composition ------------------------------------------------------------------------------

COMPOSITION: list[tuple[TorchLayout, TorchLayout]] = pairs(tables.COMPOSITION, TORCH)


@pytest.mark.parametrize(("a", "b"), COMPOSITION,
                         ids=[f"{show(*a)} o {show(*b)}" for a, b in COMPOSITION])
def test_composition(a: TorchLayout, b: TorchLayout) -> None:
    A, B = ours(a), ours(b)
    assert composition_exists(A, B)
    R = composition(A, B)
    check_composition(A, B, R)
    assert R == from_torch(tp.composition(theirs(a), theirs(b)))


def test_composition_without_stride_divisibility_raises() -> None:
    # "Case when not meet stride divisibility condition": torch asserts, as upstream expects
    a: TorchLayout = ((4, 6, 8, 10), (2, 3, 5, 7))
    b: TorchLayout = (6, 12)
    A, B = ours(a), ours(b)
    assert not composition_exists(A, B)
    assert [at(A, at(B, i)) for i in range(size(B))] == [0, 19, 38, 57, 76, 30]
    with pytest.raises(AssertionError):
        tp.composition(theirs(a), theirs(b))
    with pytest.raises(CompositionError):
        composition(A, B)


# ---- right_inverse and left_inverse -----------------------------------------------------------

RIGHT_INVERSE: list[TorchLayout] = layouts(tables.RIGHT_INVERSE, TORCH)


@pytest.mark.parametrize("a", RIGHT_INVERSE, ids=ids(RIGHT_INVERSE))
def test_right_inverse(a: TorchLayout) -> None:
    L = ours(a)
    R = right_inverse(L)
    check_right_inverse(L, R)
    assert R == from_torch(tp.right_inverse(theirs(a)))


LEFT_INVERSE: list[TorchLayout] = layouts(tables.LEFT_INVERSE, TORCH)


@pytest.mark.parametrize("a", LEFT_INVERSE, ids=ids(LEFT_INVERSE))
def test_left_inverse(a: TorchLayout) -> None:
    L = ours(a)
    R = left_inverse(L)
    check_left_inverse(L, R)
    assert R == from_torch(tp.left_inverse(theirs(a)))


# ---- int tuples -------------------------------------------------------------------------------

@pytest.mark.parametrize(("t", "expected"), [(2, 2), ((3, 2), 6)])
def test_product(t: Nested, expected: int) -> None:
    assert product(t) == expected == tp.product(t)


def test_product_of_a_product() -> None:
    assert product(product(((2, 3), 4))) == 24


@pytest.mark.parametrize(("a", "b", "expected"), [
    (2, 3, 6),
    ((1, 2), (3, 2), 7),
    (((2, 3), 4), ((2, 1), 2), 15),
])
def test_inner_product(a: Nested, b: Nested, expected: int) -> None:
    assert inner_product(a, b) == expected == tp.inner_product(a, b)


# (a, b, torch's column-major shape_div(a, b) as upstream writes it, ours on the mirror)
@pytest.mark.parametrize(("a", "b", "torch_expected", "mirrored_a", "expected"), [
    ((3, 4), 6, (1, 2), (4, 3), (2, 1)),
    ((3, 4), 12, (1, 1), (4, 3), (1, 1)),
    ((3, 4), 36, (1, 1), (4, 3), (1, 1)),
    (((3, 4), 6), 36, ((1, 1), 2), (6, (4, 3)), (2, (1, 1))),
    ((6, (3, 4)), 36, (1, (1, 2)), ((4, 3), 6), ((2, 1), 1)),
])
def test_shape_div(a: Nested, b: Nested, torch_expected: Nested, mirrored_a: Nested,
                   expected: Nested) -> None:
    assert tp.shape_div(a, b) == torch_expected
    assert shape_div(mirrored_a, b) == expected


@pytest.mark.parametrize(("shape", "expected"), [
    (2, 1),
    ((3, 2), (2, 1)),
    ((3, 2, 4), (8, 4, 1)),
    (((2, 3), 4), ((12, 4), 1)),
    (((2, 3), (2, 1, 2), (5, 2, 1)), ((120, 40), (20, 20, 10), (2, 1, 1))),
])
def test_suffix_product(shape: Nested, expected: Nested) -> None:
    assert suffix_product(shape) == expected == tp.suffix_product(shape)


CRD2IDX: list[tuple[Coord, Nested, Nested | None, int]] = [
    # test_crd2idx_basic
    (2, 5, 1, 2), (0, 5, 1, 0), (4, 5, 1, 4), (2, 5, 3, 6), (1, 5, 3, 3),
    # test_crd2idx_tuple
    ((1, 2), (3, 4), None, 6), ((0, 0), (3, 4), None, 0), ((2, 3), (3, 4), None, 11),
    ((1, 2), (3, 4), (8, 2), 12), ((1, 0, 2), (2, 3, 4), None, 14),
    # test_crd2idx_none
    (None, 5, None, 0), (None, (3, 4), None, 0),
    # test_crd2idx_int_with_tuple_shape
    (0, (2, 2), (2, 1), 0), (1, (2, 2), (2, 1), 1), (2, (2, 2), (2, 1), 2),
    (3, (2, 2), (2, 1), 3),
    (0, (2, 3), (6, 2), 0), (1, (2, 3), (6, 2), 2), (2, (2, 3), (6, 2), 4),
    (3, (2, 3), (6, 2), 6), (4, (2, 3), (6, 2), 8), (5, (2, 3), (6, 2), 10),
    (0, (3, 2), (10, 5), 0), (1, (3, 2), (10, 5), 5), (2, (3, 2), (10, 5), 10),
    (3, (3, 2), (10, 5), 15), (4, (3, 2), (10, 5), 20), (5, (3, 2), (10, 5), 25),
    (0, (2, 2, 2), (8, 4, 2), 0), (1, (2, 2, 2), (8, 4, 2), 2), (2, (2, 2, 2), (8, 4, 2), 4),
    (3, (2, 2, 2), (8, 4, 2), 6), (4, (2, 2, 2), (8, 4, 2), 8), (7, (2, 2, 2), (8, 4, 2), 14),
    (4, ((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)), 8),
    (0, (), (), 0),
]


@pytest.mark.parametrize(("crd", "shape", "stride", "expected"), CRD2IDX,
                         ids=[f"{c}@{show(s)}:{d}" for c, s, d, _ in CRD2IDX])
def test_crd2idx(crd: Coord, shape: Nested, stride: Nested | None, expected: int) -> None:
    assert crd2idx(crd, shape, stride) == expected
    assert tp.crd2idx(crd, shape, stride) == expected


@pytest.mark.parametrize(("idx", "shape", "expected"), [
    (2, 5, 2), (0, 5, 0), (4, 5, 4),  # test_idx2crd_basic, the stride-1 calls
    (6, (3, 4), (1, 2)), (0, (3, 4), (0, 0)), (11, (3, 4), (2, 3)),  # test_idx2crd_tuple
    (14, (2, 3, 4), (1, 0, 2)),
])
def test_idx2crd(idx: int, shape: Nested, expected: Nested) -> None:
    assert idx2crd(idx, shape) == expected == tp.idx2crd(idx, shape)


@pytest.mark.parametrize("shape", [5, (3, 4), (2, 3, 4), (2, 2, 2, 2)], ids=show)
def test_crd2idx_idx2crd_roundtrip(shape: Nested) -> None:
    n = product(shape)
    assert [crd2idx(idx2crd(i, shape), shape) for i in range(n)] == list(range(n))


@pytest.mark.parametrize(("crd", "shape"), [
    (0, 5), (4, 5), ((0, 0), (3, 4)), ((1, 2), (3, 4)), ((2, 3), (3, 4)),
    ((0, 0, 0), (2, 3, 4)), ((1, 2, 3), (2, 3, 4)),
])
def test_idx2crd_crd2idx_roundtrip(crd: Nested, shape: Nested) -> None:
    assert idx2crd(crd2idx(crd, shape), shape) == crd
