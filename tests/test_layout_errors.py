"""Every class of bad input raises the right ``LayoutError`` subclass, naming the value.

The hierarchy: ``LayoutError(ValueError)``; ``InvalidLayoutError`` for values that
are not valid layouts (or by-mode tuples); ``LayoutTypeError`` (also a
``TypeError``) for wrong types; ``LayoutIndexError`` (also an ``IndexError``) for
indices and coordinates outside the domain; ``CompositionError``,
``ComplementError`` and ``InverseError`` for inadmissible operands.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from layout import (
    ComplementError,
    CompositionError,
    InvalidLayoutError,
    InverseError,
    Layout,
    LayoutError,
    LayoutIndexError,
    LayoutTypeError,
    UndecidableError,
    as_int,
    blocked_product,
    coalesce,
    complement,
    composition,
    crd2idx,
    idx2crd,
    is_injective,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    slice_and_offset,
    zipped_divide,
)

L24 = Layout((2, 4))


def test_as_int_is_the_one_integer_door() -> None:
    """Integer-likes become plain ints; bools, floats, strings and None are refused with a
    ``LayoutTypeError`` naming the value, or with the error class the caller picks."""
    import numpy as np

    seven = as_int(np.int64(7), "a size")
    assert seven == 7 and type(seven) is int
    for bad, shown in ((True, "the bool True"), (2.0, "2.0 of type float"),
                       ("3", "'3' of type str"), (None, "None of type NoneType")):
        with pytest.raises(LayoutTypeError, match=re.escape(f"a size must be an int, got {shown}")):
            as_int(bad, "a size")
    with pytest.raises(LookupError, match="a rank must be an int"):
        as_int(1.5, "a rank", error=LookupError)


def test_the_hierarchy_subclasses_the_builtins() -> None:
    assert issubclass(LayoutError, ValueError)
    for cls in (InvalidLayoutError, LayoutTypeError, LayoutIndexError, CompositionError,
                ComplementError, InverseError, UndecidableError):
        assert issubclass(cls, LayoutError)
    assert issubclass(LayoutTypeError, TypeError)
    assert issubclass(LayoutIndexError, IndexError)


# ---- InvalidLayoutError --------------------------------------------------------------------

def test_a_nested_empty_tuple_is_a_rank_0_mode() -> None:
    L = Layout((2, ()))
    assert (L.size, L.cosize, L.stride, str(L)) == (2, 2, (1, ()), "(2,()):(1,())")
    assert str(make_layout(Layout(()), Layout(3))) == "((),3):((),1)"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Layout((2, 3), (1,)), r"shape \(2,3\) and stride \(1,\) are not congruent"),
    (lambda: Layout((2, 3), 1), r"shape \(2,3\) and stride 1 are not congruent"),
    (lambda: Layout((2, (3, 4)), (1, 2, 3)), r"shape \(2,\(3,4\)\) and stride \(1,2,3\)"),
    (lambda: Layout(0), r"size must be >= 1, got 0 in shape 0"),
    (lambda: Layout((2, (3, 0))), r"size must be >= 1, got 0 in shape \(2,\(3,0\)\)"),
    (lambda: Layout((2, -3), (1, 1)), r"got -3 in shape \(2,-3\)"),
    (lambda: Layout(2, -1), r"stride must be >= 0, got -1 in stride -1"),
    (lambda: Layout((2, 2), (4, -2)), r"got -2 in stride \(4,-2\)"),
    (lambda: Layout((2, ()), (1, 1)), r"shape \(2,\(\)\) and stride \(1,1\) are not congruent"),
    (lambda: Layout((2, 3), ((), 1)), r"shape \(2,3\) and stride \(\(\),1\) are not congruent"),
], ids=["incongruent-rank", "incongruent-int", "incongruent-nested", "size-0", "nested-size-0",
        "negative-size", "negative-stride", "negative-nested-stride", "nested-empty-vs-int",
        "nested-empty-stride"])
def test_invalid_layouts_are_rejected(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(InvalidLayoutError, match=message):
        make()


@pytest.mark.parametrize(("call", "message"), [
    (lambda: composition(Layout(4), (2, 2)), r"by-mode tiler \(2, 2\) has 2 modes but 4:1"),
    (lambda: coalesce(L24, (1, 1, 1)), r"by-mode profile \(1, 1, 1\) has 3 modes but \(2,4\)"),
    (lambda: logical_divide(Layout(4), (2, None)), r"tiler \(2, None\) has 2 modes but 4:1"),
    (lambda: zipped_divide(Layout(4), (2, 2)), r"tiler \(2, 2\) has 2 modes"),
    (lambda: logical_product(Layout(4), (Layout(2), Layout(2))), r"has 2 modes but 4:1"),
])
def test_a_by_mode_tuple_longer_than_the_layout_is_rejected(call: Callable[[], Any],
                                                            message: str) -> None:
    with pytest.raises(InvalidLayoutError, match=message):
        call()


def test_the_rank_zero_layout_is_valid() -> None:
    assert Layout(()).size == 1
    assert Layout((), ()).cosize == 1


# ---- LayoutTypeError ----------------------------------------------------------------------

@pytest.mark.parametrize(("make", "message"), [
    (lambda: Layout(True), r"shape must be an int, got the bool True"),
    (lambda: Layout((2, False)), r"got the bool False"),
    (lambda: Layout(2, True), r"stride must be an int, got the bool True"),
    (lambda: Layout(2.0), r"got 2\.0 of type float"),
    (lambda: Layout(2, 1.5), r"stride must be an int or a nested tuple of ints, got 1\.5"),
    (lambda: Layout("4"), r"got '4' of type str"),
    (lambda: Layout([2, 3]), r"got \[2, 3\] of type list"),
    (lambda: Layout((2, [3])), r"got \[3\] of type list"),
], ids=["bool", "nested-bool", "bool-stride", "float", "float-stride", "str", "list",
        "nested-list"])
def test_wrong_types_in_a_layout_are_rejected(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(LayoutTypeError, match=message):
        make()


@pytest.mark.parametrize(("call", "message"), [
    (lambda: composition(L24, 2.5), r"right operand of composition must be .*got 2\.5"),
    (lambda: composition(L24, "x"), r"right operand of composition must be .*got 'x'"),
    (lambda: composition(L24, [2]), r"got \[2\] of type list"),
    (lambda: composition(L24, True), r"got the bool True"),
    (lambda: composition("x", L24), r"left operand of composition must be a Layout, got 'x'"),
    (lambda: complement(L24, 2.0), r"cotarget of complement must be an int, got 2\.0"),
    (lambda: complement(L24, (2, 4)), r"cotarget of complement must be an int, got \(2, 4\)"),
    (lambda: complement(L24, True), r"cotarget of complement must be an int, got the bool"),
    (lambda: logical_divide(L24, 2.0), r"tiler must be .*got 2\.0"),
    (lambda: make_layout(L24, 3), r"argument of make_layout must be a Layout, got 3"),
    (lambda: blocked_product(L24, 3), r"must be a Layout, got 3"),
    (lambda: L24[True], r"mode index must be an int, got the bool True"),
    (lambda: L24["a"], r"mode index must be an int or a slice, got 'a'"),
    (lambda: L24(1.5), r"coordinate must be an int, None or a tuple, got 1\.5"),
    (lambda: L24(True), r"got the bool True"),
    (lambda: L24(None), r"coordinate None contains None; use slice_and_offset"),
    (lambda: L24(1, None), r"coordinate \(1, None\) contains None"),
    (lambda: idx2crd(1.0, (2, 4)), r"index must be an int, got 1\.0"),
])
def test_wrong_argument_types_are_rejected(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(LayoutTypeError, match=message):
        call()


def test_a_layout_type_error_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Layout(2.0)


# ---- LayoutIndexError ---------------------------------------------------------------------

@pytest.mark.parametrize(("call", "message"), [
    (lambda: L24(8), r"index 8 is outside the domain of \(2,4\):\(4,1\)"),
    (lambda: L24(-1), r"index -1 is outside the domain of \(2,4\):\(4,1\)"),
    (lambda: L24(2, 0), r"coordinate 2 is out of range for a mode of shape 2"),
    (lambda: L24(0, 4), r"coordinate 4 is out of range for a mode of shape 4"),
    (lambda: L24((1, 2, 3)), r"coordinate \(1, 2, 3\) does not match the shape \(2,4\)"),
    (lambda: Layout((2, (2, 2)))(0, (1, 2)), r"coordinate 2 is out of range"),
    (lambda: L24[2], r"mode 2 is out of range for \(2,4\):\(4,1\) of rank 2"),
    (lambda: L24[-3], r"mode -3 is out of range"),
    (lambda: idx2crd(8, (2, 4)), r"index 8 is out of range for shape \(2,4\)"),
    (lambda: idx2crd(-1, (2, 4)), r"index -1 is out of range"),
    (lambda: crd2idx((2, 0), (2, 4)), r"coordinate 2 is out of range"),
    (lambda: slice_and_offset((2, None), L24), r"coordinate 2 is out of range"),
    (lambda: slice_and_offset((1, None, 0), L24), r"does not match the shape"),
])
def test_indices_outside_the_domain_are_rejected(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(LayoutIndexError, match=message):
        call()


def test_a_layout_index_error_is_an_index_error() -> None:
    with pytest.raises(IndexError):
        L24(8)


# ---- CompositionError ----------------------------------------------------------------------

@pytest.mark.parametrize(("A", "B", "condition"), [
    (Layout((6, 4), (5, 1)), Layout(6), r"6 is not a multiple of 4 \(shape divisibility\)"),
    (Layout((8, 6, 4), (5, 3, 2)), Layout(6, 3),
     r"stride 3 .* mode size 4 \(stride divisibility\)"),
    (Layout((2, 6), (7, 1)), Layout((2, 3), (3, 2)), r"carry across A's modes .* not tractable"),
], ids=["shape-divisibility", "stride-divisibility", "carry"])
def test_inadmissible_compositions_are_rejected(A: Layout, B: Layout, condition: str) -> None:
    with pytest.raises(CompositionError, match=re.escape(f"composition {A} ∘ {B}")):
        composition(A, B)
    with pytest.raises(CompositionError, match=condition):
        composition(A, B)


@pytest.mark.parametrize("n", [0, -3])
def test_composition_with_a_non_positive_int_is_rejected(n: int) -> None:
    with pytest.raises(InvalidLayoutError, match=f"composition {n} is not a size: an int tiler"):
        composition(L24, n)


def test_a_by_mode_composition_reports_the_failing_mode() -> None:
    A = Layout((2, (6, 4)), (24, (5, 1)))
    with pytest.raises(CompositionError, match=r"composition \(6,4\):\(5,1\) ∘ 6:1"):
        composition(A, (None, 6))


# ---- ComplementError -----------------------------------------------------------------------

@pytest.mark.parametrize(("A", "M", "condition"), [
    (Layout((2, 2), (1, 1)), 4, r"mode 2:1 does not start where mode 2:1 ends"),
    (Layout((2, 2), (3, 1)), 12, r"mode 2:3 does not start where mode 2:1 ends"),
    (Layout((2, 3), (2, 1)), 6, r"not a multiple of 3\*1 = 3"),
], ids=["non-injective", "injective-not-tractable", "overlap"])
def test_complement_of_a_non_tractable_layout_is_rejected(A: Layout, M: int, condition: str
                                                          ) -> None:
    with pytest.raises(ComplementError, match=re.escape(f"complement({A}, {M})")):
        complement(A, M)
    with pytest.raises(ComplementError, match=condition):
        complement(A, M)


@pytest.mark.parametrize("M", [0, -1])
def test_complement_with_a_cotarget_below_one_is_rejected(M: int) -> None:
    with pytest.raises(ComplementError, match=re.escape(f"complement(4:1, {M})") +
                       r".*cotarget must be >= 1"):
        complement(Layout(4), M)


# ---- InverseError and UndecidableError -----------------------------------------------------

@pytest.mark.parametrize(("L", "condition"), [
    (Layout((2, 2), (1, 1)), r"mode 2:1 and the next stride 1 are neither .* the modes overlap"),
    (Layout((5, 3), (11, 6)), r"mode 3:6 and the next stride 11 are neither .* 6 does not divide"),
    (Layout((2, 2), (0, 1)), r"stride-0 mode of size > 1"),
], ids=["non-injective", "injective-not-a-chain", "broadcast"])
def test_left_inverse_of_an_inadmissible_layout_is_rejected(L: Layout, condition: str) -> None:
    with pytest.raises(InverseError, match=re.escape(f"left_inverse({L})") + ".*" + condition):
        left_inverse(L)


def test_is_injective_refuses_to_list_a_huge_domain_and_codomain() -> None:
    # Three entangled modes (no common factor, none separable, no colliding pair):
    # 129**3 > 2**20 elements reaching about 2**35 offsets.
    L = Layout((129, 129, 129), (1, 1 << 27, (1 << 27) + 1))
    with pytest.raises(UndecidableError, match=re.escape(str(L)) + r".*2146689 elements"):
        is_injective(L)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


class _NotAStr(Exception):
    def __str__(self) -> Any:
        return 3


@pytest.mark.parametrize(("error", "shown"), [
    (ValueError("bad"), "ValueError: bad"),
    (KeyError(), "KeyError"),
    (_Unprintable(), "_Unprintable: <its message could not be read: its __str__ raised "
                     "RuntimeError>"),
    (_NotAStr(), "_NotAStr: <its message could not be read: its __str__ raised TypeError>"),
    (RuntimeError("x" * 5000), "RuntimeError: " + "x" * 1000 + "... (5,000 characters)"),
])
def test_show_error_quotes_any_exception_without_failing(error: BaseException,
                                                        shown: str) -> None:
    """What the packages say about someone else's exception (a plan's, a program's)."""
    from layout import show_error

    assert show_error(error) == shown
