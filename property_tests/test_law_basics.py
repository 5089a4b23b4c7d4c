"""Laws of the operations that need nothing but a layout's modes.

coalesce, filter, cosize, the predicates, ``same_function``, coordinates and
slicing — each against its brute-force definition (``brute.py``).
"""

from __future__ import annotations

from typing import Any

import brute
from hypothesis import given
from hypothesis import strategies as st
from strategies import layouts, shapes, slice_coords, tractable_layouts

from layout import (
    Layout,
    coalesce,
    crd2idx,
    filter,
    idx2crd,
    is_compact,
    is_injective,
    is_tractable,
    same_function,
    slice_and_offset,
)


@given(layouts())
def test_coalesce_keeps_size_and_image(L: Layout) -> None:
    """``size(coalesce(L)) == size(L)`` and ``coalesce(L)(i) == L(i)`` for every i."""
    C = coalesce(L)
    assert brute.size(C) == brute.size(L)
    assert brute.image(C) == brute.image(L)


@given(layouts())
def test_coalesce_is_flat_and_idempotent(L: Layout) -> None:
    """``depth(coalesce(L)) <= 1`` and ``coalesce(coalesce(L)) == coalesce(L)``."""
    C = coalesce(L)
    assert C.depth <= 1
    assert coalesce(C) == C


@given(layouts())
def test_coalesce_leaves_no_size_one_or_mergeable_modes(L: Layout) -> None:
    """``coalesce(L)`` has no size-1 mode unless it is ``1:0``, and no two adjacent
    modes ``s0:d0, s1:d1`` (row-major) with ``d0 == s1 * d1`` are left unmerged."""
    C = coalesce(L)
    ms = brute.modes(C)
    if C != Layout(1, 0):
        assert all(s > 1 for s, _ in ms)
    assert all(d0 != s1 * d1 for (_, d0), (s1, d1) in zip(ms, ms[1:]))


@given(layouts(), st.data())
def test_by_mode_coalesce_keeps_each_mode(L: Layout, data: st.DataObject) -> None:
    """``coalesce(L, profile)``: rank kept; modes the profile covers (the trailing
    ones) are coalesced as functions; the others are unchanged."""
    k = data.draw(st.integers(1, L.rank))
    profile = (1,) * k
    C = coalesce(L, profile)
    assert C.rank == L.rank
    for j, (m, c) in enumerate(zip(L, C)):
        if j < L.rank - k:
            assert c == m
        else:
            assert c == coalesce(m)
            assert brute.image(c) == brute.image(m)
    assert brute.image(C) == brute.image(L)


@given(layouts())
def test_filter_keeps_the_image_set(L: Layout) -> None:
    """``set(image(filter(L))) == set(image(L))``."""
    assert set(brute.image(filter(L))) == set(brute.image(L))


@given(layouts())
def test_filter_has_no_broadcast_modes_and_is_idempotent(L: Layout) -> None:
    """``filter(L)`` has no stride-0 mode unless it is ``1:0``, and
    ``filter(filter(L)) == filter(L)``."""
    F = filter(L)
    if F != Layout(1, 0):
        assert all(d > 0 for _, d in brute.modes(F))
    assert filter(F) == F


@given(layouts())
def test_cosize_is_max_image_plus_one(L: Layout) -> None:
    """``cosize(L) == max(image(L)) + 1``."""
    assert L.cosize == brute.cosize(L)


@given(layouts())
def test_size_is_product_of_shape(L: Layout) -> None:
    """``size(L)`` is the product of the shape, and ``len(list(L)) == rank(L)``."""
    assert L.size == brute.size(L)
    assert len(list(L)) == L.rank


@given(st.one_of(layouts(), tractable_layouts()))
def test_is_injective_matches_enumeration(L: Layout) -> None:
    """``is_injective(L)`` iff distinct indices give distinct offsets."""
    assert is_injective(L) == brute.injective(L)


@given(st.one_of(layouts(), tractable_layouts()))
def test_is_compact_matches_enumeration(L: Layout) -> None:
    """``is_compact(L)`` iff ``sorted(image(L)) == range(size(L))``."""
    assert is_compact(L) == brute.compact(L)


@given(st.one_of(layouts(), tractable_layouts()))
def test_is_tractable_matches_definition(L: Layout) -> None:
    """``is_tractable(L)`` iff, sorted by stride, each moving mode starts at a multiple of
    the previous mode's end."""
    assert is_tractable(L) == brute.tractable(L)


@given(st.one_of(layouts(max_size=64), tractable_layouts(max_size=64)),
       st.one_of(layouts(max_size=64), tractable_layouts(max_size=64)))
def test_same_function_matches_enumeration(a: Layout, b: Layout) -> None:
    """``same_function(a, b)`` iff equal sizes and ``a(i) == b(i)`` for every i."""
    expected = brute.size(a) == brute.size(b) and brute.image(a) == brute.image(b)
    assert same_function(a, b) == expected


@given(layouts())
def test_same_function_holds_for_the_coalesced_form(L: Layout) -> None:
    """A layout is the same function as its coalesced form (and as itself)."""
    assert same_function(L, coalesce(L))
    assert same_function(L, L)


@given(shapes(), st.data())
def test_crd2idx_idx2crd_round_trip(shape: Any, data: st.DataObject) -> None:
    """``crd2idx(idx2crd(i, S), S) == i`` and ``crd2idx(i, S) == i``; ``idx2crd`` is the
    row-major split."""
    i = data.draw(st.integers(0, brute.prod(shape) - 1))
    crd = idx2crd(i, shape)
    assert crd == brute.idx2crd(i, shape)
    assert crd2idx(crd, shape) == i
    assert crd2idx(i, shape) == i


@given(shapes())
def test_compact_layout_enumerates_its_indices(shape: Any) -> None:
    """``image(Layout(S)) == range(size(S))``: the default stride is row-major compact."""
    assert brute.image(Layout(shape)) == list(range(brute.prod(shape)))


@given(layouts(), st.data())
def test_evaluation_by_coordinate_matches_index(L: Layout, data: st.DataObject) -> None:
    """``L(idx2crd(i, shape)) == L(i)``, with the top-level modes also passed as arguments."""
    i = data.draw(st.integers(0, brute.size(L) - 1))
    crd = brute.idx2crd(i, L.shape)
    assert L(crd) == L(i) == brute.image(L)[i]
    if isinstance(crd, tuple) and len(crd) > 1:
        assert L(*crd) == L(i)


def _fill(crd: Any, sub: list[Any]) -> Any:
    """Replace the Nones of ``crd``, in order, by the entries of ``sub`` (consumed)."""
    if crd is None:
        return sub.pop(0)
    if isinstance(crd, tuple):
        return tuple(_fill(c, sub) for c in crd)
    return crd


@given(layouts(), st.data())
def test_slice_and_offset_law(L: Layout, data: st.DataObject) -> None:
    """``L(fill(crd, sub)) == off + sliced(sub)`` for every coordinate ``sub`` of the slice,
    where ``(sliced, off) = slice_and_offset(crd, L)``."""
    crd = data.draw(slice_coords(L.shape))
    sliced, off = slice_and_offset(crd, L)
    simg = brute.image(sliced)
    for j in range(brute.size(sliced)):
        sub = brute.idx2crd(j, sliced.shape)
        full = _fill(crd, list(sub))
        assert brute.crd2off(full, L.shape, L.stride) == off + simg[j]
