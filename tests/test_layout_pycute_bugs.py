"""The known pycute bugs (research notes §4), mirrored to row-major: we raise or are right.

Each test first shows what pycute 4.2.0.0 (``nvidia-cutlass==4.2.0.0``, the pinned
oracle) does on the mirrored input — a wrong layout or a bare ``AssertionError`` —
then that this package raises the matching ``LayoutError`` or returns the correct
layout.  Expected values are written out by hand.
"""

from __future__ import annotations

import pycute
import pytest
from cute_oracle import from_cute, to_cute

from layout import (
    ComplementError,
    CompositionError,
    InverseError,
    Layout,
    complement,
    composition,
    left_inverse,
    logical_product,
    right_inverse,
)


def cute_composition(A: Layout, B: Layout) -> Layout:
    return from_cute(pycute.composition(to_cute(A), to_cute(B)))


def test_shape_divisibility_is_checked() -> None:
    # CuTe order: (4,6):(1,5) o 6:1 -> 4:1, a layout of size 4 for a composition of size 6
    A, B = Layout((6, 4), (5, 1)), Layout(6, 1)
    assert cute_composition(A, B) == Layout(4, 1)
    with pytest.raises(CompositionError, match="shape divisibility"):
        composition(A, B)


def test_shape_divisibility_is_checked_deeper_in_a() -> None:
    # CuTe order: (5,6,2,2):(18,1,360,90) o 6:1 -> 5:18
    A, B = Layout((2, 2, 6, 5), (90, 360, 1, 18)), Layout(6, 1)
    assert cute_composition(A, B) == Layout(5, 18)
    with pytest.raises(CompositionError, match="shape divisibility"):
        composition(A, B)


def test_logical_product_does_not_lose_repetitions() -> None:
    # CuTe order: logical_product((4,5):(2,16), 3:1) has size 40, not 4*5*3 = 60
    A, B = Layout((5, 4), (16, 2)), Layout(3, 1)
    assert pycute.size(pycute.logical_product(to_cute(A), to_cute(B))) == 40
    with pytest.raises(CompositionError, match="shape divisibility"):
        logical_product(A, B)


def test_carry_across_modes_is_rejected() -> None:
    # CuTe order (cutlass#2955): (6,2):(1,7) o (3,2):(2,3) -> (3,2):(2,3), whose R(5) = 7
    # while A(B(5)) = 8
    A, B = Layout((2, 6), (7, 1)), Layout((2, 3), (3, 2))
    wrong = cute_composition(A, B)
    assert wrong == Layout((2, 3), (3, 2))
    assert wrong(5) == 7 and A(B(5)) == 8
    with pytest.raises(CompositionError, match="carry across A's modes"):
        composition(A, B)


def test_the_weak_stride_condition_is_rejected() -> None:
    # CuTe order (#3177): (4,6,8):(2,3,5) o 6:3; C++ returns a wrong layout, pycute asserts
    A, B = Layout((8, 6, 4), (5, 3, 2)), Layout(6, 3)
    with pytest.raises(AssertionError):
        cute_composition(A, B)
    with pytest.raises(CompositionError, match="stride divisibility"):
        composition(A, B)


def test_out_of_bounds_b_extends_the_coalesced_form() -> None:
    # CuTe order: (3,1):(17,14) and 3:17 are the same function on [0, 3) but pycute's own
    # evaluation differs at 3 (the unbounded outer mode is the size-1 mode of stride 14);
    # its composition coalesces A first and answers 4:17 for both.  So do we: the
    # extension is the coalesced form's, whatever A's representation.
    A, A_same = Layout((1, 3), (14, 17)), Layout(3, 17)
    B = Layout(4, 1)
    assert cute_composition(A, B) == cute_composition(A_same, B) == Layout(4, 17)
    assert to_cute(A)(3) == 14 and to_cute(A_same)(3) == 51
    assert composition(A, B) == composition(A_same, B) == Layout(4, 17)


def test_a_size_one_mode_of_b_is_accepted() -> None:
    # CuTe order: (3,6):(6,1) o 1:4 -> AssertionError; the answer is the single offset A(0)
    A, B = Layout((6, 3), (1, 6)), Layout(1, 4)
    with pytest.raises(AssertionError):
        cute_composition(A, B)
    R = composition(A, B)
    assert R.size == 1 and R(0) == A(0) == 0


def test_logical_product_with_an_int_is_a_product() -> None:
    # pycute's logical_product(4:1, 3) runs a divide: (3,2):(1,3) in CuTe order
    assert from_cute(pycute.logical_product(to_cute(Layout(4)), 3)) == Layout((2, 3), (3, 1))
    assert logical_product(Layout(4), 3) == Layout((3, 4), (4, 1))


def test_complement_of_a_non_injective_layout_is_rejected() -> None:
    # pycute: complement((2,2):(1,1), 4) == (0,2):(2,2), a layout of size 0
    A = Layout((2, 2), (1, 1))
    assert pycute.complement(to_cute(A), 4).shape == (0, 2)
    with pytest.raises(ComplementError):
        complement(A, 4)


def test_complement_of_an_injective_non_tractable_layout_is_rejected() -> None:
    # CuTe order: complement((2,2):(1,3), 12) == 2:6; with A it misses 2, 5, 8, ...
    A = Layout((2, 2), (3, 1))
    wrong = from_cute(pycute.complement(to_cute(A), 12))
    assert wrong == Layout(2, 6)
    covered = {wrong(j) + A(i) for j in range(2) for i in range(4)}
    assert 2 not in covered
    with pytest.raises(ComplementError):
        complement(A, 12)


def test_right_inverse_skips_a_broadcast_mode() -> None:
    # CuTe order: right_inverse((4,2):(1,0)) == 1:0; the stride-0 mode can be skipped
    L = Layout((2, 4), (0, 1))
    assert from_cute(pycute.right_inverse(to_cute(L))) == Layout(1, 0)
    R = right_inverse(L)
    assert R == Layout(4, 1)
    assert [L(R(i)) for i in range(4)] == [0, 1, 2, 3]


def test_left_inverse_of_a_non_tractable_layout_is_rejected() -> None:
    # CuTe order: left_inverse((3,5):(6,11)) == (6,3):(15,1), which sends L(3) to 76
    L = Layout((5, 3), (11, 6))
    wrong = from_cute(pycute.left_inverse(to_cute(L)))
    assert wrong == Layout((3, 6), (1, 15))
    assert any(wrong(L(i)) != i for i in range(L.size) if L(i) < wrong.size)
    with pytest.raises(InverseError):
        left_inverse(L)
