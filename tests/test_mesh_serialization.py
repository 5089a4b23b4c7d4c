"""Serialization of mesh views: lossless round trips, and a strict reader.

* Round trips (property): for views built by random transforms,
  ``MeshView.from_dict(json.loads(json.dumps(v.to_dict()))) == v`` with an equal
  hash, and pickling (every protocol), ``copy.deepcopy`` and ``copy.copy`` give an
  equal value with an equal hash; the same for rank maps.
* A catalogue of hostile dicts: each is refused with one specific
  :class:`mesh.MeshError` subclass (mostly :class:`~mesh.InvalidMeshDataError`),
  never a bare ``TypeError``/``RecursionError``/``ValueError``; a huge claimed
  universe is accepted in O(1) time and memory.
* Corrupted pickles: a pickle goes back through the constructor, so a stream
  patched to hold duplicate ranks is refused with :class:`~mesh.InvalidRanksError`.
"""

from __future__ import annotations

import copy
import json
import math
import pickle
import pickletools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from work_bound import bounded

from mesh import (
    FORMAT_VERSION,
    DuplicateNameError,
    InvalidDimsError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshView,
    OverlapError,
    RankMap,
    concatenate,
)

# ---- views built by random transforms -----------------------------------------------------

_NAMES = ("dp", "cp", "tp", "pp", "ep", "sp")


def _factorizations(n: int) -> list[tuple[int, ...]]:
    """Every ordered factorization of ``n`` into factors >= 2 (just ``(1,)`` for 1)."""
    if n == 1:
        return [(1,)]
    out: list[tuple[int, ...]] = [(n,)]
    for d in range(2, n):
        if n % d == 0:
            out.extend((d, *rest) for rest in _factorizations(n // d))
    return out


@st.composite
def base_views(draw: st.DrawFn) -> MeshView:
    """A row-major view, a view over a shuffled explicit rank tensor, or a slice of a bigger
    universe: 1-4 dims of sizes 1-4, at most 256 ranks (explicit ranks drawn from 0..2n)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    names = _NAMES[:len(shape)]
    n = math.prod(shape)
    kind = draw(st.sampled_from(["shape", "ranks", "slice"]))
    if kind == "shape":
        return MeshView.from_shape(shape, names)
    if kind == "ranks":
        flat = draw(st.permutations(draw(st.lists(st.integers(0, 2 * n), min_size=n, max_size=n,
                                                  unique=True))))
        nested: Any = list(flat)
        for s in reversed(shape[1:]):
            nested = [nested[i:i + s] for i in range(0, len(nested), s)]
        return MeshView.from_ranks(nested, names)
    outer = draw(st.integers(2, 3))
    whole = MeshView.from_shape((outer, *shape), ("outer", *names))
    return whole[list(names)]


@st.composite
def views(draw: st.DrawFn) -> MeshView:
    """A base view after 0-4 random transforms: select/transpose, flatten (any dims, any
    order), unflatten (any factorization), rename, concatenate of two disjoint selections."""
    v = draw(base_views())
    fresh = iter(f"n{i}" for i in range(100))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["select", "transpose", "flatten", "unflatten", "rename",
                                   "concatenate"]))
        dims = list(range(v.ndim))
        try:
            if op == "select":
                k = draw(st.integers(1, v.ndim))
                v = v[tuple(draw(st.permutations(dims))[:k])]
            elif op == "transpose":
                v = v.transpose(*draw(st.permutations(dims)))
            elif op == "flatten":
                k = draw(st.integers(1, v.ndim))
                picked = draw(st.permutations(dims))[:k]
                v = v.flatten(tuple(picked), draw(st.sampled_from([None, next(fresh)])))
            elif op == "unflatten":
                d = draw(st.sampled_from(dims))
                sizes = draw(st.sampled_from(_factorizations(v.shape[d])))
                v = v.unflatten(d, sizes, [next(fresh) for _ in sizes])
            elif op == "rename":
                d = draw(st.sampled_from(dims))
                v = v.rename({v.names[d]: next(fresh)})
            elif v.ndim >= 2:
                order = draw(st.permutations(dims))
                cut = draw(st.integers(1, v.ndim - 1))
                v = concatenate([v[tuple(order[:cut])], v[tuple(order[cut:])]])
        except MeshError:  # e.g. unflattening a non-contiguous dim across its pieces
            pass
    return v


rank_maps = st.one_of(
    st.integers(1, 2**62).map(RankMap.identity),
    st.lists(st.integers(0, 2**40), min_size=1, max_size=12, unique=True).map(RankMap.explicit))


@given(views())
def test_to_dict_round_trips_through_json(v: MeshView) -> None:
    """Law: ``MeshView.from_dict(json.loads(json.dumps(v.to_dict())))`` equals ``v``, with an
    equal hash and the same dict again; the dict is versioned and has exactly the format's
    keys."""
    d = v.to_dict()
    assert set(d) == {"version", "layout", "names", "ranks"} and d["version"] == FORMAT_VERSION
    assert set(d["layout"]) == {"shape", "stride"}
    back = MeshView.from_dict(json.loads(json.dumps(d)))
    assert back == v and hash(back) == hash(v)
    assert back.to_dict() == d
    assert back.group(v.ranks(0), 0) == v.group(v.ranks(0), 0)


@given(views())
def test_pickle_and_copy_round_trip(v: MeshView) -> None:
    """Law: pickling (every protocol), ``copy.deepcopy`` and ``copy.copy`` give a view equal to
    ``v`` with an equal hash; a pickle stores only the defining data, so it is the same bytes
    before and after derived values were computed and cached."""
    before = pickle.dumps(v)
    _ = (v.num_instances, v.coordinate(v.ranks(0)), hash(v))  # fill the caches
    assert pickle.dumps(v) == before
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(v, protocol=protocol))
        assert back == v and hash(back) == hash(v), protocol
    for back in (copy.deepcopy(v), copy.copy(v)):
        assert back == v and hash(back) == hash(v)


@given(rank_maps)
def test_rank_maps_round_trip(r: RankMap) -> None:
    """Law: a rank map comes back equal, with an equal hash, from ``to_dict`` through JSON,
    from every pickle protocol and from ``copy.deepcopy``."""
    assert RankMap.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    for back in [pickle.loads(pickle.dumps(r, protocol=p))
                 for p in range(pickle.HIGHEST_PROTOCOL + 1)] + [copy.deepcopy(r)]:
        assert back == r and hash(back) == hash(r)


# ---- a catalogue of hostile dicts ---------------------------------------------------------

BIG = 10**5000


def base() -> dict[str, Any]:
    """A valid serialized (dp, tp) = (2, 2) view, fresh each time."""
    return {"version": 1, "layout": {"shape": [2, 2], "stride": [2, 1]}, "names": ["dp", "tp"],
            "ranks": {"size": 4}}


def deep_list(n: int, leaf: object = 2) -> object:
    """``leaf`` in ``n`` nested one-item lists, built iteratively."""
    for _ in range(n):
        leaf = [leaf]
    return leaf


DROP = object()
"""A value for :func:`with_` and :func:`lay` that removes the key."""


def with_(**changes: Any) -> Callable[[], object]:
    """``base()`` with top-level keys replaced (a value of ``DROP`` removes the key)."""
    def make() -> object:
        d = base()
        for k, v in changes.items():
            if v is DROP:
                del d[k]
            else:
                d[k] = v
        return d
    return make


def lay(shape: object = DROP, stride: object = DROP, **extra: object) -> Callable[[], object]:
    """``base()`` with its layout's shape/stride replaced (``DROP`` removes one)."""
    def make() -> object:
        d = base()
        lay_d = d["layout"]
        for k, v in (("shape", shape), ("stride", stride)):
            if v is not DROP:
                lay_d[k] = v
        lay_d.update(extra)
        return d
    return make


def without_layout_key(key: str) -> Callable[[], object]:
    def make() -> object:
        d = base()
        del d["layout"][key]
        return d
    return make


def also(key: object, value: object) -> Callable[[], object]:
    """``base()`` with one more top-level key."""
    def make() -> object:
        d = base()
        d[key] = value  # type: ignore[index]
        return d
    return make


def view(shape: list[Any], stride: list[Any], names: list[Any], ranks: Any
         ) -> Callable[[], object]:
    return lambda: {"version": 1, "layout": {"shape": shape, "stride": stride}, "names": names,
                    "ranks": ranks}


DATA = InvalidMeshDataError
HOSTILE: list[tuple[str, Callable[[], object], type[MeshError]]] = [
    # ---- the top level
    ("extra top-level key", also("extra", 1), DATA),
    ("extra top-level int key (mixed-type keys)", also(1, 2), DATA),
    ("extra top-level huge int key", also(BIG, 1), DATA),
    ("extra top-level None key", also(None, 1), DATA),
    ("missing version", with_(version=DROP), DATA),
    ("missing layout", with_(layout=DROP), DATA),
    ("missing names", with_(names=DROP), DATA),
    ("missing ranks", with_(ranks=DROP), DATA),
    ("empty dict", lambda: {}, DATA),
    ("a list", lambda: [base()], DATA),
    ("a list of pairs", lambda: list(base().items()), DATA),
    ("None", lambda: None, DATA),
    ("the JSON text, unparsed", lambda: json.dumps(base()), DATA),
    ("an int", lambda: 1, DATA),
    ("a view, not its dict", lambda: MeshView.from_shape(4, ("w",)), DATA),
    # ---- the version
    ("version 0", with_(version=0), DATA),
    ("version 2", with_(version=2), DATA),
    ("version -1", with_(version=-1), DATA),
    ("version '1'", with_(version="1"), DATA),
    ("version True", with_(version=True), DATA),
    ("version 1.0", with_(version=1.0), DATA),
    ("version None", with_(version=None), DATA),
    ("version [1]", with_(version=[1]), DATA),
    ("version 10**5000", with_(version=BIG), DATA),
    # ---- the layout's keys and types
    ("extra layout key", lay(offset=0), DATA),
    ("missing layout stride", without_layout_key("stride"), DATA),
    ("missing layout shape", without_layout_key("shape"), DATA),
    ("layout None", with_(layout=None), DATA),
    ("layout as a list", with_(layout=[[2, 2], [2, 1]]), DATA),
    ("layout as a str", with_(layout="(2,2):(2,1)"), DATA),
    ("stride None", lay(stride=None), DATA),
    ("shape None", lay(shape=None), DATA),
    ("shape a str", lay(shape="2,2"), DATA),
    ("stride a str", lay(stride="21"), DATA),
    ("shape with a float", lay(shape=[2.0, 2]), DATA),
    ("shape a float", lay(shape=4.0, stride=1), DATA),
    ("stride with a bool", lay(stride=[True, 1]), DATA),
    ("shape a bool", lay(shape=True, stride=1), DATA),
    ("shape a tuple (not JSON)", lay(shape=(2, 2)), DATA),
    ("shape a dict", lay(shape={"0": 2, "1": 2}), DATA),
    ("shape nested 5000 deep", lay(shape=deep_list(5000), stride=deep_list(5000, 1)), DATA),
    ("stride nested 5000 deep", lay(stride=[deep_list(5000, 2), 1]), DATA),
    ("shape nested 33 deep", lay(shape=deep_list(33), stride=deep_list(33, 1)), DATA),
    ("incongruent shape and stride", lay(stride=[2]), DATA),
    ("incongruent nesting", lay(stride=[[2, 1], 1]), DATA),
    ("negative size", lay(shape=[-2, 2]), DATA),
    ("zero size", lay(shape=[0, 2]), DATA),
    ("negative stride", lay(stride=[2, -1]), DATA),
    ("no dims", view([], [], [], {"size": 4}), InvalidSizeError),
    # ---- layouts that do not fit the universe
    ("overlapping dims", lay(stride=[1, 1]), OverlapError),
    ("a stride-0 dim", view([2], [0], ["a"], {"size": 2}), OverlapError),
    ("interleaved dims", view([2, 2], [3, 2], ["a", "b"], {"size": 12}), OverlapError),
    ("a layout bigger than the universe", view([8], [1], ["a"], {"size": 4}), OverlapError),
    ("a span that does not divide the universe", view([2], [1], ["a"], {"size": 3}),
     OverlapError),
    ("too few explicit ranks", with_(ranks={"ranks": [0, 1]}), OverlapError),
    ("a huge stride", view([2], [BIG], ["a"], {"size": 2}), OverlapError),
    # ---- names
    ("one name for two dims", with_(names=["dp"]), InvalidDimsError),
    ("three names for two dims", with_(names=["dp", "tp", "pp"]), InvalidDimsError),
    ("names as a dict", with_(names={"dp": 0, "tp": 1}), DATA),
    ("names as a set", with_(names={"dp", "tp"}), DATA),
    ("names as a str", with_(names="dptp"), DATA),
    ("names as a tuple (not JSON)", with_(names=("dp", "tp")), DATA),
    ("names None", with_(names=None), DATA),
    ("names with an int", with_(names=["dp", 3]), InvalidNameError),
    ("names with an empty str", with_(names=["dp", ""]), InvalidNameError),
    ("names with None", with_(names=[None, "tp"]), InvalidNameError),
    ("names with a nested list", with_(names=[["dp"], "tp"]), InvalidNameError),
    ("duplicate names", with_(names=["dp", "dp"]), DuplicateNameError),
    # ---- the rank map
    ("both size and ranks", with_(ranks={"size": 99, "ranks": [3, 2, 1, 0]}), DATA),
    ("ranks an int", with_(ranks=5), DATA),
    ("ranks None", with_(ranks=None), DATA),
    ("ranks a str", with_(ranks="ranks"), DATA),
    ("ranks a list, not a dict", with_(ranks=[0, 1, 2, 3]), DATA),
    ("ranks an empty dict", with_(ranks={}), DATA),
    ("rank map with an unknown key", with_(ranks={"sizes": 4}), DATA),
    ("rank map with mixed-type keys", with_(ranks={"size": 4, 0: 1}), DATA),
    ("explicit ranks with a str", with_(ranks={"ranks": [0, 1, "2", 3]}), DATA),
    ("explicit ranks with bools", with_(ranks={"ranks": [True, False, 2, 3]}), DATA),
    ("explicit ranks with a float", with_(ranks={"ranks": [0.0, 1, 2, 3]}), DATA),
    ("explicit ranks nested", with_(ranks={"ranks": [[0, 1], [2, 3]]}), DATA),
    ("explicit ranks a tuple (not JSON)", with_(ranks={"ranks": (0, 1, 2, 3)}), DATA),
    ("explicit ranks a dict", with_(ranks={"ranks": {"0": 1}}), DATA),
    ("explicit ranks None", with_(ranks={"ranks": None}), DATA),
    ("explicit ranks negative", with_(ranks={"ranks": [-1, 0, 1, 2]}), InvalidRanksError),
    ("explicit ranks duplicate", with_(ranks={"ranks": [0, 0, 1, 2]}), InvalidRanksError),
    ("explicit ranks duplicate and huge", with_(ranks={"ranks": [BIG, BIG, 1, 2]}),
     InvalidRanksError),
    ("explicit ranks empty", with_(ranks={"ranks": []}), InvalidRanksError),
    ("size a str", with_(ranks={"size": "4"}), DATA),
    ("size a float", with_(ranks={"size": 4.0}), DATA),
    ("size True", with_(ranks={"size": True}), DATA),
    ("size None", with_(ranks={"size": None}), DATA),
    ("size a list", with_(ranks={"size": [4]}), DATA),
    ("size 0", with_(ranks={"size": 0}), InvalidSizeError),
    ("size negative", with_(ranks={"size": -4}), InvalidSizeError),
    ("size 3 for a 4-rank layout", with_(ranks={"size": 3}), OverlapError),
]


@pytest.mark.parametrize(("data", "error"), [pytest.param(make, err, id=name)
                                             for name, make, err in HOSTILE])
def test_hostile_dicts_are_refused(data: Callable[[], object], error: type[MeshError]) -> None:
    """Each hostile dict is refused by ``MeshView.from_dict`` with exactly this
    :class:`mesh.MeshError` subclass, and a printable message."""
    d = data()
    with pytest.raises(MeshError) as info:
        MeshView.from_dict(d)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert str(info.value)


def test_the_catalogue_is_big_enough() -> None:
    assert len(HOSTILE) >= 60
    assert len({name for name, _, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("ranks", [{"size": 99, "ranks": [3, 2, 1, 0]}, {}, {"rank": [0]},
                                   [0, 1], None, "size", {"size": 2.0}, {"ranks": (0, 1)},
                                   {"ranks": [0, "1"]}, {"size": 4, 1: 1}])
def test_rank_map_from_dict_refuses_other_data(ranks: object) -> None:
    """``RankMap.from_dict`` reads exactly ``{"size": n}`` or ``{"ranks": [...]}``."""
    with pytest.raises(InvalidMeshDataError):
        RankMap.from_dict(ranks)


# ---- odd but valid dicts are accepted, cheaply ------------------------------------------

def test_a_huge_claimed_universe_is_accepted_in_constant_time_and_memory() -> None:
    """``{"size": 2**62}`` with a 1-D layout of size 2**62 is a valid view: read in a few
    thousand Python steps and under 1 MiB (an identity rank map stores only its size), and
    written back the same.  (Its seconds, against a 1 s target: ``bench/time_bounds.py``.)"""
    d = {"version": 1, "layout": {"shape": [2**62], "stride": [1]}, "names": ["w"],
         "ranks": {"size": 2**62}}
    with bounded(events=20_000, peak_bytes=1 << 20):
        v = MeshView.from_dict(d)
        _ = (v.coordinate(2**62 - 1), v.num_instances)
    assert v.to_dict() == d and v.shape == (2**62,) and v.coordinate(2**62 - 1) == (2**62 - 1,)


def test_a_huge_universe_under_a_small_layout_is_accepted() -> None:
    v = MeshView.from_dict({"version": 1, "layout": {"shape": [2], "stride": [1]},
                            "names": ["a"], "ranks": {"size": 2**62}})
    assert v.num_instances == 2**61 and v.group(2**62 - 1, "a") == (2**62 - 2, 2**62 - 1)


@pytest.mark.parametrize(("d", "canonical"), [
    ({"version": 1, "layout": {"shape": [4], "stride": [1]}, "names": ["w"],
      "ranks": {"ranks": [0, 1, 2, 3]}},
     {"version": 1, "layout": {"shape": [4], "stride": [1]}, "names": ["w"],
      "ranks": {"size": 4}}),
    ({"version": 1, "layout": {"shape": [[2, 2]], "stride": [[2, 1]]}, "names": ["w"],
      "ranks": {"size": 4}},
     {"version": 1, "layout": {"shape": [4], "stride": [1]}, "names": ["w"],
      "ranks": {"size": 4}}),
    ({"version": 1, "layout": {"shape": [[], 4], "stride": [[], 1]}, "names": ["one", "w"],
      "ranks": {"size": 4}},  # an empty list is a rank-0 mode: a dim of size 1
     {"version": 1, "layout": {"shape": [1, 4], "stride": [0, 1]}, "names": ["one", "w"],
      "ranks": {"size": 4}}),
])
def test_non_canonical_dicts_are_read_as_their_canonical_value(d: dict[str, Any],
                                                               canonical: dict[str, Any]) -> None:
    assert MeshView.from_dict(d).to_dict() == canonical


# ---- corrupted pickles --------------------------------------------------------------------

def _ops(blob: bytes) -> list[tuple[str, Any, int, int]]:
    """``(opcode name, argument, position, length)`` of every opcode in a pickle."""
    ops = [(op.name, arg, int(pos or 0)) for op, arg, pos in pickletools.genops(blob)]
    ends = [pos for _, _, pos in ops[1:]] + [len(blob)]
    return [(name, arg, pos, end - pos) for (name, arg, pos), end in zip(ops, ends)]


def _splice(blob: bytes, pos: int, length: int, new: bytes) -> bytes:
    """Replace ``length`` bytes at ``pos`` by ``new``, fixing the length of the enclosing frame
    (protocols 4 and 5) if the size changes."""
    out = blob[:pos] + new + blob[pos + length:]
    delta = len(new) - length
    if delta:
        for name, arg, p, n in _ops(blob):
            if name == "FRAME" and p + n <= pos < p + n + arg:
                out = out[:p + 1] + (arg + delta).to_bytes(8, "little") + out[p + 9:]
    return out


def _int_op(protocol: int, value: int) -> bytes:
    return b"I%d\n" % value if protocol == 0 else b"K" + bytes([value])


def _patch_int(blob: bytes, protocol: int, old: int, new: int) -> bytes:
    """The pickle with the one int opcode pushing ``old`` made to push ``new`` instead."""
    hits = [(p, n) for name, arg, p, n in _ops(blob)
            if name in ("INT", "BININT1", "BININT", "LONG1") and arg == old]
    assert len(hits) == 1, hits
    return _splice(blob, *hits[0], _int_op(protocol, new))


def _patch_none(blob: bytes, protocol: int) -> bytes:
    """The pickle with its one ``None`` made the tuple ``(0, 0)``."""
    hits = [(p, n) for name, _, p, n in _ops(blob) if name == "NONE"]
    assert len(hits) == 1, hits
    pair = (b"(" + _int_op(protocol, 0) * 2 + b"t" if protocol < 2
            else _int_op(protocol, 0) * 2 + b"\x86")
    return _splice(blob, *hits[0], pair)


PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rank_map_pickle_patched_to_repeat_a_rank_is_refused(protocol: int) -> None:
    """``RankMap.explicit([0, 1])`` is the identity ``RankMap(2)``: its pickle is the call
    ``RankMap(2, None)``.  Patched to ``RankMap(2, (0, 0))``, loading it goes through the
    constructor and raises ``InvalidRanksError``."""
    blob = pickle.dumps(RankMap.explicit([0, 1]), protocol=protocol)
    assert pickle.loads(blob) == RankMap(2)
    bad = _patch_none(blob, protocol)
    assert bad != blob
    with pytest.raises(InvalidRanksError):
        pickle.loads(bad)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_explicit_rank_map_pickle_patched_to_repeat_a_rank_is_refused(protocol: int) -> None:
    """The pickle of ``RankMap.explicit([0, 200])``, patched to ranks ``(0, 0)``, raises
    ``InvalidRanksError`` when loaded."""
    blob = pickle.dumps(RankMap.explicit([0, 200]), protocol=protocol)
    assert pickle.loads(blob) == RankMap.explicit([0, 200])
    with pytest.raises(InvalidRanksError):
        pickle.loads(_patch_int(blob, protocol, 200, 0))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_view_pickle_patched_to_repeat_a_rank_is_refused(protocol: int) -> None:
    """A view pickles as ``MeshView.from_dict(data)``; with the data's ranks patched from
    ``[0, 200]`` to ``[0, 0]``, loading raises ``InvalidRanksError``."""
    v = MeshView.from_ranks([[0, 200]], ("a", "b"))
    blob = pickle.dumps(v, protocol=protocol)
    assert pickle.loads(blob) == v
    with pytest.raises(InvalidRanksError):
        pickle.loads(_patch_int(blob, protocol, 200, 0))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_view_pickle_patched_to_another_version_is_refused(protocol: int) -> None:
    """The pickled data carries its format version; patched to version 7 it is refused."""
    v = MeshView.from_ranks([[3, 200]], ("a", "b"))
    blob = pickle.dumps(v, protocol=protocol)
    first = next((p, n) for name, arg, p, n in _ops(blob) if name in ("INT", "BININT1"))
    assert blob[first[0]:first[0] + first[1]] == _int_op(protocol, FORMAT_VERSION)
    with pytest.raises(InvalidMeshDataError):  # "version" is the dict's first key
        pickle.loads(_splice(blob, *first, _int_op(protocol, 7)))


def test_a_long_rank_list_with_a_late_duplicate_is_refused_at_the_cost_of_a_copy() -> None:
    """2**21 explicit ranks whose last repeats the first: refused naming both offsets, with
    the validation's own allocations under 100 MB (a dict of every rank seen took ~200 MB
    here, and 1.4 GB and 16 s at 2**24)."""
    import tracemalloc

    n = 1 << 21
    ranks = list(range(n))
    ranks[-1] = 0
    data = {"version": 1, "layout": {"shape": [n], "stride": [1]}, "names": ["x"],
            "ranks": {"ranks": ranks}}
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRanksError, match=f"offsets 0 and {n - 1}"):
            MeshView.from_dict(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, peak
