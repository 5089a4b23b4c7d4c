"""Laws of composition, including raise-or-correct and completeness.

Raise-or-correct is the package's central promise: for *any* pair, admissible or
not, ``composition(A, B)`` either raises a ``LayoutError`` or returns R with
``size(R) == size(B)`` and ``R(i) == A(B(i))`` for every ``i < size(B)``, where A
is read on CuTe's extended domain (``brute.extended``: ``coalesce(A)`` with its
outer mode unbounded) wherever B reaches past ``size(A)``.  These
tests run ``5x`` the profile's examples (``thorough``: 2000 x 5 each) and count
the pairs they check (printed at the end of the run by ``conftest.py``).
"""

from __future__ import annotations

from typing import Any

import brute
import pytest
from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st
from strategies import (
    admissible_compositions,
    arbitrary_compositions,
    by_mode_tilers,
    int_tilers,
    layouts,
    sublayouts,
)

from layout import (
    CompositionError,
    InvalidLayoutError,
    Layout,
    LayoutError,
    composition,
    make_layout,
)

RAISE_OR_CORRECT = settings(max_examples=settings().max_examples * 5)

# The pycute bug classes of the research notes §4, mirrored to row-major (rev of both operands).
KNOWN_BUGS = [
    # 1. shape divisibility: pycute returns 4:1 (size 4) for (4,6):(1,5) ∘ 6:1
    (Layout((6, 4), (5, 1)), Layout(6, 1)),
    (Layout((2, 2, 6, 5), (90, 360, 1, 18)), Layout(6, 1)),
    # 2. carry across modes (cutlass#2955): (6,2):(1,7) ∘ (3,2):(2,3)
    (Layout((2, 6), (7, 1)), Layout((2, 3), (3, 2))),
    # 3. the weak stride condition C++ accepts (#3177): (4,6,8):(2,3,5) ∘ 6:3
    (Layout((8, 6, 4), (5, 3, 2)), Layout(6, 3)),
    # 4. B out of bounds: pycute's A(x) for x >= size(A) depends on A's representation;
    #    the extended domain reads the coalesced form (4:17 for both of these)
    (Layout((1, 3), (14, 17)), Layout(4, 1)),
    (Layout(3, 17), Layout(2, 3)),
    # 5. a size-1 mode of B with a nonzero stride: pycute asserts on (3,6):(6,1) ∘ 1:4
    (Layout((6, 3), (1, 6)), Layout(1, 4)),
]


def check_raise_or_correct(A: Layout, B: Layout, law: str = "composition") -> bool:
    """Assert the raise-or-correct law for ``composition(A, B)``; return whether it raised."""
    brute.CHECKED[law + ":checked"] += 1
    try:
        R = composition(A, B)
    except LayoutError as e:
        assert isinstance(e, CompositionError)
        assert str(A) in str(e) and str(B) in str(e)  # the message names the operands
        brute.CHECKED[law + ":raised"] += 1
        return True
    img_b = brute.image(B)
    assert brute.size(R) == brute.size(B)
    assert brute.compatible(B.shape, R.shape)
    expected = [brute.extended(A, x) for x in img_b]
    assert brute.image(R) == expected, f"{A} ∘ {B} returned the wrong {R}"
    brute.CHECKED[law + ":returned"] += 1
    return False


@RAISE_OR_CORRECT
@given(arbitrary_compositions())
@example(KNOWN_BUGS[0]).via("pycute bug: shape divisibility")
@example(KNOWN_BUGS[1]).via("pycute bug: shape divisibility")
@example(KNOWN_BUGS[2]).via("pycute bug: carry across modes")
@example(KNOWN_BUGS[3]).via("C++ bug: weak stride condition")
@example(KNOWN_BUGS[4]).via("pycute bug: out of bounds")
@example(KNOWN_BUGS[5]).via("pycute bug: out of bounds")
@example(KNOWN_BUGS[6]).via("pycute bug: size-1 mode")
def test_composition_raises_or_is_correct(pair: tuple[Layout, Layout]) -> None:
    """For any A, B: ``composition(A, B)`` raises ``CompositionError`` naming A and B, or
    returns R with ``size(R) == size(B)``, R compatible with B, and ``R(i) == A(B(i))`` for
    every ``i < size(B)`` (A on its extended domain past its size).  And if
    ``comp_ok(A, B)`` (research notes, without the in-bounds clause) it does not raise
    (completeness)."""
    A, B = pair
    raised = check_raise_or_correct(A, B)
    admissible = brute.comp_ok(A, B)
    event(f"comp_ok={admissible}, raised={raised}")
    if admissible:
        brute.CHECKED["composition:admissible"] += 1
        assert not raised, f"{A} ∘ {B} is admissible (comp_ok) but raised"


@RAISE_OR_CORRECT
@given(layouts(), st.data())
def test_int_composition_raises_or_is_correct(A: Layout, data: st.DataObject) -> None:
    """``composition(A, n)`` means ``A ∘ n:1``: raises ``InvalidLayoutError`` for ``n < 1``
    and ``CompositionError`` for an inadmissible n, else R has size n and
    ``R(i) == A(i)`` (extended past A's size); an n with ``comp_ok(A, n:1)`` never raises."""
    n = data.draw(st.one_of(st.integers(-1, 2 * brute.size(A) + 2), int_tilers(A)))
    brute.CHECKED["composition-int:checked"] += 1
    try:
        R = composition(A, n)
    except LayoutError as e:
        if n < 1:
            assert isinstance(e, InvalidLayoutError)
        else:
            assert isinstance(e, CompositionError)
            assert not brute.comp_ok(A, Layout(n, 1))
        brute.CHECKED["composition-int:raised"] += 1
        return
    assert n >= 1
    assert brute.image(R) == [brute.extended(A, x) for x in range(n)]
    brute.CHECKED["composition-int:returned"] += 1


@RAISE_OR_CORRECT
@given(layouts(), st.data())
def test_by_mode_composition_raises_or_is_correct(A: Layout, data: st.DataObject) -> None:
    """For any by-mode tuple t (admissible or not): ``composition(A, t)`` raises, or keeps
    A's rank, leaves the modes t does not cover unchanged, and each covered mode k obeys
    raise-or-correct for ``A[k] ∘ t_k`` (an int n meaning ``n:1``, None meaning A[k])."""
    tiler = data.draw(by_mode_tilers(A, admissible=data.draw(st.booleans())))
    brute.CHECKED["composition-by-mode:checked"] += 1
    modes = list(A)
    off = len(modes) - len(tiler)
    try:
        R = composition(A, tiler)
    except LayoutError:
        brute.CHECKED["composition-by-mode:raised"] += 1
        # then some mode on its own must be inadmissible (and raise too)
        assert any(t is not None and check_raise_or_correct(m, _as_layout(t), "by-mode-part")
                   for m, t in zip(modes[off:], tiler))
        return
    assert R.rank == A.rank
    for k, (m, r) in enumerate(zip(modes, R)):
        t = tiler[k - off] if k >= off else None
        if t is None:
            assert r == m
            continue
        img_t = brute.image(_as_layout(t))
        assert brute.image(r) == [brute.extended(m, x) for x in img_t]
    brute.CHECKED["composition-by-mode:returned"] += 1


def _as_layout(t: Any) -> Layout:
    return t if isinstance(t, Layout) else Layout(t, 1)


@given(admissible_compositions())
def test_admissible_composition_is_function_composition(pair: tuple[Layout, Layout]) -> None:
    """If ``comp_ok(A, B)``: ``composition(A, B)`` does not raise, ``size(R) == size(B)``,
    R is compatible with B, and ``R(i) == A(B(i))`` for every ``i < size(B)``."""
    A, B = pair
    assert brute.comp_ok(A, B)  # the strategy's promise
    R = composition(A, B)
    assert brute.size(R) == brute.size(B)
    assert brute.compatible(B.shape, R.shape)
    assert brute.image(R) == [brute.extended(A, x) for x in brute.image(B)]


@given(admissible_compositions())
def test_composition_distributes_over_modes_of_tractable_b(pair: tuple[Layout, Layout]) -> None:
    """For admissible (tractable) B: ``A ∘ (B0, B1, ...) == (A ∘ B0, A ∘ B1, ...)``."""
    A, B = pair
    assume(isinstance(B.shape, tuple))
    assert composition(A, B) == make_layout(*(composition(A, b) for b in B))


@given(layouts(), st.data())
def test_by_mode_composition_is_modewise(A: Layout, data: st.DataObject) -> None:
    """``composition(A, (t0, ..., tk)) == make_layout(*A[:-k-1], A[-k-1] ∘ t0, ..., A[-1] ∘ tk)``:
    the tuple lines up with A's trailing modes, an int n is ``n:1`` and None keeps the mode."""
    tiler = data.draw(by_mode_tilers(A))
    modes = list(A)
    off = len(modes) - len(tiler)
    expected = make_layout(*modes[:off], *(
        m if t is None else composition(m, _as_layout(t)) for m, t in zip(modes[off:], tiler)))
    assert composition(A, tiler) == expected


@st.composite
def _triples(draw: st.DrawFn) -> tuple[Layout, Layout, Layout]:
    A = draw(layouts())
    B = draw(sublayouts(A))
    C = draw(sublayouts(B))
    return A, B, C


@given(_triples())
def test_composition_is_associative(triple: tuple[Layout, Layout, Layout]) -> None:
    """When ``comp_ok`` holds for (A,B), (B,C), (A∘B,C) and (A,B∘C):
    ``(A∘B)∘C`` and ``A∘(B∘C)`` are both ``i -> A(B(C(i)))``."""
    A, B, C = triple
    AB, BC = composition(A, B), composition(B, C)
    assume(brute.comp_ok(AB, C) and brute.comp_ok(A, BC))
    expected = [brute.extended(A, brute.extended(B, x)) for x in brute.image(C)]
    assert brute.image(composition(AB, C)) == expected
    assert brute.image(composition(A, BC)) == expected


@pytest.mark.parametrize(("A", "B"), KNOWN_BUGS, ids=[f"{a}∘{b}" for a, b in KNOWN_BUGS])
def test_known_pycute_bug_inputs_raise_or_are_correct(A: Layout, B: Layout) -> None:
    """Each pycute bug example of the research notes (mirrored) raises or is correct."""
    check_raise_or_correct(A, B, "known-bugs")
