"""Worked examples of mesh views, with expected values derived by hand.

Conventions (torch's): ``from_shape`` is row-major, so in a (dp, cp, tp) =
(2, 2, 2) mesh rank ``r = 4*dp + 2*cp + tp``.  A group along a dim varies that
dim with the other coordinates fixed, in coordinate order.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle
import pickletools
import re

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout import Layout
from mesh import Dim, MeshView, RankMap, RankNotInMeshError, concatenate, render


@pytest.fixture
def mesh3() -> MeshView:
    return MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))


# ---- the 3-D example ------------------------------------------------------------------------
def test_shape_names_and_sizes(mesh3: MeshView) -> None:
    assert mesh3.shape == (2, 2, 2)
    assert mesh3.names == ("dp", "cp", "tp")
    assert mesh3.ndim == 3
    assert mesh3.size() == 8
    assert mesh3.size("cp") == 2 and mesh3.size(-1) == 2


def test_rank_5_coordinate_and_groups(mesh3: MeshView) -> None:
    assert mesh3.coordinate(5) == (1, 0, 1)
    assert mesh3.group(5, "tp") == (4, 5)
    assert mesh3.group(5, "dp") == (1, 5)
    assert mesh3.group(5, "cp") == (5, 7)
    assert [mesh3.local_rank(5, d) for d in ("dp", "cp", "tp")] == [1, 0, 1]


def test_dims_by_index_match_dims_by_name(mesh3: MeshView) -> None:
    assert mesh3.group(5, 0) == mesh3.group(5, -3) == (1, 5)
    assert mesh3.local_rank(6, 1) == 1


def test_groups_list_every_group_once(mesh3: MeshView) -> None:
    assert set(mesh3.groups("tp")) == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert set(mesh3.groups("dp")) == {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert set(mesh3.groups("cp")) == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert all(len(mesh3.groups(d)) == 4 for d in mesh3.names)


def test_an_instance_starts_at_its_instance_offset() -> None:
    """``instance(rank)`` is ``ranks(instance_offset(rank) + layout(x))`` over the indices
    ``x``; the offsets of the instances of ``view["dp", "tp"]`` of a (dp, cp, tp) = (2, 2, 2)
    mesh over the explicit universe 7, 6, ..., 0 are 0 (cp=0) and 2 (cp=1)."""
    world = MeshView(Layout((2, 2, 2)), ("dp", "cp", "tp"), RankMap.explicit(range(7, -1, -1)))
    view = world["dp", "tp"]
    assert [view.instance_offset(r) for r in range(8)] == [2, 2, 0, 0, 2, 2, 0, 0]
    for r in range(8):
        start = view.instance_offset(r)
        flat = tuple(world.ranks(start + view.layout(x)) for x in range(view.size()))
        assert flat == tuple(itertools.chain.from_iterable(view.instance(r)))  # type: ignore[arg-type]
    with pytest.raises(RankNotInMeshError, match="rank 8"):
        view.instance_offset(8)


@pytest.mark.parametrize("dim", ["tp", 2, -1])
def test_a_dim_is_named_or_indexed_from_either_end(mesh3: MeshView, dim: Dim) -> None:
    assert mesh3.index(dim) == 2 and mesh3.size(dim) == 2
    assert mesh3.group(5, dim) == (4, 5) and mesh3.local_rank(5, dim) == 1


def test_a_full_view_has_one_instance(mesh3: MeshView) -> None:
    whole = (((0, 1), (2, 3)), ((4, 5), (6, 7)))
    assert mesh3.instance(5) == whole
    assert mesh3.instances() == (whole,)


def test_rank_outside_the_universe_has_no_coordinate(mesh3: MeshView) -> None:
    assert mesh3.coordinate(8) is None
    assert mesh3.coordinate(-1) is None


def test_short_repr(mesh3: MeshView) -> None:
    assert repr(mesh3) == "MeshView(dp=2, cp=2, tp=2)"


# ---- slicing --------------------------------------------------------------------------------
def test_slicing_one_dim_gives_the_family_of_its_groups(mesh3: MeshView) -> None:
    tp = mesh3["tp"]
    assert tp.shape == (2,) and tp.names == ("tp",)
    assert set(tp.instances()) == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert tp.instance(5) == (4, 5)
    assert tp.coordinate(5) == (1,)


def test_slicing_two_dims_fixes_the_third(mesh3: MeshView) -> None:
    dp_tp = mesh3["dp", "tp"]
    assert set(dp_tp.instances()) == {((0, 1), (4, 5)), ((2, 3), (6, 7))}
    assert dp_tp.instance(6) == ((2, 3), (6, 7))
    assert dp_tp.coordinate(6) == (1, 0)
    assert dp_tp.group(6, "dp") == (2, 6) and dp_tp.group(6, "tp") == (6, 7)


def test_a_reordered_selection_is_a_transpose(mesh3: MeshView) -> None:
    tp_dp = mesh3["tp", "dp"]
    assert tp_dp.names == ("tp", "dp")
    assert tp_dp.instance(5) == ((0, 4), (1, 5))
    assert tp_dp.coordinate(5) == (1, 1)
    assert tp_dp.group(5, "dp") == (1, 5)


def test_selection_by_index_equals_selection_by_name(mesh3: MeshView) -> None:
    assert mesh3[2, 0] == mesh3["tp", "dp"]
    assert mesh3[-1] == mesh3["tp"]


def test_selecting_every_dim_in_order_is_the_same_view(mesh3: MeshView) -> None:
    assert mesh3["dp", "cp", "tp"] == mesh3


def test_explicit_rank_tensor_groups() -> None:
    view = MeshView.from_ranks([[7, 2, 5], [0, 3, 9]], ("dp", "tp"))
    assert view.coordinate(3) == (1, 1)
    assert view.group(3, "dp") == (2, 3)
    assert view.group(3, "tp") == (0, 3, 9)
    assert view.coordinate(1) is None
    assert set(view["dp"].instances()) == {(7, 0), (2, 3), (5, 9)}


def test_explicit_ranks_equal_to_range_are_the_identity_universe() -> None:
    assert MeshView.from_ranks([[0, 1], [2, 3]]) == MeshView.from_shape((2, 2))


def test_from_ranks_takes_tuples_and_array_likes() -> None:
    class ArrayLike:
        def tolist(self) -> list[list[int]]:
            return [[3, 1], [0, 2]]

    expected = MeshView.from_ranks([[3, 1], [0, 2]], ("a", "b"))
    assert MeshView.from_ranks(((3, 1), (0, 2)), ("a", "b")) == expected
    assert MeshView.from_ranks(ArrayLike(), ("a", "b")) == expected
    assert expected.group(0, "a") == (3, 0)


@pytest.mark.parametrize("module", ["numpy", "torch"])
def test_from_ranks_takes_numpy_arrays_and_torch_tensors(module: str) -> None:
    lib = pytest.importorskip(module)
    ranks = lib.tensor([[3, 1], [0, 2]]) if module == "torch" else lib.array([[3, 1], [0, 2]])
    view = MeshView.from_ranks(ranks, ("a", "b"))
    assert view == MeshView.from_ranks([[3, 1], [0, 2]], ("a", "b"))
    assert view.group(0, "b") == (0, 2)
    assert all(type(r) is int for r in view.group(0, "b"))


# ---- flatten --------------------------------------------------------------------------------
def test_flatten_adjacent_dims(mesh3: MeshView) -> None:
    flat = mesh3.flatten(("dp", "cp"))
    assert flat.names == ("dp_cp", "tp") and flat.shape == (4, 2)
    assert flat.group(5, "dp_cp") == (1, 3, 5, 7)
    assert flat.coordinate(5) == (2, 1)
    assert flat.group(5, "tp") == (4, 5)


def test_flatten_non_adjacent_dims_is_placed_at_the_first(mesh3: MeshView) -> None:
    flat = mesh3.flatten(("dp", "tp"))
    assert flat.names == ("dp_tp", "cp") and flat.shape == (4, 2)
    assert flat.group(5, "dp_tp") == (0, 1, 4, 5)
    assert flat.coordinate(5) == (3, 0)
    assert flat.group(5, "cp") == (5, 7)


def test_flatten_order_is_the_listed_order(mesh3: MeshView) -> None:
    # tp outer, dp inner; the merged dim sits where tp (the first listed) was.
    flat = mesh3.flatten(("tp", "dp"))
    assert flat.names == ("cp", "tp_dp")
    assert flat.group(5, "tp_dp") == (0, 4, 1, 5)
    assert flat.coordinate(5) == (0, 3)


def test_flatten_everything_by_default(mesh3: MeshView) -> None:
    flat = mesh3.flatten()
    assert flat.names == ("dp_cp_tp",) and flat.shape == (8,)
    assert flat.group(5, "dp_cp_tp") == tuple(range(8))


def test_flatten_with_a_name_and_a_single_dim(mesh3: MeshView) -> None:
    batch = mesh3.flatten(["cp", "dp"], name="batch")
    assert batch.names == ("batch", "tp")
    assert batch.group(5, "batch") == (1, 5, 3, 7)
    assert mesh3.flatten("cp", name="context").names == ("dp", "context", "tp")


def test_flattened_dim_can_be_sliced_and_flattened_again(mesh3: MeshView) -> None:
    flat = mesh3.flatten(("dp", "tp"), "dt")
    sliced = flat["dt"]
    assert set(sliced.instances()) == {(0, 1, 4, 5), (2, 3, 6, 7)}
    again = flat.flatten(("cp", "dt"))
    assert again.group(0, "cp_dt") == (0, 1, 4, 5, 2, 3, 6, 7)


# ---- unflatten ------------------------------------------------------------------------------
def test_unflatten_the_world() -> None:
    world = MeshView.from_shape(8, ("world",))
    mesh = world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp"))
    assert mesh.group(5, "dp") == (1, 5)
    assert mesh.group(5, "ep") == (5, 7)
    assert mesh.group(5, "ep_tp") == (4, 5)
    assert mesh == MeshView.from_shape((2, 2, 2), ("dp", "ep", "ep_tp"))


def test_unflatten_a_non_contiguous_flattened_dim_back(mesh3: MeshView) -> None:
    flat = mesh3.flatten(("dp", "tp"))
    split = flat.unflatten("dp_tp", (2, 2), ("x", "y"))
    assert split.names == ("x", "y", "cp")
    assert split.group(5, "x") == (1, 5) and split.group(5, "y") == (4, 5)
    assert split == mesh3["dp", "tp", "cp"].rename({"dp": "x", "tp": "y"})


def test_unflatten_cuts_a_piece_of_a_non_contiguous_dim() -> None:
    # (dp, cp, tp) = (2, 3, 4): rank = 12*dp + 4*cp + tp.  flatten(dp, tp) runs over
    # the offsets 0,1,2,3,12,13,14,15; splitting it as (4, 2) makes x = (dp, tp // 2)
    # and y = tp % 2.
    mesh = MeshView.from_shape((2, 3, 4), ("dp", "cp", "tp"))
    split = mesh.flatten(("dp", "tp")).unflatten(0, (4, 2), ("x", "y"))
    assert split.names == ("x", "y", "cp") and split.shape == (4, 2, 3)
    assert split.group(0, "x") == (0, 2, 12, 14)
    assert split.group(14, "x") == (0, 2, 12, 14)
    assert split.group(14, "y") == (14, 15)
    assert split.group(14, "cp") == (14, 18, 22)
    assert split.coordinate(14) == (3, 0, 0)
    assert split.coordinate(19) == (3, 1, 1)  # dp 1, cp 1, tp 3 -> x = 2*1 + 3//2, y = 3%2


def test_unflatten_by_index_with_size_1_factors(mesh3: MeshView) -> None:
    split = mesh3.flatten(("dp", "tp")).unflatten(0, (1, 4, 1), ("a", "b", "c"))
    assert split.shape == (1, 4, 1, 2)
    assert split.group(5, "a") == (5,) and split.group(5, "c") == (5,)
    assert split.group(5, "b") == (0, 1, 4, 5)
    assert split.coordinate(5) == (0, 3, 0, 0)


# ---- size-1 dims (pytorch#169381) -----------------------------------------------------------
def test_all_size_1_dims_flatten_then_select_around_the_flattened_dim() -> None:
    mesh = MeshView.from_shape((1, 1, 1, 1), ("d1", "d2", "d3", "d4"))
    flat = mesh.flatten(("d2", "d3"), "d23")
    picked = flat["d1", "d23", "d4"]
    assert picked.shape == (1, 1, 1)
    assert picked.instance(0) == (((0,),),)
    assert [picked.group(0, d) for d in picked.names] == [(0,), (0,), (0,)]


def test_size_1_dims_between_real_dims() -> None:
    mesh = MeshView.from_shape((2, 1, 1, 4), ("d1", "d2", "d3", "d4"))
    picked = mesh.flatten(("d2", "d3"), "d23")["d1", "d23", "d4"]
    assert picked.coordinate(6) == (1, 0, 2)
    assert picked.group(6, "d1") == (2, 6)
    assert picked.group(6, "d23") == (6,)
    assert picked.group(6, "d4") == (4, 5, 6, 7)


def test_size_1_dims_slice_into_singleton_groups() -> None:
    mesh = MeshView.from_shape((1, 4, 1), ("pp", "dp", "tp"))
    assert mesh.coordinate(2) == (0, 2, 0)
    assert mesh.group(2, "pp") == (2,) and mesh.group(2, "tp") == (2,)
    assert mesh.group(2, "dp") == (0, 1, 2, 3)
    assert set(mesh["tp"].instances()) == {(0,), (1,), (2,), (3,)}
    assert set(mesh["pp", "tp"].instances()) == {((r,),) for r in range(4)}


def test_a_one_rank_universe() -> None:
    one = MeshView.from_shape(1, ("only",))
    assert one.coordinate(0) == (0,) and one.group(0, "only") == (0,)
    assert one.coordinate(1) is None
    assert one.unflatten("only", (1, 1), ("a", "b")).instance(0) == ((0,),)


# ---- transpose and rename -------------------------------------------------------------------
def test_transpose_reverses_by_default(mesh3: MeshView) -> None:
    t = mesh3.transpose()
    assert t.names == ("tp", "cp", "dp")
    assert t.coordinate(5) == (1, 0, 1)
    assert t.coordinate(4) == (0, 0, 1)
    assert t.instance(0) == (((0, 4), (2, 6)), ((1, 5), (3, 7)))


def test_transpose_to_a_given_order(mesh3: MeshView) -> None:
    t = mesh3.transpose("cp", "tp", "dp")
    assert t.names == ("cp", "tp", "dp")
    assert t.coordinate(6) == (1, 0, 1)
    assert t.group(6, "dp") == (2, 6)
    assert t.transpose("dp", "cp", "tp") == mesh3


def test_rename_keeps_groups(mesh3: MeshView) -> None:
    r = mesh3.rename({"dp": "data", 2: "tensor"})
    assert r.names == ("data", "cp", "tensor")
    assert r.group(5, "tensor") == (4, 5) and r.group(5, "data") == (1, 5)


# ---- concatenate ----------------------------------------------------------------------------
def test_concatenate_selections_of_one_view(mesh3: MeshView) -> None:
    joined = concatenate([mesh3["dp"], mesh3["tp"]])
    assert joined.names == ("dp", "tp")
    assert joined.group(5, "tp") == (4, 5) and joined.group(5, "dp") == (1, 5)
    assert joined == mesh3["dp", "tp"]


def test_concatenate_views_from_different_derivations_of_one_universe(
        mesh3: MeshView) -> None:
    world = MeshView.from_shape(8, ("world",))
    outer = world.unflatten("world", (2, 4), ("a", "b"))["a"]
    joined = concatenate([outer, mesh3["tp"]])
    assert joined.group(5, "a") == (1, 5) and joined.group(5, "tp") == (4, 5)
    assert set(joined.instances()) == {((0, 1), (4, 5)), ((2, 3), (6, 7))}


# ---- value semantics ------------------------------------------------------------------------
def test_two_paths_to_one_view_are_equal_with_equal_hashes(mesh3: MeshView) -> None:
    paths = [
        MeshView.from_shape(8, ("w",)).unflatten("w", (2, 2, 2), ("dp", "cp", "tp")),
        mesh3.transpose().transpose(),
        concatenate([mesh3["dp"], mesh3["cp", "tp"]]),
        mesh3.flatten(("dp", "tp"), "x").unflatten("x", (2, 2), ("dp", "tp"))["dp", "cp", "tp"],
        MeshView.from_ranks([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], ("dp", "cp", "tp")),
    ]
    for view in paths:
        assert view == mesh3
        assert hash(view) == hash(mesh3)
    assert len({mesh3, *paths}) == 1


def test_views_differing_in_names_layout_or_universe_are_not_equal(mesh3: MeshView) -> None:
    assert mesh3 != mesh3.rename({"dp": "x"})
    assert mesh3 != mesh3.transpose()
    assert mesh3["tp"] != mesh3["cp"].rename({"cp": "tp"})
    assert mesh3 != MeshView.from_ranks([[[1, 0], [2, 3]], [[4, 5], [6, 7]]],
                                        ("dp", "cp", "tp"))
    assert mesh3["tp"] != MeshView.from_shape(2, ("tp",))  # a 2-rank universe, not 8


def test_views_are_immutable(mesh3: MeshView) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        mesh3.names = ("a", "b", "c")  # type: ignore[misc]


def test_to_dict_is_plain_data() -> None:
    assert MeshView.from_shape((2, 2), ("dp", "tp")).to_dict() == {
        "version": 1,
        "layout": {"shape": [2, 2], "stride": [2, 1]},
        "names": ["dp", "tp"],
        "ranks": {"size": 4},
    }
    assert MeshView.from_ranks([3, 1, 0, 2], ("w",)).to_dict()["ranks"] == {"ranks": [3, 1, 0, 2]}


@pytest.mark.parametrize("make", [
    lambda m: m,
    lambda m: m["tp", "dp"],
    lambda m: m.flatten(("dp", "tp")),
    lambda m: m.flatten(("tp", "dp")).unflatten(1, (2, 1, 2), ("a", "b", "c")),
    lambda m: MeshView.from_ranks([[5, 3, 11], [0, 8, 2]], ("x", "y"))["y"],
])
def test_to_dict_from_dict_round_trips_through_json(mesh3: MeshView, make: object) -> None:
    view = make(mesh3)  # type: ignore[operator]
    back = MeshView.from_dict(json.loads(json.dumps(view.to_dict())))
    assert back == view and hash(back) == hash(view)
    assert [back.group(r, d) for r in (0, 5) for d in back.names] == \
        [view.group(r, d) for r in (0, 5) for d in view.names]


def _pickle_globals(data: bytes) -> set[str]:
    """The module paths of the globals a pickle loads (its only non-data content)."""
    strings: list[str] = []
    found = set()
    for op, arg, _ in pickletools.genops(data):
        if isinstance(arg, str):
            strings.append(arg)
        if op.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
        elif op.name == "GLOBAL":
            found.add(str(arg).replace(" ", "."))
    return found


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_stores_only_plain_data(mesh3: MeshView, protocol: int) -> None:
    view = mesh3.flatten(("dp", "tp"))
    view.group(5, "cp")  # fill the lazy caches: they must not be pickled
    data = pickle.dumps(view, protocol=protocol)
    assert pickle.loads(data) == view
    fresh = pickle.dumps(MeshView.from_dict(view.to_dict()), protocol=protocol)
    assert data == fresh
    for word in (b"process", b"group", b"Group", b"torch", b"backend", b"dist"):
        assert word not in data
    # Only the constructor to call (a mesh class, reached through getattr); the rest is data.
    allowed = {"builtins.getattr", "__builtin__.getattr"}
    assert all(g in allowed or g.startswith("mesh.") for g in _pickle_globals(data)), \
        _pickle_globals(data)


def test_pickled_explicit_universe_round_trips() -> None:
    view = MeshView.from_ranks([[9, 4], [1, 6]], ("dp", "tp"))
    back = pickle.loads(pickle.dumps(view))
    assert back == view and back.ranks == RankMap.explicit([9, 4, 1, 6])
    assert back.group(1, "tp") == (1, 6)


# ---- render ---------------------------------------------------------------------------------
def _marks(text: str) -> tuple[list[int], list[int], list[int]]:
    """(ranks shown as [r], as (r), and bare) in the grid lines of a rendering."""
    grid = "\n".join(text.splitlines()[1:-1])
    here = [int(x) for x in re.findall(r"\[(\d+)\]", grid)]
    group = [int(x) for x in re.findall(r"\((\d+)\)", grid)]
    bare = [int(x) for x in re.findall(r"(?<![\[(\d=])(\d+)(?![\])\d])", grid)]
    return sorted(here), sorted(group), sorted(bare)


def test_render_1d_marks_the_rank_and_its_group() -> None:
    tp = MeshView.from_shape((2, 4), ("dp", "tp"))["tp"]
    text = render(tp, 5)
    assert _marks(text) == ([5], [4, 6, 7], [])
    assert "rank 5:" in text.splitlines()[-1]


def test_render_2d_leaves_ranks_outside_the_groups_unmarked() -> None:
    text = render(MeshView.from_shape((2, 4), ("dp", "tp")), 5)
    assert _marks(text) == ([5], [1, 4, 6, 7], [0, 2, 3])
    assert "tp=3" in text and "dp=1" in text


def test_render_2d_draws_the_instance_of_the_rank(mesh3: MeshView) -> None:
    # rank 6 is in the cp=1 instance ((2, 3), (6, 7)) of view["dp", "tp"].
    assert _marks(render(mesh3["dp", "tp"], 6)) == ([6], [2, 7], [3])


def test_render_3d_as_panels(mesh3: MeshView) -> None:
    text = render(mesh3, 5)
    assert _marks(text) == ([5], [1, 4, 7], [0, 2, 3, 6])
    assert "dp=0" in text and "dp=1" in text
    legend = text.splitlines()[-1]
    assert "(4, 5)" in legend and "(1, 5)" in legend and "(5, 7)" in legend


def test_render_without_a_rank_marks_nothing() -> None:
    text = render(MeshView.from_ranks([[7, 2], [0, 3]], ("a", "b")))
    lines = text.splitlines()
    grid = "\n".join(lines[1:])
    assert "[" not in grid and "(" not in grid
    bare = sorted(int(x) for x in re.findall(r"(?<![\[(\d=])(\d+)(?![\])\d])", grid))
    assert bare == [0, 2, 3, 7]


def test_the_method_render_is_a_deprecated_alias_of_mesh_render(mesh3: MeshView) -> None:
    """``MeshView.render`` moved to ``mesh.render(view, rank)`` without a word in the last
    release: it works again for one release, warning with the new name."""
    with pytest.warns(DeprecationWarning, match=re.escape("use mesh.render(view, rank)")):
        text = mesh3.render(5, width=60)
    assert text == render(mesh3, 5, width=60)
    with pytest.warns(DeprecationWarning):
        assert mesh3["tp"].render() == render(mesh3["tp"])


def test_render_keeps_the_3d_picture(mesh3: MeshView) -> None:
    assert render(mesh3, 5) == "\n".join([
        "MeshView(dp=2, cp=2, tp=2), the instance of rank 5",
        "dp=0             dp=1",
        "     tp=0 tp=1        tp=0 tp=1",
        "cp=0    0  (1)   cp=0  (4)  [5]",
        "cp=1    2    3   cp=1    6  (7)",
        "rank 5: dp group (1, 5); cp group (5, 7); tp group (4, 5)"])


def _cells(text: str, view: MeshView) -> dict[tuple[int, ...], str]:
    """Every cell a rendering shows: its coordinate in the view, and its text (``[5]``, ``(5)``
    or ``5``).  Read back from the text alone: panel titles, column headers, row labels."""
    lines = text.splitlines()
    nd, names = view.ndim, view.names
    first = re.compile(rf"{re.escape(names[0])}=0( |$)" if nd >= 3
                       else rf"\s+{re.escape(names[-1])}=0( |$)")
    start = next(i for i, x in enumerate(lines) if first.match(x))  # after the (wrapped) header
    end = next((i for i, x in enumerate(lines) if x.startswith("rank ")), len(lines))
    out: dict[tuple[int, ...], str] = {}
    for blank, chunk in itertools.groupby(lines[start:end], key=lambda x: x == ""):
        block = list(chunk)
        if blank or block[0].startswith("…"):  # between rows of panels; a gap of panels
            continue
        head = next(i for i, x in enumerate(block) if x.split()[0].split("=")[0] == names[-1])
        # Each panel starts at its row labels' column (a 1-D view has one panel at 0).
        starts = [0] if nd == 1 else [
            m.start() for m in re.finditer(rf"(?<!\S){re.escape(names[-2])}=\d+", block[head + 1])]
        for a, b in zip(starts, [*starts[1:], None]):
            part = [x[a:b].split() for x in block]
            outer = tuple(int(t.split("=")[1]) for line in part[:head] for t in line)
            cols = [None if t == "…" else int(t.split("=")[1]) for t in part[head]]
            for tokens in part[head + 1:]:
                if nd == 1:
                    tokens = ["row=0", *tokens]
                if tokens[0] == "…":  # the rows left out
                    continue
                r = int(tokens[0].split("=")[1])
                for c, t in zip(cols, tokens[1:]):
                    if c is not None:
                        out[(*outer, r, c) if nd >= 2 else (c,)] = t
    return out


def _number(cell: str) -> int:
    return int(cell.strip("[]()"))


def _expected(shape: tuple[int, ...], dims: tuple[int, ...], rank: int
              ) -> tuple[np.ndarray, tuple[int, ...]]:
    """The instance of ``rank`` in ``from_shape(shape)[dims]``, by NumPy indexing (no layouts):
    the other dims fixed at rank's coordinate, the selected ones in the selected order."""
    full = np.unravel_index(rank, shape)
    index: list[object] = [int(c) for c in full]
    for k in dims:
        index[k] = slice(None)
    sub = np.arange(math.prod(shape)).reshape(shape)[tuple(index)]
    kept = sorted(dims)
    return sub.transpose([kept.index(k) for k in dims]), tuple(int(full[k]) for k in dims)


def _check_cells(text: str, view: MeshView, instance: np.ndarray, here: tuple[int, ...] | None
                 ) -> dict[tuple[int, ...], str]:
    """Each shown cell holds the rank the instance has there, marked by its coordinate:
    ``[r]`` at ``here``, ``(r)`` where one coordinate differs, bare elsewhere."""
    cells = _cells(text, view)
    assert cells
    for crd, cell in cells.items():
        r = int(instance[crd])
        differ = 2 if here is None else sum(a != b for a, b in zip(crd, here))
        assert cell == {0: f"[{r}]", 1: f"({r})"}.get(differ, str(r)), (crd, cell)
    return cells


def test_render_draws_4d_views_as_titled_panels() -> None:
    view = MeshView.from_shape((2, 2, 2, 4), ("pp", "dp", "cp", "tp"))
    text = render(view, 5)
    lines = text.splitlines()
    assert lines[1].split() == ["pp=0", "dp=0", "pp=0", "dp=1", "pp=1", "dp=0", "pp=1", "dp=1"]
    cells = _check_cells(text, view, np.arange(32).reshape(2, 2, 2, 4), (0, 0, 1, 1))
    assert len(cells) == 32
    assert lines[-1] == "rank 5: pp group (5, 21); dp group (5, 13); cp group (1, 5); " \
        "tp group (4, 5, 6, 7)"


def test_render_wraps_panels_that_do_not_fit_side_by_side() -> None:
    view = MeshView.from_shape((2, 2, 2, 4), ("pp", "dp", "cp", "tp"))
    lines = render(view, 5, width=60).splitlines()
    assert max(map(len, lines)) <= 60
    titles = [x.split() for x in lines if x.startswith("pp=")]
    assert titles == [["pp=0", "dp=0", "pp=0", "dp=1"], ["pp=1", "dp=0", "pp=1", "dp=1"]]
    assert lines[lines.index("pp=1 dp=0                  pp=1 dp=1") - 1] == ""


def test_render_wraps_a_row_of_3d_panels_too_wide_for_width() -> None:
    view = MeshView.from_shape((3, 5, 12), ("a", "b", "c"))
    text = render(view, 77)
    assert max(map(len, text.splitlines())) <= 120
    assert [x for x in text.splitlines() if x.startswith("a=")] == ["a=0", "a=1", "a=2"]
    assert len(_check_cells(text, view, np.arange(180).reshape(3, 5, 12), (1, 1, 5))) == 180


def test_render_cuts_long_dims_and_keeps_the_rank() -> None:
    shape = (4, 16384, 2, 8)
    view = MeshView.from_shape(shape, ("pp", "dp", "cp", "tp"))
    text = render(view, 70000)  # at (0, 4375, 0, 0)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    cells = _check_cells(text, view, np.arange(2**20).reshape(shape), (0, 4375, 0, 0))
    panels = {crd[:2] for crd in cells}
    assert panels == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 4375), (3, 16383)}
    gaps = [x for x in lines if x.startswith("…")]
    assert gaps == ["… 4,369 more panels (pp=0..3 × dp=0..16383) …",
                    "… 61,159 more panels (pp=0..3 × dp=0..16383) …"]
    assert "  dp group (0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, " \
        "…, 70000, …, 262128) (16,384 ranks)" in lines


def test_render_cuts_rows_and_columns_with_an_ellipsis() -> None:
    view = MeshView.from_shape((100, 1000), ("dp", "tp"))
    text = render(view, 50_500)  # at (50, 500)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    rows = [x.split()[0] for x in lines[2:] if not x.startswith("rank") and x[:1] != " "]
    assert len(rows) == 16 and rows[:2] == ["dp=0", "dp=1"] and rows[-1] == "dp=99"
    assert rows.count("…") == 2 and "dp=50" in rows
    header = lines[1].split()
    assert header[:3] == ["tp=0", "tp=1", "tp=2"] and header[-3:] == ["tp=500", "…", "tp=999"]
    _check_cells(text, view, np.arange(100_000).reshape(100, 1000), (50, 500))


def test_render_cuts_a_1d_view_of_a_million_ranks() -> None:
    view = MeshView.from_shape(2**20, ("world",))
    text = render(view, 5)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    assert lines[1].split()[-2:] == ["…", "world=1048575"]
    cells = _check_cells(text, view, np.arange(2**20), (5,))
    assert cells[(5,)] == "[5]" and cells[(2**20 - 1,)] == "(1048575)"
    assert lines[-2] == "rank 5:" and lines[-1].startswith("  world group (0, 1, 2, 3, 4, 5, 6,")
    assert lines[-1].endswith(", …, 1048575) (1,048,576 ranks)")


def test_render_numbers_match_an_independent_computation_on_a_slice() -> None:
    shape = (2, 3, 4, 5, 6)
    mesh = MeshView.from_shape(shape, ("a", "b", "c", "d", "e"))
    view = mesh["b", "a", "e", "c"]  # transposed, and one instance per index of d
    for rank in (0, 437, 719):
        instance, here = _expected(shape, (1, 0, 4, 2), rank)
        assert len(_check_cells(render(view, rank), view, instance, here)) == 144
    assert _check_cells(render(view), view, _expected(shape, (1, 0, 4, 2), 0)[0], None)


def test_render_marks_are_the_rank_groups() -> None:
    view = MeshView.from_shape((2, 3, 2, 5), ("pp", "dp", "cp", "tp"))["tp", "pp", "cp"]
    for rank in range(0, 60, 7):
        cells = _cells(render(view, rank), view)
        groups = {r for d in view.names for r in view.group(rank, d)} - {rank}
        assert {_number(c) for c in cells.values() if c[0] == "("} == groups
        assert [_number(c) for c in cells.values() if c[0] == "["] == [rank]


def test_render_legend_lines_list_each_group_cut_to_width() -> None:
    view = MeshView.from_shape((4, 16384, 2, 8), ("pp", "dp", "cp", "tp"))
    lines = render(view, 70000).splitlines()
    legend = lines[lines.index("rank 70000:") + 1:]
    assert [x.split()[0] for x in legend] == ["pp", "dp", "cp", "tp"]
    assert legend[0] == f"  pp group {view.group(70000, 'pp')}"
    assert legend[2] == f"  cp group {view.group(70000, 'cp')}"
    dp = view.group(70000, "dp")
    shown = [int(x) for x in re.findall(r"\d+", legend[1].split("(")[1])]
    assert set(shown) <= set(dp) and 70000 in shown and shown[-1] == dp[-1]


def test_render_draws_an_explicit_universe() -> None:
    rng = np.random.default_rng(7)
    ranks = rng.permutation(np.arange(1000, 1000 + 2 * 3 * 4 * 5)).reshape(2, 3, 4, 5)
    view = MeshView.from_ranks(ranks, ("pp", "dp", "cp", "tp"))
    rank = int(ranks[1, 2, 3, 4])
    cells = _check_cells(render(view, rank), view, ranks, (1, 2, 3, 4))
    assert len(cells) == ranks.size


def test_render_draws_a_permuted_rank_map_under_a_strided_layout() -> None:
    perm = np.random.default_rng(3).permutation(4096)
    view = MeshView(Layout((64, 64), (1, 64)), ("x", "y"), RankMap.explicit(perm.tolist()))
    rank = int(perm[5 + 64 * 40])  # offset x + 64 y at (x, y) = (5, 40)
    text = render(view, rank)
    assert max(map(len, text.splitlines())) <= 120
    _check_cells(text, view, perm.reshape(64, 64).T, (5, 40))


@st.composite
def _rendered(draw: st.DrawFn) -> tuple[MeshView, tuple[int, ...], tuple[int, ...], int | None,
                                        int]:
    """Some dims, in any order, of a row-major mesh of 1..6 dims and up to 2**20 ranks; a rank
    (or none); a width."""
    n = draw(st.integers(1, 6))
    budget, shape = 2**20, []
    for _ in range(n):
        size = draw(st.one_of(st.integers(1, min(budget, 20)), st.integers(1, budget)))
        shape.append(size)
        budget //= size
    names = draw(st.lists(st.text("abcdefgh_", min_size=1, max_size=8), min_size=n, max_size=n,
                          unique=True))
    dims = tuple(draw(st.permutations(range(n)))[:draw(st.integers(1, n))])
    view = MeshView.from_shape(shape, names)[dims]
    rank = draw(st.none() | st.integers(0, math.prod(tuple(shape)) - 1))
    return view, tuple(shape), dims, rank, draw(st.integers(40, 200))


@settings(max_examples=50, deadline=None)
@given(_rendered())
def test_render_fits_width_and_shows_true_ranks(
        case: tuple[MeshView, tuple[int, ...], tuple[int, ...], int | None, int]) -> None:
    """Law: for any view of up to 2**20 ranks and any width >= 40, no line of the picture is
    longer than width, every cell shown holds the rank its coordinate has (as NumPy indexing
    computes it) marked by that coordinate, the rank is shown once as [r], and the legend
    has its group along every dim."""
    view, shape, dims, rank, width = case
    text = render(view, rank, width=width)
    assert max(map(len, text.splitlines())) <= width
    instance, here = _expected(shape, dims, 0 if rank is None else rank)
    cells = _check_cells(text, view, instance, None if rank is None else here)
    if rank is not None:
        assert [c for c in cells.values() if c[0] == "["] == [f"[{rank}]"]
        legend = text[text.index(f"\nrank {rank}:"):]
        assert all(f"{n} group (" in legend for n in view.names)


def test_a_rank_map_built_with_its_array_answers_look_ups_as_one_built_without() -> None:
    """A survivor world's rank map keeps the NumPy array it was gathered from: its first
    look-ups scan the array, later ones use the inverse dict, and every answer (members
    and non-members, before and after the switch), ``array()`` and ``max_rank`` are those
    of the same map built from the ranks alone."""
    np = pytest.importorskip("numpy")
    ranks = [17, 3, 40, 8, 25, 0, 99, 12]
    plain = RankMap.explicit(ranks)
    kept = RankMap._gathered(np.array(ranks, dtype=np.int64))
    assert kept == plain and hash(kept) == hash(plain)
    assert kept.max_rank == 99 and kept.array().tolist() == ranks
    asks = [*ranks, 1, 98, 100, 5] * 20  # past the scans, into the dict
    assert [kept.offset_of(r) for r in asks] == [plain.offset_of(r) for r in asks]
    assert [kept.offset_of(r) for r in ranks] == list(range(len(ranks)))
    with pytest.raises(ValueError):
        kept.array()[0] = 5  # the kept array is read-only, as array()'s always is
    same = RankMap._gathered(np.arange(6, dtype=np.int32))
    assert same.is_identity and same == RankMap.identity(6)
    swapped = RankMap._gathered(np.array([0, 2, 1, 3, 4, 5]))
    assert not swapped.is_identity and swapped == RankMap.explicit([0, 2, 1, 3, 4, 5])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=200, unique=True),
       st.lists(st.integers(0, 300), max_size=200, unique=True))
def test_a_gathered_rank_map_is_the_explicit_map_of_its_ranks(ranks: list[int],
                                                               other: list[int]) -> None:
    """Law: a rank map gathered from an array (a survivor world, whose tuple of ranks is
    made only when read) is equal to, hashes as, and answers every call, ``take``,
    ``offset_of``, ``array(dtype)``, ``max_rank``, repr, pickle and ``to_dict`` as the map
    built from the same ranks; it differs from a map of other ranks exactly when the
    ranks differ, whichever of the two is gathered; its tuple is made by reading
    ``ranks`` and is the ranks."""
    np = pytest.importorskip("numpy")
    plain = RankMap(len(ranks), ranks)
    kept = RankMap._gathered(np.array(ranks, dtype=np.int64))
    assert kept == plain and plain == kept and hash(kept) == hash(plain)
    offsets = list(range(len(ranks)))[::-1]
    assert [kept(o) for o in offsets] == [plain(o) for o in offsets]
    assert kept.take(offsets) == plain.take(offsets) and kept.take(()) == ()
    assert [kept.offset_of(r) for r in range(302)] == [plain.offset_of(r) for r in range(302)]
    assert kept.max_rank == plain.max_rank == max(ranks) and repr(kept) == repr(plain)
    if not plain.is_identity:
        assert kept.array("int32").tolist() == plain.array("int32").tolist() == ranks
    assert pickle.loads(pickle.dumps(kept)) == plain and kept.to_dict() == plain.to_dict()
    if other:
        theirs = RankMap._gathered(np.array(other, dtype=np.int64))
        assert (theirs == kept) == (other == ranks) == (RankMap(len(other), other) == kept)
    assert kept.ranks == (None if plain.is_identity else tuple(ranks))


def test_gathered_rank_maps_that_hash_alike_are_compared_rank_by_rank() -> None:
    """Two large maps whose hashes read the same sampled ranks (they differ only between
    the samples) are equal only if every rank is: gathered or not, either way round."""
    np = pytest.importorskip("numpy")
    ranks = list(range(1000, 0, -1))
    swapped = [ranks[0], ranks[2], ranks[1], *ranks[3:]]  # offsets 1, 2: not sampled
    a, b = (RankMap._gathered(np.array(r, dtype=np.int64)) for r in (ranks, swapped))
    assert hash(a) == hash(b) and a != b and b != a
    assert a != RankMap.explicit(swapped) and RankMap.explicit(swapped) != a
    assert a == RankMap._gathered(np.array(ranks, dtype=np.int64)) == RankMap.explicit(ranks)
