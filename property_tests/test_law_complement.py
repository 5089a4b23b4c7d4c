"""Laws of complement, including raise-or-correct and completeness.

``R = complement(A, M)`` is the layout of the offsets A does not reach: ordered
(strides descending, image ascending), disjoint from A's image except at 0,
injective together with ``filter(A)``, and together with it exactly covering
``[0, round_up(M, span(A)))``.  For *any* A and M the operation either raises
``ComplementError`` or returns an R with all of these properties.
"""

from __future__ import annotations

import brute
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from strategies import complement_inputs, layouts, tractable_layouts

from layout import ComplementError, Layout, LayoutError, complement

RAISE_OR_CORRECT = settings(max_examples=settings().max_examples * 5)


def check_raise_or_correct(A: Layout, M: int) -> bool:
    """Assert raise-or-correct for ``complement(A, M)``; return whether it raised."""
    brute.CHECKED["complement:checked"] += 1
    try:
        R = complement(A, M)
    except LayoutError as e:
        assert isinstance(e, ComplementError)
        assert str(A) in str(e) and str(M) in str(e)
        brute.CHECKED["complement:raised"] += 1
        return True
    assert M >= 1
    brute.assert_complement_law(A, M, R)
    brute.CHECKED["complement:returned"] += 1
    return False


@RAISE_OR_CORRECT
@given(complement_inputs())
@example((Layout((2, 2), (1, 1)), 4)).via("pycute bug: non-injective, size-0 result")
@example((Layout((2, 2), (3, 1)), 12)).via("injective, not tractable: no exact cover")
@example((Layout((5, 3), (11, 6)), 60)).via("injective, not tractable")
@example((Layout(4, 1), 0)).via("cotarget below 1")
def test_complement_raises_or_is_correct(case: tuple[Layout, int]) -> None:
    """For any A and M: ``complement(A, M)`` raises ``ComplementError`` naming A and M, or
    returns R that is ordered, disjoint from ``image(A)`` except at 0, injective together
    with ``filter(A)``, and with it covers exactly ``[0, round_up(M, span(A)))``.  If A is
    tractable and ``M >= 1`` it does not raise (completeness)."""
    A, M = case
    raised = check_raise_or_correct(A, M)
    admissible = brute.tractable(A) and M >= 1
    event(f"tractable={admissible}, raised={raised}")
    if admissible:
        brute.CHECKED["complement:admissible"] += 1
        assert not raised, f"complement({A}, {M}) is admissible but raised"


@given(tractable_layouts(), st.integers(1, 2048))
def test_complement_of_tractable_layout_satisfies_its_law(A: Layout, M: int) -> None:
    """Tractable A, ``M >= 1``: the complement exists and satisfies the law above."""
    brute.assert_complement_law(A, M, complement(A, M))


@given(tractable_layouts(), st.integers(1, 8))
def test_complement_size_when_span_divides_cotarget(A: Layout, k: int) -> None:
    """If ``span(A) | M``: ``size(filter(A)) * size(complement(A, M)) == M``."""
    M = brute.span(A) * k
    moving = brute.prod(tuple(s for s, _ in brute.nontrivial(A)))
    assert moving * brute.size(complement(A, M)) == M


@given(layouts())
def test_complement_ignores_broadcast_and_size_one_modes(A: Layout) -> None:
    """``complement(A, M)`` depends only on A's moving modes: equal to the complement of
    the layout made of its size>1, stride>0 modes (when either is admissible)."""
    moving = brute.nontrivial(A)
    F = Layout(tuple(s for s, _ in moving), tuple(d for _, d in moving)) if moving else Layout(1, 0)
    M = 2 * brute.cosize(A)
    try:
        expected = complement(F, M)
    except ComplementError:
        assert not brute.tractable(A)
        return
    assert complement(A, M) == expected
