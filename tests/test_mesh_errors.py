"""A catalogue of bad inputs to mesh views.

Each one raises a specific :class:`mesh.MeshError` subclass that is also the
matching built-in (``KeyError`` for unknown dims, ``ValueError`` for bad sizes
and ranks, ``TypeError`` for wrong types), and its message names the bad value
and, where there is a choice, the valid ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from layout import Layout
from mesh import (
    DuplicateNameError,
    InvalidDimsError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshTypeError,
    MeshView,
    NotRepresentableError,
    OffsetOutOfRangeError,
    OverlapError,
    RankMap,
    RankNotInMeshError,
    TooManyRanksError,
    UniverseMismatchError,
    UnknownDimError,
    concatenate,
    ordered,
    render,
)

MESH = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
DIMS = re.escape("('dp', 'cp', 'tp')")

# (id, call, error class, built-in it must also be, regex the message must match)
CASES: list[tuple[str, Callable[[], Any], type[MeshError], type[Exception], str]] = [
    # ---- unknown dims: KeyError, naming the dim and the valid dims
    ("unknown name in a selection", lambda: MESH["pp"], UnknownDimError, KeyError,
     rf"'pp'.*{DIMS}"),
    ("unknown name in a multi-dim selection", lambda: MESH["dp", "xx"], UnknownDimError,
     KeyError, rf"'xx'.*{DIMS}"),
    ("unknown name in group", lambda: MESH.group(0, "pp"), UnknownDimError, KeyError,
     rf"'pp'.*{DIMS}"),
    ("unknown name in local_rank", lambda: MESH.local_rank(0, "pp"), UnknownDimError,
     KeyError, rf"'pp'.*{DIMS}"),
    ("unknown name in groups", lambda: MESH.groups("pp"), UnknownDimError, KeyError,
     rf"'pp'.*{DIMS}"),
    ("unknown name in size", lambda: MESH.size("pp"), UnknownDimError, KeyError,
     rf"'pp'.*{DIMS}"),
    ("unknown name in flatten", lambda: MESH.flatten(("dp", "pp")), UnknownDimError,
     KeyError, rf"'pp'.*{DIMS}"),
    ("unknown name in unflatten", lambda: MESH.unflatten("pp", (2,), ("a",)),
     UnknownDimError, KeyError, rf"'pp'.*{DIMS}"),
    ("unknown name in transpose", lambda: MESH.transpose("dp", "cp", "pp"), UnknownDimError,
     KeyError, rf"'pp'.*{DIMS}"),
    ("unknown name in rename", lambda: MESH.rename({"pp": "x"}), UnknownDimError, KeyError,
     rf"'pp'.*{DIMS}"),
    ("dim index too large", lambda: MESH[3], UnknownDimError, KeyError, rf"\b3\b.*{DIMS}"),
    ("dim index too negative", lambda: MESH.group(0, -4), UnknownDimError, KeyError,
     rf"-4.*{DIMS}"),
    ("transpose missing a dim", lambda: MESH.transpose("tp", "dp"), InvalidDimsError,
     ValueError, rf"{DIMS}.*'cp'"),
    ("empty selection", lambda: MESH[()], InvalidDimsError, ValueError, DIMS),
    ("flatten of no dims", lambda: MESH.flatten(()), InvalidDimsError, ValueError, DIMS),
    # ---- names: ValueError
    ("duplicate names", lambda: MeshView.from_shape((2, 2), ("a", "a")), DuplicateNameError,
     ValueError, r"'a'"),
    ("a dim selected twice", lambda: MESH["tp", "tp"], DuplicateNameError, ValueError,
     r"'tp'"),
    ("a dim selected by name and index", lambda: MESH["dp", 0], DuplicateNameError,
     ValueError, r"'dp'"),
    ("a dim flattened twice", lambda: MESH.flatten(("cp", "cp")), DuplicateNameError,
     ValueError, r"'cp'"),
    ("flatten name clashing with another dim", lambda: MESH.flatten(("dp", "cp"), "tp"),
     DuplicateNameError, ValueError, r"'tp'"),
    ("default flatten name clashing", lambda: MeshView.from_shape(
        (2, 2, 2), ("a", "b", "a_b")).flatten(("a", "b")), DuplicateNameError, ValueError,
     r"'a_b'"),
    ("unflatten name clashing", lambda: MESH.unflatten("dp", (2, 1), ("x", "tp")),
     DuplicateNameError, ValueError, r"'tp'"),
    ("rename clashing", lambda: MESH.rename({"dp": "cp"}), DuplicateNameError, ValueError,
     r"'cp'"),
    ("concatenating the same name twice", lambda: concatenate([MESH["dp"], MESH["dp"]]),
     DuplicateNameError, ValueError, r"'dp'"),
    ("empty name", lambda: MeshView.from_shape((2, 2), ("a", "")), InvalidNameError,
     ValueError, r"''"),
    ("empty flatten name", lambda: MESH.flatten(("dp", "cp"), ""), InvalidNameError,
     ValueError, r"''"),
    ("empty rename", lambda: MESH.rename({"dp": ""}), InvalidNameError, ValueError, r"''"),
    ("non-string name", lambda: MeshView.from_shape((2, 2), ("a", 3)), InvalidNameError,
     ValueError, r"\b3\b"),
    ("too few names", lambda: MeshView.from_shape((2, 2), ("a",)), InvalidDimsError,
     ValueError, r"2 dims.*\('a',\)"),
    ("names as a bare string", lambda: MeshView.from_shape((2, 2), "ab"), MeshTypeError,
     TypeError, r"'ab'"),
    # ---- sizes: ValueError for bad values, TypeError for bad types
    ("zero size", lambda: MeshView.from_shape((2, 0)), InvalidSizeError, ValueError,
     r"\(2, 0\).*got 0"),
    ("negative size", lambda: MeshView.from_shape((-2,)), InvalidSizeError, ValueError,
     r"got -2"),
    ("no dims", lambda: MeshView.from_shape(()), InvalidSizeError, ValueError, r"\(\)"),
    ("float size", lambda: MeshView.from_shape((2, 2.0)), MeshTypeError, TypeError,
     r"2\.0.*float"),
    ("string size", lambda: MeshView.from_shape((2, "2")), MeshTypeError, TypeError,
     r"'2'.*str"),
    ("bool size", lambda: MeshView.from_shape((True, 2)), MeshTypeError, TypeError,
     r"bool True"),
    ("zero universe", lambda: RankMap.identity(0), InvalidSizeError, ValueError, r"got 0"),
    ("wrong unflatten product", lambda: MESH.unflatten("dp", (2, 3), ("a", "b")),
     InvalidSizeError, ValueError, r"'dp'.*size 2.*\(2, 3\).*product is 6"),
    ("zero unflatten size", lambda: MESH.unflatten("dp", (2, 0), ("a", "b")),
     InvalidSizeError, ValueError, r"\(2, 0\).*got 0"),
    ("bool unflatten size", lambda: MESH.unflatten("dp", (True, 2), ("a", "b")),
     MeshTypeError, TypeError, r"bool True"),
    ("float unflatten size", lambda: MESH.unflatten("dp", (2.0,), ("a",)), MeshTypeError,
     TypeError, r"2\.0.*float"),
    ("unflatten names not matching sizes", lambda: MESH.unflatten("dp", (2, 1), ("a",)),
     InvalidDimsError, ValueError, r"\(2, 1\).*\('a',\)"),
    ("unflatten into nothing", lambda: MESH.unflatten("dp", (), ()), InvalidDimsError,
     ValueError, r"\(\)"),
    ("unflatten names as a bare string", lambda: MESH.unflatten("dp", (2,), "a"),
     MeshTypeError, TypeError, r"'a'"),
    ("unflatten sizes not a sequence", lambda: MESH.unflatten("dp", 2, ("a",)),
     MeshTypeError, TypeError, r"\b2\b"),
    # ---- explicit rank tensors: ValueError
    ("ragged rows", lambda: MeshView.from_ranks([[0, 1], [2]]), InvalidRanksError,
     ValueError, r"ragged.*\[2\]"),
    ("ragged depth", lambda: MeshView.from_ranks([[0, 1], 2]), InvalidRanksError, ValueError,
     r"ragged.*\[\[0, 1\], 2\]"),
    ("ragged deep inside", lambda: MeshView.from_ranks([[[0], [1]], [[2], [3, 4]]]),
     InvalidRanksError, ValueError, r"ragged.*\[3, 4\]"),
    ("duplicate ranks", lambda: MeshView.from_ranks([[0, 1], [1, 3]]), InvalidRanksError,
     ValueError, r"rank 1 appears twice"),
    ("negative rank", lambda: MeshView.from_ranks([[0, -1]]), InvalidRanksError, ValueError,
     r"-1"),
    ("bool rank", lambda: MeshView.from_ranks([1, True]), InvalidRanksError, ValueError,
     r"bool True"),
    ("float rank", lambda: MeshView.from_ranks([1.0, 0]), InvalidRanksError, ValueError,
     r"1\.0.*float"),
    ("no ranks", lambda: MeshView.from_ranks([]), InvalidRanksError, ValueError, r"empty"),
    ("a scalar, not a tensor", lambda: MeshView.from_ranks(3), InvalidRanksError, ValueError,
     r"\b3\b"),
    ("explicit rank map from a string", lambda: RankMap.explicit("012"), MeshTypeError,
     TypeError, r"'012'"),
    # ---- ranks outside the universe
    ("group of a rank past the end", lambda: MESH.group(8, "tp"), RankNotInMeshError,
     ValueError, r"rank 8\b.*RankMap\.identity\(8\)"),
    ("group of a negative rank", lambda: MESH.group(-1, "tp"), RankNotInMeshError,
     ValueError, r"rank -1\b"),
    ("local_rank of a rank outside", lambda: MESH.local_rank(8, "dp"), RankNotInMeshError,
     ValueError, r"rank 8\b"),
    ("instance of a rank outside", lambda: MESH.instance(100), RankNotInMeshError,
     ValueError, r"rank 100\b"),
    ("a rank missing from an explicit universe", lambda: MeshView.from_ranks(
        [4, 9], ("x",)).group(5, "x"), RankNotInMeshError, ValueError,
     r"rank 5\b.*\[4, 9\]"),
    ("render a rank outside", lambda: render(MESH, 8), RankNotInMeshError, ValueError,
     r"rank 8\b"),
    ("a string rank", lambda: MESH.coordinate("1"), MeshTypeError, TypeError, r"'1'"),
    ("a bool rank", lambda: MESH.group(True, "tp"), MeshTypeError, TypeError, r"True"),
    # ---- dims of the wrong type
    ("float dim", lambda: MESH[1.0], MeshTypeError, TypeError, r"1\.0"),
    ("bool dim", lambda: MESH.group(0, True), MeshTypeError, TypeError, r"True"),
    ("a set as a key", lambda: MESH[{"dp", "tp"}], MeshTypeError, TypeError,
     r"ordered sequence.*set.*unordered"),
    ("a dict as a key", lambda: MESH[{"dp": 1}], MeshTypeError, TypeError, r"dict"),
    # ---- unordered input: TypeError, since processes could see different orders
    ("names as a set", lambda: MeshView.from_shape((2, 4), {"dp", "tp"}), MeshTypeError,
     TypeError, r"names must be an ordered sequence.*unordered"),
    ("names as a dict", lambda: MeshView.from_shape((2, 4), {"dp": 0, "tp": 1}),
     MeshTypeError, TypeError, r"names must be an ordered sequence.*dict"),
    ("shape as a set", lambda: MeshView.from_shape({2, 4}), MeshTypeError, TypeError,
     r"shape must be an ordered sequence.*set"),
    ("shape as bytes", lambda: MeshView.from_shape(b"x"), MeshTypeError, TypeError,
     r"shape must be an ordered sequence.*bytes"),
    ("flatten of a set", lambda: MESH.flatten({"dp", "tp"}), MeshTypeError, TypeError,
     r"flatten must be an ordered sequence.*set"),
    ("flatten of a float", lambda: MESH.flatten(2.5), MeshTypeError, TypeError, r"2\.5"),
    ("unflatten sizes as a set", lambda: MESH.unflatten("dp", {2}, ("a",)), MeshTypeError,
     TypeError, r"unflatten sizes must be an ordered sequence"),
    ("unflatten names as a set", lambda: MESH.unflatten("dp", (2,), {"a"}), MeshTypeError,
     TypeError, r"unflatten names must be an ordered sequence"),
    ("concatenate a set of views", lambda: concatenate({MESH}), MeshTypeError, TypeError,
     r"ordered sequence"),
    ("concatenate None", lambda: concatenate(None), MeshTypeError, TypeError, r"None"),
    ("rename with a list", lambda: MESH.rename(["dp"]), MeshTypeError, TypeError,
     r"rename takes a mapping"),
    ("rename with a class", lambda: MESH.rename(list), MeshTypeError, TypeError,
     r"rename takes a mapping"),
    ("explicit ranks as a set", lambda: RankMap.explicit({0, 1}), MeshTypeError, TypeError,
     r"ranks must be an ordered sequence.*set"),
    ("explicit ranks as bytes", lambda: RankMap(1, b"x"), MeshTypeError, TypeError,
     r"bytes"),
    # ---- concatenation
    ("overlapping concatenation", lambda: concatenate(
        [MESH["dp"], MESH.rename({"dp": "dp2"})["dp2"]]), OverlapError, ValueError,
     r"dp=2, dp2=2"),
    ("interleaving concatenation", lambda: concatenate(
        [MESH.flatten(("dp", "cp"))["dp_cp"], MESH.rename({"cp": "c"})["c"]]), OverlapError,
     ValueError, r"dp_cp=4, c=2"),
    ("concatenation across universes of different sizes", lambda: concatenate(
        [MESH["dp"], MeshView.from_shape(4, ("x",))]), UniverseMismatchError, ValueError,
     r"identity\(4\).*identity\(8\)"),
    ("concatenation across explicit universes", lambda: concatenate(
        [MESH["tp"], MeshView.from_ranks([7, 6, 5, 4, 3, 2, 1, 0], ("w",))["w"]]),
     UniverseMismatchError, ValueError, r"explicit\(\[7, 6.*identity\(8\)"),
    ("concatenation of nothing", lambda: concatenate([]), InvalidDimsError, ValueError,
     r"none"),
    # ---- rank maps: offsets are bounds-checked
    ("identity offset past the end", lambda: RankMap.identity(4)(10), OffsetOutOfRangeError,
     IndexError, r"offset 10 is outside RankMap\.identity\(4\)"),
    ("explicit negative offset", lambda: RankMap.explicit([4, 0, 2])(-1),
     OffsetOutOfRangeError, IndexError, r"offset -1"),
    ("take out of range", lambda: RankMap.identity(4).take([100, -5]), OffsetOutOfRangeError,
     IndexError, r"offset 100"),
    ("rank map of a wrong length", lambda: RankMap(3, [0, 1]), InvalidRanksError, ValueError,
     r"size 3 needs 3 ranks, got 2"),
    # ---- size guards
    ("groups of a huge universe", lambda: MeshView.from_shape(2**60, ("w",)).groups("w"),
     TooManyRanksError, ValueError, r"1,152,921,504,606,846,976 ranks.*limit="),
    ("instance of a huge view", lambda: MeshView.from_shape(2**60, ("w",)).instance(0),
     TooManyRanksError, ValueError, r"instance\(\).*limit="),
    ("groups above an explicit limit", lambda: MESH.groups("tp", limit=7), TooManyRanksError,
     ValueError, r"8 ranks, more than 7; pass a larger limit= .*limit=7 here"),
    ("concatenation of a non-view", lambda: concatenate([MESH, 3]), MeshTypeError,
     TypeError, r"\b3\b"),
    # ---- layouts that are not views
    ("unflatten cutting across a non-contiguous dim", lambda: MeshView.from_shape(
        (2, 3, 3), ("a", "b", "c")).flatten(("a", "c")).unflatten("a_c", (3, 2), ("x", "y")),
     NotRepresentableError, ValueError, r"'a_c'.*\(2,3\):\(9,1\).*\(3, 2\)"),
    ("a stride-0 dim", lambda: MeshView(Layout(2, 0), ("a",), RankMap.identity(2)),
     OverlapError, ValueError, r"'a'.*2:0"),
    ("a dim spanning more than the universe", lambda: MeshView(
        Layout(4), ("a",), RankMap.identity(2)), OverlapError, ValueError,
     r"a=4.*span 4.*2 ranks"),
    ("a dim whose translates cannot tile the universe", lambda: MeshView(
        Layout(2, 3), ("a",), RankMap.identity(8)), OverlapError, ValueError,
     r"span 6.*8 ranks"),
    ("a layout that is not a Layout", lambda: MeshView("4:1", ("a",), RankMap.identity(4)),
     MeshTypeError, TypeError, r"'4:1'"),
    ("a rank map that is not a RankMap", lambda: MeshView(Layout(4), ("a",), 4),
     MeshTypeError, TypeError, r"\b4\b"),
    ("render narrower than 40 columns", lambda: render(MESH, width=39), InvalidSizeError,
     ValueError, r"width must be at least 40 columns, got 39"),
    ("render a float width", lambda: render(MESH, 5, width=80.0), MeshTypeError, TypeError,
     r"width must be an int, got 80\.0"),
    ("render a bool width", lambda: render(MESH, width=True), MeshTypeError, TypeError,
     r"width.*True"),
    ("render something that is not a view", lambda: render([[0, 1]]), MeshTypeError,
     TypeError, r"MeshView.*\[\[0, 1\]\]"),
]


@pytest.mark.parametrize(("call", "error", "builtin", "message"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_mesh_error_naming_it(
        call: Callable[[], Any], error: type[MeshError], builtin: type[Exception],
        message: str) -> None:
    with pytest.raises(error, match=message) as info:
        call()
    assert isinstance(info.value, MeshError)
    assert isinstance(info.value, builtin)


def test_every_mesh_error_is_also_a_builtin() -> None:
    pairs = {UnknownDimError: KeyError, DuplicateNameError: ValueError,
             InvalidDimsError: ValueError, OffsetOutOfRangeError: IndexError,
             TooManyRanksError: ValueError, InvalidMeshDataError: ValueError,
             InvalidNameError: ValueError, InvalidSizeError: ValueError,
             MeshTypeError: TypeError, InvalidRanksError: ValueError,
             RankNotInMeshError: ValueError, UniverseMismatchError: ValueError,
             OverlapError: ValueError, NotRepresentableError: ValueError}
    for error, builtin in pairs.items():
        assert issubclass(error, MeshError) and issubclass(error, builtin), error


def test_unknown_dim_message_is_not_quoted_like_a_plain_key_error() -> None:
    with pytest.raises(KeyError) as info:
        MESH["pp"]
    assert str(info.value).startswith("unknown dim 'pp'")


def test_coordinate_of_a_rank_outside_the_universe_is_none() -> None:
    assert MESH.coordinate(8) is None
    assert MESH.coordinate(-1) is None
    assert MeshView.from_ranks([4, 9], ("x",)).coordinate(5) is None


def test_a_failed_transform_leaves_the_view_unchanged() -> None:
    before = MESH.to_dict()
    with pytest.raises(MeshError):
        MESH.unflatten("dp", (3,), ("x",))
    with pytest.raises(MeshError):
        MESH.rename({"dp": "tp"})
    assert MESH.to_dict() == before


def test_renaming_one_dim_twice_is_refused() -> None:
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    with pytest.raises(DuplicateNameError, match="'dp' is renamed twice"):
        view.rename({"dp": "x", 0: "y"})


@pytest.mark.parametrize("data", [{"layout": {}}, {"names": ["a"]}, [1, 2], {"layout": 3}])
def test_from_dict_of_malformed_data_names_the_keys(data: Any) -> None:
    with pytest.raises(InvalidMeshDataError, match="has exactly the keys") as info:
        MeshView.from_dict(data)
    assert isinstance(info.value, ValueError)


def test_rank_not_in_mesh_is_also_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="rank 9 is not in the universe"):
        MeshView.from_shape((2, 2)).group(9, 0)


def test_ranks_may_be_any_integer_type_but_not_bool() -> None:
    np = pytest.importorskip("numpy")
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    assert view.group(np.int64(3), "dp") == (1, 3)
    with pytest.raises(MeshTypeError, match="bool"):
        view.group(True, "dp")


def test_ordered_is_the_door_for_sequences() -> None:
    """Lists, tuples, ranges and 1-D arrays pass as tuples; a set, a dict, a string or an
    iterator is refused naming the value (its order is not part of it), and a sequence past
    ``limit`` before it is copied."""
    import numpy as np

    assert ordered([2, 4], "mesh_shape") == (2, 4) and ordered(range(3), "dims") == (0, 1, 2)
    assert ordered(np.array([3, 1]), "ranks") == (3, 1)
    for unordered in ({2, 4}, {"dp": 2}, "dp", iter([1, 2])):
        with pytest.raises(MeshTypeError, match="mesh_shape must be an ordered sequence"):
            ordered(unordered, "mesh_shape")
    with pytest.raises(TooManyRanksError, match="ranks has 3 items, more than the 2"):
        ordered([1, 2, 3], "ranks", limit=2)



@pytest.mark.parametrize("src", ["np.array([0, 1])", "np.dtype('int32')", "None", "'float64'",
                                 "32"])
def test_a_rank_maps_array_takes_only_the_names_of_its_two_dtypes(src: str) -> None:
    """``RankMap.array(dtype)``: "int32" or "int64" only; anything else (a NumPy array once
    raised NumPy's ValueError comparing itself with the names) is refused naming it."""
    import numpy as np

    dtype = eval(src, {"np": np})
    with pytest.raises(InvalidRanksError, match="int32"):
        RankMap.explicit([1, 0]).array(dtype)
    assert RankMap.explicit([1, 0]).array("int32").tolist() == [1, 0]
