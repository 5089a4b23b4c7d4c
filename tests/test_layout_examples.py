"""Worked examples: the CuTe documentation and torch's ``_mesh_layout.py``, row-major.

CuTe's examples (``media/docs/cpp/cute/02_layout_algebra.md``) are column-major;
each is mirrored here by hand with ``rev`` (reverse the modes at every level), so
``A = (6,2):(8,2)`` in the docs reads ``(2,6):(2,8)`` here, and (tile, rest)
becomes (rest, tile).  Expected values are written out, never computed by the
package; where an example gives a function, it is also checked by enumeration.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from layout import (
    Layout,
    Tiler,
    blocked_product,
    coalesce,
    complement,
    composition,
    filter,
    is_compact,
    is_injective,
    is_tractable,
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


def image(L: Layout) -> list[int]:
    """``[L(i) for i in range(size)]`` by enumeration, row-major (last flat mode fastest)."""
    def flat(t: Any) -> list[int]:
        return [t] if isinstance(t, int) else [x for s in t for x in flat(s)]

    shape, stride = flat(L.shape), flat(L.stride)
    return [sum(c * d for c, d in zip(crd, stride))
            for crd in itertools.product(*(range(s) for s in shape))]


# ---- the Layout value ------------------------------------------------------------------------

def test_default_stride_is_row_major_compact() -> None:
    assert Layout((2, 4)).stride == (4, 1)
    assert Layout((2, (3, 4))).stride == (12, (4, 1))
    assert Layout(6).stride == 1


def test_str_prints_shape_colon_stride() -> None:
    assert str(Layout((2, 4))) == "(2,4):(4,1)"
    assert str(Layout((2, (2, 2)), (1, (4, 2)))) == "(2,(2,2)):(1,(4,2))"
    assert str(Layout(8, 2)) == "8:2"
    assert str(make_layout(Layout(3))) == "(3,):(1,)"


def test_queries_of_a_nested_layout() -> None:
    L = Layout((2, (2, 3)), (1, (12, 2)))
    assert (L.size, L.rank, L.depth) == (12, 2, 2)
    assert L.cosize == 1 + 12 + 4 + 1  # the largest offset, 1 + 12 + 2*2, plus one
    assert Layout(5, 3).depth == 0
    assert Layout((5,), (3,)).depth == 1


def test_evaluation_by_index_and_by_coordinate() -> None:
    L = Layout((2, (2, 3)), (1, (12, 2)))
    # index 7 = (1, 1) in (2, 6) row-major; 1 = (0, 1) in (2, 3)
    assert L(7) == 1 + 0 * 12 + 1 * 2
    assert L(1, 1) == L(7)
    assert L((1, (0, 1))) == L(7)
    assert image(L) == [L(i) for i in range(12)]


def test_modes_by_index_and_iteration() -> None:
    L = Layout((2, (2, 3)), (1, (12, 2)))
    assert L[0] == Layout(2, 1)
    assert L[1] == Layout((2, 3), (12, 2))
    assert L[-1] == L[1]
    assert list(L) == [L[0], L[1]]
    assert list(Layout(4, 2)) == [Layout(4, 2)]


def test_equality_and_hash_are_by_value() -> None:
    assert Layout((2, 4)) == Layout((2, 4), (4, 1))
    assert hash(Layout((2, 4))) == hash(Layout((2, 4), (4, 1)))
    assert Layout((2, 4)) != Layout(8)
    assert len({Layout((2, 4)), Layout((2, 4), (4, 1)), Layout(8)}) == 2


def test_make_layout_concatenates_modes() -> None:
    assert make_layout(Layout(2, 4), Layout((3, 2))) == Layout((2, (3, 2)), (4, (2, 1)))
    assert make_layout() == Layout((), ())


# ---- CuTe docs: coalesce -----------------------------------------------------------------------

def test_cute_doc_coalesce() -> None:
    # CuTe: coalesce((2,(1,6)):(1,(6,2))) == 12:1
    assert coalesce(Layout(((6, 1), 2), ((2, 6), 1))) == Layout(12, 1)


def test_cute_doc_by_mode_coalesce() -> None:
    # CuTe: coalesce((2,(1,6)):(1,(6,2)), Step<_1,_1>) == (2,6):(1,2)
    a = Layout(((6, 1), 2), ((2, 6), 1))
    assert coalesce(a, (1, 1)) == Layout((6, 2), (2, 1))
    assert coalesce(a, (1, 1)) == make_layout(coalesce(a[0]), coalesce(a[1]))


def test_cute_doc_coalesce_cases() -> None:
    """The four cases of the binary coalesce (row-major: the inner mode is the right one)."""
    assert coalesce(Layout((1, 4), (7, 3))) == Layout(4, 3)  # size-1 mode dropped
    assert coalesce(Layout((4, 1), (3, 7))) == Layout(4, 3)
    assert coalesce(Layout((3, 4), (8, 2))) == Layout(12, 2)  # outer stride = 4*2: merged
    assert coalesce(Layout((3, 4), (9, 2))) == Layout((3, 4), (9, 2))  # kept apart


def test_filter_drops_broadcast_modes() -> None:
    assert filter(Layout((2, 3, 4), (0, 4, 1))) == Layout(12, 1)
    assert filter(Layout((3, 2), (0, 0))) == Layout(1, 0)


# ---- CuTe docs: composition --------------------------------------------------------------------

def test_cute_doc_composition_worked_example() -> None:
    # CuTe: (6,2):(8,2) o (4,3):(3,1) == ((2,2),3):((24,2),8)
    A, B = Layout((2, 6), (2, 8)), Layout((3, 4), (1, 3))
    R = composition(A, B)
    assert R == Layout((3, (2, 2)), (8, (2, 24)))
    # the docs' table, R(i) = A(B(i)), read in row-major order
    assert sorted(image(R)) == [0, 2, 8, 10, 16, 18, 24, 26, 32, 34, 40, 42]
    assert image(R) == [image(A)[b] for b in image(B)]


def test_cute_doc_composition_reshape_into_a_matrix() -> None:
    # CuTe: 20:2 o (5,4):(4,1) == (5,4):(8,2)
    assert composition(Layout(20, 2), Layout((4, 5), (1, 4))) == Layout((4, 5), (2, 8))


def test_cute_doc_composition_column_major_reshape() -> None:
    # CuTe: (10,2):(16,4) o (5,4):(1,5) == (5,(2,2)):(16,(80,4))
    A, B = Layout((2, 10), (4, 16)), Layout((4, 5), (5, 1))
    R = composition(A, B)
    assert R == Layout(((2, 2), 5), ((4, 80), 16))
    assert image(R) == [image(A)[b] for b in image(B)]


def test_cute_doc_composition_divides_out_the_stride() -> None:
    # CuTe: (3,6,2,8):(w,x,y,z) o 16:9 == (1,2,2,4):(9w,3x,y,z); here w,x,y,z = 1,7,50,200
    A = Layout((8, 2, 6, 3), (200, 50, 7, 1))
    R = composition(A, Layout(16, 9))
    assert R == Layout((4, 2, 2), (200, 50, 21))
    assert image(R) == [image(A)[9 * i] for i in range(16)]


def test_cute_doc_by_mode_composition_with_a_tiler() -> None:
    # CuTe: (12,(4,8)):(59,(13,1)) o <3:4, 8:2> == (3,(2,4)):(236,(26,1))
    a = Layout(((8, 4), 12), ((1, 13), 59))
    R = composition(a, (Layout(8, 2), Layout(3, 4)))
    assert R == Layout(((4, 2), 3), ((1, 26), 236))
    assert R == make_layout(composition(a[0], Layout(8, 2)), composition(a[1], Layout(3, 4)))


@pytest.mark.parametrize(("tiler", "expected"), [
    (Layout(3, 2), "3:2"),            # a layout: i -> A(2i)
    (3, "3:1"),                       # an int n means n:1
    (None, "(4,6):(6,1)"),            # None leaves A alone
    ((2, 3), "(2,3):(6,1)"),          # by mode: 4:6 o 2:1 and 6:1 o 3:1
    ((None, 3), "(4,3):(6,1)"),       # by mode, the outer mode left alone
    ((3,), "(4,3):(6,1)"),            # a shorter tuple lines up with the trailing modes
])
def test_every_kind_of_tiler_composes(tiler: Tiler, expected: str) -> None:
    assert str(composition(Layout((4, 6)), tiler)) == expected


def test_cute_doc_by_mode_composition_with_a_shape() -> None:
    # CuTe: (12,(4,8)):(59,(13,1)) o (3, 8) == (3,(4,2)):(59,(13,1))
    a = Layout(((8, 4), 12), ((1, 13), 59))
    assert composition(a, (8, 3)) == Layout(((2, 4), 3), ((1, 13), 59))


def test_torch_doc_composition() -> None:
    # torch _FlatLayout.composition: (6,2):(2,1) o 3:2 == 3:2 (already row-major)
    assert composition(Layout((6, 2), (2, 1)), Layout(3, 2)) == Layout(3, 2)


def test_composition_with_none_is_the_identity() -> None:
    A = Layout((2, 3), (1, 4))
    assert composition(A, None) == A
    assert composition(A, (None, 3)) == A


# ---- CuTe docs: complement ---------------------------------------------------------------------

@pytest.mark.parametrize(("A", "expected"), [
    (Layout(4, 1), Layout(6, 4)),                           # CuTe: complement(4:1, 24) = 6:4
    (Layout(6, 4), Layout(4, 1)),                           # CuTe: complement(6:4, 24) = 4:1
    (Layout((6, 4), (4, 1)), Layout(1, 0)),                 # CuTe: ((4,6):(1,4), 24) = 1:0
    (Layout(4, 2), Layout((3, 2), (8, 1))),                 # CuTe: (4:2, 24) = (2,3):(1,8)
    (Layout((4, 2), (6, 1)), Layout(3, 2)),                 # CuTe: ((2,4):(1,6), 24) = 3:2
    (Layout((2, 2), (6, 1)), Layout((2, 3), (12, 2))),      # CuTe: ((2,2):(1,6), 24) = (3,2):(2,12)
], ids=str)
def test_cute_doc_complement(A: Layout, expected: Layout) -> None:
    R = complement(A, 24)
    assert R == expected
    together = image(make_layout(R, A))
    assert sorted(together) == list(range(24))


# ---- CuTe docs: divide -------------------------------------------------------------------------

def test_cute_doc_logical_divide_1d() -> None:
    # CuTe: (4,2,3):(2,1,8) / 4:2 == ((2,2),(2,3)):((4,1),(2,8)), with B* = (2,3):(1,8)
    A, B = Layout((3, 2, 4), (8, 1, 2)), Layout(4, 2)
    assert complement(B, 24) == Layout((3, 2), (8, 1))
    ld = logical_divide(A, B)
    assert ld == Layout(((3, 2), (2, 2)), ((8, 2), (1, 4)))  # (rest, tile)
    assert ld[1] == composition(A, B)


def test_cute_doc_logical_divide_2d() -> None:
    # CuTe: (9,(4,8)):(59,(13,1)) / <3:3, (2,4):(1,8)>; the tiles are (3,(2,4)):(177,(13,2))
    A = Layout(((8, 4), 9), ((1, 13), 59))
    tiler = (Layout((4, 2), (8, 1)), Layout(3, 3))
    ld = logical_divide(A, tiler)
    assert ld == Layout((((2, 2), (4, 2)), (3, 3)), (((1, 26), (2, 13)), (59, 177)))
    assert make_layout(ld[0][1], ld[1][1]) == Layout(((4, 2), 3), ((2, 13), 177))


def test_cute_doc_zipped_and_tiled_divide() -> None:
    # CuTe: zipped_divide has shape ((3,8),(3,4)) = ((TileM,TileN),(RestM,RestN)) and
    # layout<0>(zipped_divide(a, b)) == composition(a, b); mirrored: ((RestN,RestM),(TileN,TileM))
    # of sizes ((4,3),(8,3)), and the tile mode is the last one
    A = Layout(((8, 4), 9), ((1, 13), 59))
    tiler = (Layout((4, 2), (8, 1)), Layout(3, 3))
    zd = zipped_divide(A, tiler)
    assert zd == Layout((((2, 2), 3), ((4, 2), 3)), (((1, 26), 59), ((2, 13), 177)))
    assert zd[1] == composition(A, tiler)
    assert tiled_divide(A, tiler) == Layout(((2, 2), 3, ((4, 2), 3)),
                                            ((1, 26), 59, ((2, 13), 177)))


def test_zipped_divide_keeps_uncovered_modes_in_the_rest() -> None:
    # (L, M, N) / <TileM, TileN>: ((L, RestM, RestN), (TileM, TileN)), row-major
    A = Layout((2, 4, 6))
    zd = zipped_divide(A, (2, 3))
    assert zd == Layout(((2, 2, 2), (2, 3)), ((24, 12, 3), (6, 1)))


# ---- CuTe docs: product ------------------------------------------------------------------------

def test_cute_doc_logical_product_1d() -> None:
    # CuTe: (2,2):(4,1) x 6:1 == ((2,2),(2,3)):((4,1),(2,8)), with A* = (2,3):(2,8)
    A = Layout((2, 2), (1, 4))
    assert complement(A, 24) == Layout((3, 2), (8, 2))
    lp = logical_product(A, Layout(6))
    assert lp == Layout(((3, 2), (2, 2)), ((8, 2), (1, 4)))  # (repetition, A)
    assert sorted(image(lp)) == list(range(24))


def test_logical_product_with_an_int_means_n_colon_1() -> None:
    # pycute's logical_product(4:1, 3) runs a divide and gives (3,2):(1,3); CuTe means (4,3):(1,4)
    assert logical_product(Layout(4), 3) == Layout((3, 4), (4, 1))


def test_cute_doc_blocked_product() -> None:
    # CuTe: a 2x5 row-major block (2,5):(5,1) tiled over a 3x4 column-major (3,4):(1,3).
    # By the definition: complement(block, 120) = 12:10; 12:10 o (3,4):(1,3) = (3,4):(10,30);
    # mode k is coalesce(block_k, rep_k): (2,3):(5,10) -> 6:5 and (5,4):(1,30).
    block, tiles = Layout((5, 2), (1, 5)), Layout((4, 3), (3, 1))
    assert blocked_product(block, tiles) == Layout(((4, 5), 6), ((30, 1), 5))


def test_cute_doc_raked_product() -> None:
    # Same operands; mode k is coalesce(rep_k, block_k): (3,2):(10,5) and (4,5):(30,1).
    block, tiles = Layout((5, 2), (1, 5)), Layout((4, 3), (3, 1))
    assert raked_product(block, tiles) == Layout(((5, 4), (2, 3)), ((1, 30), (5, 10)))


def test_row_major_blocked_and_raked_products() -> None:
    # A 2x2 block over 2x3 tiles: blocked keeps each 2x2 block contiguous, raked interleaves
    B = blocked_product(Layout((2, 2)), Layout((2, 3)))
    assert B == Layout(((2, 2), (3, 2)), ((12, 2), (4, 1)))
    assert [B(0, j) for j in range(6)] == [0, 1, 4, 5, 8, 9]
    R = raked_product(Layout((2, 2)), Layout((2, 3)))
    assert R == Layout(((2, 2), (2, 3)), ((2, 12), (1, 4)))
    assert [R(0, j) for j in range(6)] == [0, 4, 8, 1, 5, 9]


def test_zipped_and_tiled_product() -> None:
    # (M, N) x <TileM, TileN>: ((repM, repN), (M, N)) and (repM, repN, (M, N)).  By mode,
    # each 1-D product fills its own mode's gaps first: 2:2 x 2 repeats at 2:1 (complement
    # of 2:2 in 4), and 2:1 x 3 repeats at 3:2 (complement of 2:1 in 6).
    A = Layout((2, 2))
    assert zipped_product(A, (2, 3)) == Layout(((2, 3), (2, 2)), ((1, 2), (2, 1)))
    assert tiled_product(A, (2, 3)) == Layout((2, 3, (2, 2)), (1, 2, (2, 1)))


# ---- inverses, slicing, predicates -------------------------------------------------------------

def test_right_inverse_examples() -> None:
    assert right_inverse(Layout((4, 2), (1, 4))) == Layout((2, 4), (1, 2))
    # pycute returns 1:0 as soon as there is a stride-0 mode; it is skipped here
    assert right_inverse(Layout((2, 4), (0, 1))) == Layout(4, 1)
    assert right_inverse(Layout(4, 2)) == Layout(1, 0)


def test_left_inverse_example() -> None:
    L = Layout((2, 3), (1, 4))  # offsets 0,4,8,1,5,9
    R = left_inverse(L)
    assert [R(L(i)) for i in range(6)] == [0, 1, 2, 3, 4, 5]


def test_slice_and_offset_example() -> None:
    L = Layout((2, (3, 4)), (12, (4, 1)))
    sub, off = slice_and_offset((1, (None, 2)), L)
    assert (sub, off) == (Layout((3,), (4,)), 12 + 2)
    sub, off = slice_and_offset((None, (1, None)), L)
    assert (sub, off) == (Layout((2, 4), (12, 1)), 4)


def test_predicates_on_torch_docstring_layouts() -> None:
    # torch check_orthogonal: (2,3):(6,1) has no overlap; (2,3):(2,1) and (4,2):(1,1) overlap
    assert is_injective(Layout((2, 3), (6, 1))) and is_tractable(Layout((2, 3), (6, 1)))
    assert not is_injective(Layout((2, 3), (2, 1)))
    assert not is_injective(Layout((4, 2), (1, 1)))
    # injective but not tractable (torch's check_orthogonal says False here too)
    assert is_injective(Layout((2, 2), (3, 1))) and not is_tractable(Layout((2, 2), (3, 1)))
    assert is_compact(Layout((2, 3), (1, 2))) and not is_compact(Layout((2, 3), (6, 1)))


# ---- torch 2.13 torch/distributed/_mesh_layout.py docstrings -----------------------------------

def test_torch_doc_all_ranks_from_zero() -> None:
    # Example A: sizes (2,3), strides (3,1) -> [0..5]; Example B: strides (1,2) -> [0,2,4,1,3,5]
    assert image(Layout((2, 3), (3, 1))) == [0, 1, 2, 3, 4, 5]
    L = Layout((2, 3), (1, 2))
    assert [L(i) for i in range(6)] == [0, 2, 4, 1, 3, 5]


def test_torch_doc_complement() -> None:
    # torch: complement of 4:1 in world 8 "fills in the missing factor" 8 / 4 = 2 (the
    # docstring writes "(2:1)" for it); as a layout the complement is 2:4, and
    # (complement, A) = (2,4):(4,1) is the whole 8-rank mesh
    C = complement(Layout(4, 1), 8)
    assert C == Layout(2, 4)
    assert make_layout(C, Layout(4, 1)) == Layout((2, 4), (4, 1))
    assert image(make_layout(C, Layout(4, 1))) == list(range(8))


def test_torch_doc_global_ranks() -> None:
    # world_size 16, layout 4:1: offsets [0,4,8,12], groups [[0..3],[4..7],[8..11],[12..15]]
    L = Layout(4, 1)
    C = complement(L, 16)
    assert C == Layout(4, 4)
    groups = [[C(j) + L(i) for i in range(L.size)] for j in range(C.size)]
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


@pytest.mark.parametrize(("rank_map", "expected"), [
    ([0, 1, 2, 3], [[0, 2], [1, 3]]),          # Case 1: mesh [[0,1],[2,3]], layout 2:2
    ([10, 20, 30, 40], [[10, 30], [20, 40]]),  # Case 2: mesh [[10,20],[30,40]]
])
def test_torch_doc_remap_to_tensor(rank_map: list[int], expected: list[list[int]]) -> None:
    # remap_to_tensor: one row per complement offset, each row the layout's ranks from it
    L = Layout(2, 2)
    C = complement(L, len(rank_map))
    assert C == Layout(2, 1)
    assert [[rank_map[C(j) + L(i)] for i in range(2)] for j in range(2)] == expected
