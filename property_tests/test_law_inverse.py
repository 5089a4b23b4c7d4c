"""Laws of right_inverse and left_inverse (research notes §2.10-11)."""

from __future__ import annotations

import brute
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import layouts, tractable_layouts

from layout import InverseError, Layout, LayoutError, left_inverse, right_inverse


def _largest_prefix(image: list[int]) -> int:
    """The largest n with ``range(n)`` inside ``image``."""
    have, n = set(image), 0
    while n in have:
        n += 1
    return n


@given(st.one_of(layouts(), tractable_layouts()))
def test_right_inverse_is_a_right_inverse(L: Layout) -> None:
    """For any L: ``L(R(i)) == i`` for every ``i < size(R)``, ``R = right_inverse(L)``."""
    R = right_inverse(L)
    img_l = brute.image(L)
    assert all(x < len(img_l) for x in brute.image(R))
    assert [img_l[x] for x in brute.image(R)] == list(range(brute.size(R)))


@given(st.one_of(layouts(), tractable_layouts(broadcast=False)))
def test_right_inverse_of_injective_layout_is_maximal(L: Layout) -> None:
    """For injective L: ``size(right_inverse(L))`` is the largest n with ``range(n) ⊆ image(L)``."""
    if not brute.injective(L):
        return
    assert brute.size(right_inverse(L)) == _largest_prefix(brute.image(L))


@given(layouts())
def test_right_inverse_skips_broadcast_modes(L: Layout) -> None:
    """Stride-0 modes do not block the right inverse (unlike pycute's ``1:0``): it is as
    large as for the layout without them, and still a right inverse."""
    moving = [(s, d) for s, d in brute.modes(L) if d > 0]
    img_l = brute.image(L)
    R = right_inverse(L)
    assert [img_l[x] for x in brute.image(R)] == list(range(brute.size(R)))
    if len(set(brute.image_of(moving))) == len(brute.image_of(moving)):
        assert brute.size(R) == _largest_prefix(img_l)


@given(tractable_layouts(broadcast=False), st.data())
def test_right_inverse_of_compact_layout_is_two_sided(L: Layout, data: st.DataObject) -> None:
    """For compact L: ``size(R) == size(L)`` and ``R(L(i)) == i`` as well as ``L(R(i)) == i``."""
    # make it compact: the tractable strategy with its gaps squeezed out
    moving = sorted((d, s) for s, d in brute.modes(L) if s > 1)
    cur, fixed = 1, {}
    for d, s in moving:
        fixed[d] = cur
        cur *= s
    C = Layout(L.shape, _map(L.stride, lambda d: fixed.get(d, d)))
    assert brute.compact(C)
    R = right_inverse(C)
    img_c, img_r = brute.image(C), brute.image(R)
    assert brute.size(R) == brute.size(C)
    assert [img_r[x] for x in img_c] == list(range(brute.size(C)))
    assert [img_c[x] for x in img_r] == list(range(brute.size(C)))


def _chain(L: Layout) -> bool:
    ms = sorted((d, s) for s, d in brute.nontrivial(L))
    return all(d1 % d0 == 0 and s0 * d0 <= d1 for (d0, s0), (d1, _) in zip(ms, ms[1:]))


def _map(t: object, f: object) -> object:
    if isinstance(t, int):
        return f(t)  # type: ignore[operator]
    return tuple(_map(x, f) for x in t)  # type: ignore[union-attr]


@given(tractable_layouts(broadcast=False))
def test_left_inverse_of_injective_tractable_layout(L: Layout) -> None:
    """For injective, tractable L: ``R(L(i)) == i`` for every ``i < size(L)``."""
    R = left_inverse(L)
    img_r = brute.image(R)
    assert all(x < len(img_r) for x in brute.image(L))
    assert [img_r[x] for x in brute.image(L)] == list(range(brute.size(L)))


@settings(max_examples=settings().max_examples * 2)
@given(st.one_of(layouts(), tractable_layouts()))
def test_left_inverse_raises_or_is_correct(L: Layout) -> None:
    """For any L: ``left_inverse(L)`` raises ``InverseError`` or returns R with ``R(L(i)) == i``
    for every i; it does not raise when L is injective and tractable, nor when it is
    injective and its moving modes form a divisibility chain (sorted by stride, each
    stride divides the next and each mode ends before the next starts)."""
    try:
        R = left_inverse(L)
    except LayoutError as e:
        assert isinstance(e, InverseError)
        assert not (brute.injective(L) and (brute.tractable(L) or _chain(L)))
        return
    img_r = brute.image(R)
    assert all(x < len(img_r) for x in brute.image(L))
    assert [img_r[x] for x in brute.image(L)] == list(range(brute.size(L)))
