"""Bad input to the tensor wing of :mod:`mesh` (``Sharding``, the placements, ``reshard``,
``Reshard`` and its per-rank queries, ``Sharding.local``, ``Reshard.apply``) is refused with
a :class:`mesh.MeshError` subclass whose message names the bad value: never a bare
``TypeError``/``ValueError``/``IndexError``/``KeyError``/``AttributeError`` from inside, never
silently accepted, and never by hanging or exhausting memory first.

Each case is ``(id, call, expected error, needles)``: the call must raise ``expected`` (also
a ``MeshError``) and its message must contain every needle (a needle that is a tuple is
satisfied by any one of its strings).  A seeded fuzz throws junk at every argument.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from work_bound import bounded

import mesh
from mesh import (
    MAX_TENSOR_DIMS,
    MAX_TILES,
    MeshError,
    MeshTypeError,
    MeshView,
    Partial,
    RankNotInMeshError,
    Replicate,
    Reshard,
    Shard,
    Sharding,
    ShardingError,
    StridedShard,
    TooManyRanksError,
    Topology,
    TopologyError,
    reshard,
)

Needle = str | tuple[str, ...]
Expected = type[MeshError] | tuple[type[MeshError], ...]
Case = tuple[str, Callable[[], Any], Expected, tuple[Needle, ...]]

V = MeshView.from_shape((2, 2), ("dp", "tp"))  # ranks 0-3
SERVE = MeshView.from_ranks([4, 5, 6, 7], ("serve",))  # a disjoint universe
R = Replicate()
SRC = Sharding(V, (R, Shard(0)), (4, 3))
DST = Sharding(SERVE, (Shard(1),), (4, 3))
PLAN = reshard(SRC, DST)
FULL = np.arange(12.0).reshape(4, 3)
SHARDS = {r: SRC.local(FULL, r) for r in range(4)}
SCALAR = Sharding(V, (R, R), ())  # a 0-d tensor
HUGE = 2**70
BIG_VIEW = MeshView.from_shape((2**21,), ("x",))  # O(1) to build


def raises(call: Callable[[], Any], expected: Expected, needles: tuple[Needle, ...]) -> None:
    """``call()`` raises ``expected`` (a MeshError) whose message holds every needle."""
    with pytest.raises(Exception) as info:
        call()
    err = info.value
    assert isinstance(err, MeshError), f"untyped {type(err).__name__}: {err}"
    assert isinstance(err, expected), f"{type(err).__name__} is not a {expected}: {err}"
    message = str(err)
    for needle in needles:
        options = (needle,) if isinstance(needle, str) else needle
        assert any(o in message for o in options), f"{options} not named in: {message}"


def cases(table: list[Case]) -> Any:
    return pytest.mark.parametrize(("call", "expected", "needles"),
                                   [pytest.param(c, e, n, id=i) for i, c, e, n in table])


# ---- Sharding(view, placements, shape) --------------------------------------------------------
class TorchLikeShard:
    """A stand-in for torch's ``Shard`` (not one of mesh's placements)."""

    dim = 0

    def __repr__(self) -> str:
        return "TorchLikeShard(dim=0)"


PLACEMENT_CASES: list[Case] = [
    ("not-a-sequence-None", lambda: Sharding(V, None, (4,)), MeshTypeError, ("None",)),
    ("a-single-placement", lambda: Sharding(V, R, (4,)), MeshTypeError, ("Replicate()",)),
    ("a-set", lambda: Sharding(V, {R}, (4,)), MeshTypeError, ("set", "{Replicate()}")),
    ("a-dict", lambda: Sharding(V, {0: R, 1: R}, (4,)), MeshTypeError, ("dict",)),
    ("a-str", lambda: Sharding(V, "RR", (4,)), MeshTypeError, ("'RR'",)),
    ("a-generator", lambda: Sharding(V, (p for p in (R, R)), (4,)), MeshTypeError,
     ("generator",)),
    ("a-range-past-maxsize", lambda: Sharding(V, range(HUGE), (4,)), MeshError, ("range",)),
    ("too-few", lambda: Sharding(V, (R,), (4,)), ShardingError, ("got 1", "'dp'")),
    ("one-too-many", lambda: Sharding(V, (R, R, R), (4,)), ShardingError, ("got 3", "(2)")),
    ("two-too-many", lambda: Sharding(V, (R,) * 4, (4,)), ShardingError,
     ("one per dim", "got 4")),
    ("a-million", lambda: Sharding(V, [R] * 10**6, (4,)), ShardingError,
     ("one per dim", ("1,000,000", "1000000"))),
    ("a-torch-like-placement", lambda: Sharding(V, (TorchLikeShard(), R), (4,)), MeshTypeError,
     ("placements[0]", "TorchLikeShard(dim=0)")),
    ("junk-None", lambda: Sharding(V, (R, None), (4,)), MeshTypeError,
     ("placements[1]", "None")),
    ("junk-int", lambda: Sharding(V, (R, 0), (4,)), MeshTypeError, ("placements[1]", "0")),
    ("junk-str", lambda: Sharding(V, (R, "S(0)"), (4,)), MeshTypeError, ("'S(0)'",)),
    ("a-placement-class", lambda: Sharding(V, (Replicate, R), (4,)), MeshTypeError,
     ("placements[0]", "Replicate")),
    ("dim-names-not-placements", lambda: Sharding(V, ("dp", "tp"), (4,)), MeshTypeError,
     ("'dp'",)),
    ("shard-dim-past-shape", lambda: Sharding(V, (Shard(1), R), (4,)), ShardingError,
     ("Shard(1)", "(4,)", "'dp'")),
    ("shard-dim-huge", lambda: Sharding(V, (R, Shard(HUGE)), (4,)), ShardingError,
     (str(HUGE),)),
    ("strided-dim-past-shape", lambda: Sharding(V, (StridedShard(2, 2), R), (4, 4)),
     ShardingError, ("StridedShard(2, split_factor=2)", "(4, 4)")),
    ("shard-of-a-0d-tensor", lambda: Sharding(V, (Shard(0), R), ()), ShardingError,
     ("Shard(0)", "()")),
]

SHAPE_CASES: list[Case] = [
    ("negative", lambda: Sharding(V, (R, R), (4, -1)), ShardingError, ("-1",)),
    ("float", lambda: Sharding(V, (R, R), (4.0,)), MeshTypeError, ("4.0",)),
    ("nan", lambda: Sharding(V, (R, R), (float("nan"),)), MeshTypeError, ("nan",)),
    ("bool", lambda: Sharding(V, (R, R), (True,)), MeshTypeError, ("True",)),
    ("a-set", lambda: Sharding(V, (R, R), {4}), MeshTypeError, ("{4}",)),
    ("an-int", lambda: Sharding(V, (R, R), 4), MeshTypeError, ("4",)),
    ("a-str", lambda: Sharding(V, (R, R), "44"), MeshTypeError, ("'44'",)),
    ("None", lambda: Sharding(V, (R, R), None), MeshTypeError, ("None",)),
    ("a-2d-array", lambda: Sharding(V, (R, R), np.array([[4, 4]])), MeshTypeError,
     ("array",)),
    ("one-dim-too-many", lambda: Sharding(V, (R, R), (1,) * (MAX_TENSOR_DIMS + 1)),
     ShardingError, (f"at most {MAX_TENSOR_DIMS} dims",)),
    ("two-dims-too-many", lambda: Sharding(V, (R, R), (1,) * (MAX_TENSOR_DIMS + 2)),
     ShardingError, (f"at most {MAX_TENSOR_DIMS} dims",)),
    ("a-million-dims", lambda: Sharding(V, (R, R), [1] * 10**6), ShardingError,
     (f"at most {MAX_TENSOR_DIMS} dims",)),
    ("a-2**70-size", lambda: Sharding(V, (R, R), (HUGE,)), ShardingError, (str(HUGE),)),
    ("a-2**70-size-beside-a-0", lambda: Sharding(V, (R, R), (0, HUGE)), ShardingError,
     (str(HUGE),)),
    ("product-over-2**62", lambda: Sharding(V, (R, R), (2**31, 2**32)), ShardingError,
     ("2147483648", "4294967296")),
]

VIEW_AND_TILE_CASES: list[Case] = [
    ("view-None", lambda: Sharding(None, (R, R), (4,)), MeshTypeError, ("None",)),
    ("view-a-str", lambda: Sharding("mesh", (R, R), (4,)), MeshTypeError, ("'mesh'",)),
    ("view-a-rank-list", lambda: Sharding([[0, 1], [2, 3]], (R, R), (4,)), MeshTypeError,
     ("[[0, 1], [2, 3]]",)),
    ("view-a-layout", lambda: Sharding(V.layout, (R, R), (4,)), MeshTypeError, ("Layout",)),
    ("a-2**21-rank-shard", lambda: Sharding(BIG_VIEW, (Shard(0),), (8,)), ShardingError,
     ("2,097,152", "'x'", f"{MAX_TILES:,}")),
    ("two-view-dims-over-MAX_TILES",
     lambda: Sharding(MeshView.from_shape((2**10, 2**11)), (Shard(0), Shard(0)), (8,)),
     ShardingError, ("2,097,152", "'dim0'", "'dim1'")),
    ("split_factor-2**64", lambda: Sharding(V, (StridedShard(0, 2**64), R), (4,)),
     ShardingError, (("split_factor=18446744073709551616", str(2**64)),)),
    ("split_factor-MAX_TILES-over-2-ranks",
     lambda: Sharding(V, (StridedShard(0, MAX_TILES), R), (4,)), ShardingError,
     (("StridedShard", "split_factor"),)),
]

PLACEMENT_VALUE_CASES: list[Case] = [
    ("shard-negative-dim", lambda: Shard(-1), ShardingError, ("-1",)),
    ("shard-bool-dim", lambda: Shard(True), MeshTypeError, ("True",)),
    ("shard-float-dim", lambda: Shard(1.0), MeshTypeError, ("1.0",)),
    ("shard-str-dim", lambda: Shard("0"), MeshTypeError, ("'0'",)),
    ("shard-None-dim", lambda: Shard(None), MeshTypeError, ("None",)),
    ("strided-negative-dim", lambda: StridedShard(-2, 2), ShardingError, ("-2",)),
    ("strided-float-dim", lambda: StridedShard(0.0, 2), MeshTypeError, ("0.0",)),
    ("split_factor-0", lambda: StridedShard(0, 0), ShardingError, ("split_factor", "0")),
    ("split_factor-negative", lambda: StridedShard(0, -3), ShardingError, ("-3",)),
    ("split_factor-float", lambda: StridedShard(0, 1.5), MeshTypeError, ("1.5",)),
    ("split_factor-bool", lambda: StridedShard(0, True), MeshTypeError, ("True",)),
    ("split_factor-str", lambda: StridedShard(0, "2"), MeshTypeError, ("'2'",)),
    ("partial-unknown-op", lambda: Partial("product"), ShardingError,
     ("'product'", "sum", "avg", "max", "min")),
    ("partial-uppercase-op", lambda: Partial("SUM"), ShardingError, ("'SUM'", "sum")),
    ("partial-int-op", lambda: Partial(1), (ShardingError, MeshTypeError), ("1", "sum")),
    ("partial-None-op", lambda: Partial(None), (ShardingError, MeshTypeError), ("None",)),
    ("partial-bytes-op", lambda: Partial(b"sum"), (ShardingError, MeshTypeError),
     ("b'sum'",)),
    ("partial-list-op", lambda: Partial(["sum"]), (ShardingError, MeshTypeError),
     ("['sum']",)),
]


@cases(PLACEMENT_CASES)
def test_bad_placements_are_refused_naming_them(call: Any, expected: Any, needles: Any) -> None:
    raises(call, expected, needles)


@cases(SHAPE_CASES)
def test_bad_shapes_are_refused_naming_them(call: Any, expected: Any, needles: Any) -> None:
    raises(call, expected, needles)


@cases(VIEW_AND_TILE_CASES)
def test_bad_views_and_too_many_tiles_are_refused_naming_them(call: Any, expected: Any,
                                                              needles: Any) -> None:
    raises(call, expected, needles)


@cases(PLACEMENT_VALUE_CASES)
def test_bad_placement_arguments_are_refused_naming_them(call: Any, expected: Any,
                                                         needles: Any) -> None:
    raises(call, expected, needles)


def test_torch_placements_are_refused_naming_them() -> None:
    tensor = pytest.importorskip("torch.distributed.tensor")
    raises(lambda: Sharding(V, (tensor.Shard(0), tensor.Replicate()), (4,)), MeshTypeError,
           ("placements[0]", "Shard(dim=0)"))


def test_exactly_MAX_TILES_pieces_are_accepted() -> None:
    s = Sharding(MeshView.from_shape((MAX_TILES,), ("x",)), (Shard(0),), (8,))
    assert s.local_shape(MAX_TILES - 1) == (0,)


# ---- reshard(src, dst, topology, itemsize) ------------------------------------------------------
RESHARD_CASES: list[Case] = [
    ("src-None", lambda: reshard(None, DST), MeshTypeError, ("src", "None")),
    ("dst-a-str", lambda: reshard(SRC, "x"), MeshTypeError, ("dst", "'x'")),
    ("src-a-view", lambda: reshard(V, DST), MeshTypeError, ("src", "MeshView")),
    ("different-shapes", lambda: reshard(SRC, Sharding(V, (R, Shard(0)), (4, 4))),
     ShardingError, ("(4, 3)", "(4, 4)")),
    ("partial-destination-from-shard", lambda: reshard(SRC, Sharding(V, (R, Partial()), (4, 3))),
     ShardingError, ("Partial('sum')", "'tp'", "Shard(0)", "Replicate()")),
    ("partial-destination-on-another-mesh",
     lambda: reshard(SRC, Sharding(SERVE, (Partial(),), (4, 3))), ShardingError,
     ("Partial('sum')", "no source view dim matches", "Replicate()")),
    ("mixed-partial-ops",
     lambda: reshard(Sharding(V, (Partial("max"), Partial("sum")), (4, 3)), DST),
     ShardingError, ("'max'", "'sum'")),
    ("itemsize-0", lambda: reshard(SRC, DST, itemsize=0), ShardingError, ("itemsize", "0")),
    ("itemsize-negative", lambda: reshard(SRC, DST, itemsize=-1), ShardingError,
     ("itemsize", "-1")),
    ("itemsize-float", lambda: reshard(SRC, DST, itemsize=4.0), MeshTypeError,
     ("itemsize", "4.0")),
    ("itemsize-bool", lambda: reshard(SRC, DST, itemsize=True), MeshTypeError,
     ("itemsize", "True")),
    ("itemsize-str", lambda: reshard(SRC, DST, itemsize="4"), MeshTypeError, ("'4'",)),
    ("itemsize-None", lambda: reshard(SRC, DST, itemsize=None), MeshTypeError, ("None",)),
    ("topology-an-int", lambda: reshard(SRC, DST, 5), MeshTypeError, ("topology", "5")),
    ("topology-a-str", lambda: reshard(SRC, DST, "host0"), MeshTypeError, ("'host0'",)),
    ("topology-a-dict", lambda: reshard(SRC, DST, {"hosts": 2}), MeshTypeError,
     ("{'hosts': 2}",)),
    ("topology-the-class-not-an-instance", lambda: reshard(SRC, DST, Topology).traffic(),
     MeshTypeError, ("topology", "Topology")),
    ("topology-too-small", lambda: reshard(SRC, DST, Topology(2, 1)).traffic(), TopologyError,
     ("Topology(2, 1)",)),
    ("Reshard-built-directly-from-junk",
     lambda: Reshard("a", None, 5, itemsize=-5).traffic(), MeshError, ("'a'",)),
]


@cases(RESHARD_CASES)
def test_bad_reshard_arguments_are_refused_naming_them(call: Any, expected: Any,
                                                       needles: Any) -> None:
    raises(call, expected, needles)


# ---- per-rank queries ------------------------------------------------------------------------
QUERIES = ("receives", "sends", "kept", "keeps")
NOTHING = {"receives": (), "sends": (), "kept": 0, "keeps": None}


def query(name: str) -> Callable[[Any], Any]:
    if not hasattr(PLAN, name):
        pytest.skip(f"Reshard.{name} is not in this version")
    return getattr(PLAN, name)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize("rank", [100, -1, 2**63, 2**80], ids=["100", "-1", "2**63", "2**80"])
def test_a_rank_outside_both_universes_sends_receives_and_keeps_nothing(name: str,
                                                                        rank: int) -> None:
    assert query(name)(rank) == NOTHING[name]


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize(("rank", "needle"), [("x", "'x'"), (1.5, "1.5"), (True, "True"),
                                              (None, "None"), ([], "[]"), ("4", "'4'")])
def test_a_junk_rank_is_refused_naming_it(name: str, rank: Any, needle: str) -> None:
    raises(lambda: query(name)(rank), MeshTypeError, (needle,))


def test_an_integer_like_rank_gives_transfers_of_plain_int_ranks() -> None:
    got = PLAN.receives(np.int64(5))
    assert got == PLAN.receives(5)
    assert got and all(type(t.source) is int and type(t.dest) is int for t in got)
    sent = PLAN.sends(np.int64(2))
    assert sent and all(type(t.source) is int and type(t.dest) is int for t in sent)


def test_queries_over_a_2_to_the_40_rank_universe_are_refused_not_listed() -> None:
    world = MeshView.from_shape((2**40,), ("x",))
    small = Sharding(MeshView.from_shape((4,), ("y",)), (Shard(0),), (8,))
    plan = reshard(small, Sharding(world, (R,), (8,)))
    with bounded(200_000, 50 << 20):
        for call in (lambda: plan.receives(1), lambda: plan.sends(1), lambda: plan.traffic()):
            raises(call, TooManyRanksError, ("1,099,511,627,776",))


# Three tensor dims each strided into 128 runs per rank: 2,097,152 boxes per rank, more than
# MAX_TILES, from a 16M-element tensor on 8 ranks.
V3 = MeshView.from_shape((2, 2, 2), ("a", "b", "c"))
STRIDED = Sharding(V3, tuple(StridedShard(d, 128) for d in range(3)), (256, 256, 256))
GATHERED = Sharding(V3, (R, R, R), (256, 256, 256))
BLOWUP: list[tuple[str, Callable[[], Any]]] = [
    ("boxes", lambda: STRIDED.boxes(0)),
    ("receives", lambda: reshard(STRIDED, GATHERED).receives(0)),
    ("sends", lambda: reshard(STRIDED, GATHERED).sends(0)),
    ("kept", lambda: reshard(STRIDED, GATHERED).kept(0)),
]


@pytest.mark.parametrize("call", [pytest.param(c, id=i) for i, c in BLOWUP])
def test_a_rank_holding_more_than_MAX_TILES_boxes_is_refused_before_listing_them(
        call: Callable[[], Any]) -> None:
    with pytest.raises(MeshError) as info, bounded(300_000, 100 << 20):
        call()
    assert any(n in str(info.value) for n in ("2,097,152", "16,777,216")), str(info.value)


# ---- Sharding.local(full, rank) and Sharding.local_slices(rank, box) --------------------------
LOCAL_CASES: list[Case] = [
    ("wrong-shape", lambda: SRC.local(np.zeros((4, 4)), 0), ShardingError, ("(4, 4)", "(4, 3)")),
    ("a-list", lambda: SRC.local(FULL.tolist(), 0), MeshError, ("[[0.0, 1.0, 2.0]",)),
    ("None", lambda: SRC.local(None, 0), MeshError, ("None",)),
    ("a-junk-shape-attribute", lambda: SRC.local(types.SimpleNamespace(shape=None), 0),
     MeshError, ("namespace",)),
    ("a-right-shape-non-array", lambda: SRC.local(types.SimpleNamespace(shape=(4, 3)), 0),
     MeshTypeError, ("namespace",)),
    ("0d-an-int", lambda: SCALAR.local(5, 0), MeshTypeError, ("5",)),
    ("0d-None", lambda: SCALAR.local(None, 0), MeshTypeError, ("None",)),
    ("0d-an-empty-list", lambda: SCALAR.local([], 0), MeshTypeError, ("[]",)),
    ("rank-a-str", lambda: SRC.local(FULL, "0"), MeshTypeError, ("'0'",)),
    ("rank-a-bool", lambda: SRC.local(FULL, True), MeshTypeError, ("True",)),
    ("rank-outside-the-universe", lambda: SRC.local(FULL, 9), RankNotInMeshError, ("9",)),
]


def slices(box: Any) -> Any:
    if not hasattr(SRC, "local_slices"):
        pytest.skip("Sharding.local_slices is not in this version")
    return SRC.local_slices(2, box)


SLICE_CASES: list[Case] = [
    ("None", lambda: slices(None), MeshTypeError, ("None",)),
    ("an-int", lambda: slices(5), MeshTypeError, ("5",)),
    ("a-str", lambda: slices("ab"), MeshTypeError, ("'ab'",)),
    ("a-set", lambda: slices({(0, 2), (0, 3)}), MeshTypeError, ("set", "{")),
    ("a-str-bound", lambda: slices(((0, "x"), (0, 1))), MeshTypeError, ("'x'",)),
    ("a-float-bound", lambda: slices(((0.0, 2), (0, 3))), MeshTypeError, ("0.0",)),
    ("a-bool-bound", lambda: slices(((True, 2), (0, 3))), MeshTypeError, ("True",)),
    ("a-triple", lambda: slices(((0, 2, 9), (0, 3))), MeshError, ("(0, 2, 9)",)),
    ("a-reversed-range", lambda: slices(((2, 0), (0, 3))), ShardingError, ("(2, 0)",)),
    ("wrong-length", lambda: slices(((0, 2),)), ShardingError, ("((0, 2),)",)),
    ("not-held", lambda: slices(((0, 4), (0, 3))), ShardingError, ("((0, 4), (0, 3))",)),
]


@cases(LOCAL_CASES)
def test_bad_local_arguments_are_refused_naming_them(call: Any, expected: Any,
                                                     needles: Any) -> None:
    raises(call, expected, needles)


@cases(SLICE_CASES)
def test_bad_boxes_for_local_slices_are_refused_naming_them(call: Any, expected: Any,
                                                            needles: Any) -> None:
    raises(call, expected, needles)


# ---- Reshard.apply(shards) -----------------------------------------------------------------
def test_apply_without_a_sending_rank_names_the_missing_rank() -> None:
    with pytest.raises(ShardingError) as info:
        PLAN.apply({0: SHARDS[0]})
    message = str(info.value)
    assert any(f"source rank {r}" in message for r in (1, 2, 3)), message


APPLY_CASES: list[Case] = [
    ("None", lambda: PLAN.apply(None), MeshTypeError, ("None",)),
    ("a-list-of-arrays", lambda: PLAN.apply([SHARDS[r] for r in range(4)]), MeshTypeError,
     ("list",)),
    ("lists-not-arrays", lambda: PLAN.apply({r: SHARDS[r].tolist() for r in range(4)}),
     MeshTypeError, ("[[",)),
    ("strs-not-arrays", lambda: PLAN.apply({r: "x" for r in range(4)}), MeshTypeError,
     ("'x'",)),
    ("arrays-too-big", lambda: PLAN.apply({r: np.zeros((9, 9)) for r in range(4)}),
     ShardingError, ("(9, 9)",)),
    ("arrays-too-small", lambda: PLAN.apply({r: np.zeros((1, 1)) for r in range(4)}),
     ShardingError, ("(1, 1)",)),
    ("arrays-of-too-few-dims", lambda: PLAN.apply({r: np.zeros(4) for r in range(4)}),
     ShardingError, ("(4,)",)),
]


@cases(APPLY_CASES)
def test_bad_shards_for_apply_are_refused_naming_them(call: Any, expected: Any,
                                                      needles: Any) -> None:
    raises(call, expected, needles)


def test_apply_of_the_right_shards_gives_the_destination_blocks() -> None:
    got = PLAN.apply(SHARDS)
    assert sorted(got) == [4, 5, 6, 7]
    for r, block in got.items():
        np.testing.assert_array_equal(block, DST.local(FULL, r))


# ---- a seeded fuzz: junk at every argument; only MeshError subclasses escape -----------------
JUNK: list[Callable[[], Any]] = [
    lambda: None, lambda: "x", lambda: 1.5, lambda: True, lambda: -1, lambda: 2**64,
    lambda: [], lambda: {}, lambda: set(), lambda: object(), lambda: float("nan"),
]


def junk(rng: random.Random) -> Any:
    return rng.choice(JUNK)()


def maybe(rng: random.Random, good: Any) -> Any:
    return junk(rng) if rng.random() < 0.5 else good


def fuzz_placement(rng: random.Random) -> Any:
    kind = rng.randrange(5)
    if kind == 0:
        return Shard(junk(rng))
    if kind == 1:
        return StridedShard(maybe(rng, 0), maybe(rng, 2))
    if kind == 2:
        return Partial(junk(rng))
    if kind == 3:
        return junk(rng)
    return rng.choice([R, Shard(0), Partial()])


def fuzz_sharding(rng: random.Random) -> Any:
    placements = maybe(rng, [fuzz_placement(rng) if rng.random() < 0.5 else R
                             for _ in range(rng.choice([1, 2, 2, 3]))])
    shape = maybe(rng, [maybe(rng, 4) for _ in range(rng.randrange(4))])
    s = Sharding(maybe(rng, V), placements, shape)
    s.local_shape(maybe(rng, rng.randrange(4)))  # what was accepted must be usable
    return s


def fuzz_reshard(rng: random.Random) -> Any:
    plan = reshard(maybe(rng, SRC), maybe(rng, DST), maybe(rng, None),
                   itemsize=maybe(rng, 4))
    getattr(plan, rng.choice(["receives", "sends", "kept"]))(maybe(rng, 5))
    return plan.bytes_moved


FUZZED: list[Callable[[random.Random], Any]] = [
    lambda rng: Shard(junk(rng)),
    lambda rng: StridedShard(maybe(rng, 0), maybe(rng, 2)),
    lambda rng: Partial(junk(rng)),
    fuzz_placement,
    fuzz_sharding,
    fuzz_reshard,
]


@pytest.mark.parametrize("seed", range(4))
def test_junk_thrown_at_every_argument_raises_only_mesh_errors(seed: int) -> None:
    rng = random.Random(seed)
    refused = 0
    for _ in range(100):
        target = rng.choice(FUZZED)
        try:
            target(rng)
        except MeshError as e:
            assert str(e), f"an empty message from {type(e).__name__}"
            refused += 1
        except Exception as e:  # the point: nothing else may escape
            pytest.fail(f"{type(e).__name__} escaped {target}: {e}")
    assert refused > 50  # the junk did reach the checks


def test_the_error_hierarchy_of_the_tensor_wing() -> None:
    assert issubclass(ShardingError, MeshError) and issubclass(ShardingError, ValueError)
    assert issubclass(MeshTypeError, TypeError)
    assert mesh.MAX_TENSOR_DIMS == MAX_TENSOR_DIMS and mesh.MAX_TILES == MAX_TILES


@pytest.mark.parametrize("call", ["Sharding.local", "Reshard.apply", "RankMap.array",
                                  "MeshView.instance_array"])
def test_without_numpy_array_operations_raise_a_typed_error_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    view = MeshView.from_shape(2, ("tp",))
    s = Sharding(view, (Shard(0),), (4,))
    full = np.arange(4.0)
    locals_ = {r: s.local(full, r) for r in range(2)}
    plan = mesh.reshard(s, Sharding(view, (Replicate(),), (4,)))
    monkeypatch.setitem(sys.modules, "numpy", None)  # as if not installed
    run = {"Sharding.local": lambda: s.local(full, 0),
           "Reshard.apply": lambda: plan.apply(locals_),
           "RankMap.array": lambda: mesh.RankMap.explicit([1, 0]).array("int64"),
           "MeshView.instance_array": lambda: view.instance_array(0)}[call]
    with pytest.raises(mesh.NumpyMissingError, match=r"pip install -e '\.\[numpy\]'") as e:
        run()
    assert isinstance(e.value, ModuleNotFoundError) and e.value.name == "numpy"
    assert str(e.value).startswith(f"{call} needs NumPy")


# ---- Sharding.segments(d) and Sharding.holders(fixed): in range, or refused ---------------------
V3D = MeshView.from_shape((2, 3, 4), ("a", "b", "c"))
SEGMENTED = Sharding(V3D, (Shard(0), StridedShard(1, 2), R), (12, 8))
_JUNK = (st.integers(-6, 6) | st.integers(-(2**70), 2**70) | st.none() | st.booleans() |
         st.floats(allow_nan=True) | st.text(max_size=2) | st.tuples(st.integers(0, 2)))


def _valid_dim(d: object, size: int) -> bool:
    return type(d) is int and 0 <= d < size


@settings(max_examples=300, deadline=None)
@given(d=_JUNK)
def test_segments_answer_each_tensor_dim_and_refuse_anything_else_by_name(d: Any) -> None:
    """Law: ``segments(d)`` answers exactly when ``d`` is an int with ``0 <= d < ndim``
    (a negative one is refused, not counted from the end), and then its runs partition
    ``range(shape[d])``; anything else raises a MeshError naming ``d``."""
    if not _valid_dim(d, len(SEGMENTED.shape)):
        raises(lambda: SEGMENTED.segments(d), MeshError, (repr(d)[:20] if not isinstance(
            d, float) else "",))
        return
    runs = SEGMENTED.segments(d)
    assert [s for s, _, _ in runs] == list(itertools.accumulate([0] + [n for _, n, _ in runs]))[:-1]
    assert sum(n for _, n, _ in runs) == SEGMENTED.shape[d]


@settings(max_examples=300, deadline=None)
@given(fixed=st.dictionaries(_JUNK.filter(lambda x: not isinstance(x, float)), _JUNK,
                             max_size=4) | _JUNK)
def test_holders_answer_coordinates_of_the_view_and_refuse_anything_else_at_the_call(
        fixed: Any) -> None:
    """Law: ``holders(fixed)`` answers exactly when ``fixed`` maps view dims (ints
    ``0 <= i < ndim``) to coordinates on them (``0 <= k < shape[i]``; negatives refused,
    not wrapped), and then every rank listed has those coordinates and there are as many
    as the other dims' sizes multiply to; anything else raises a MeshError at the call,
    before anything is listed."""
    ok = isinstance(fixed, dict) and all(
        _valid_dim(i, V3D.ndim) and _valid_dim(k, V3D.shape[i]) for i, k in fixed.items())
    if not ok:
        raises(lambda: SEGMENTED.holders(fixed), MeshError, ())
        return
    ranks = list(SEGMENTED.holders(fixed))
    assert len(ranks) == math.prod(n for i, n in enumerate(V3D.shape) if i not in fixed)
    for r in ranks:
        c = V3D.coordinate(r)
        assert c is not None and all(c[i] == k for i, k in fixed.items())


@pytest.mark.parametrize(("call", "needles"), [
    (lambda: SEGMENTED.segments(-1), ("tensor dim -1", "0 to 1", "not counted from the end")),
    (lambda: SEGMENTED.segments(2), ("tensor dim 2", "(12, 8)")),
    (lambda: SEGMENTED.segments("0"), ("'0'",)),
    (lambda: SCALAR.segments(0), ("its dims: none",)),
    (lambda: SEGMENTED.holders({0: -1}), ("coordinate -1", "'a'", "0 to 1")),
    (lambda: SEGMENTED.holders({3: 0}), ("view dim 3", "('a', 'b', 'c')")),
    (lambda: SEGMENTED.holders({"a": 0}), ("'a'",)),
    (lambda: SEGMENTED.holders([0, 1]), ("mapping", "[0, 1]")),
])
def test_a_bad_dim_or_coordinate_is_refused_naming_it_and_the_choices(
        call: Callable[[], Any], needles: tuple[str, ...]) -> None:
    raises(call, MeshError, needles)


def test_the_holders_of_one_coordinate_of_a_2_to_the_40_rank_view_list_no_dim() -> None:
    """The fixed dim's offset is computed, not read from a list of all its offsets."""
    s = Sharding(MeshView.from_shape((2**40,), ("x",)), (R,), (4,))
    with bounded(20_000, 5 << 20):
        assert list(s.holders({0: 2**40 - 1})) == [2**40 - 1]


def test_a_plans_totals_past_their_bound_tell_a_python_caller_to_ask_per_rank() -> None:
    """The plan's totals take no limit=: the refusal names their bound and the per-rank
    queries, not a limit= to pass."""
    view = MeshView.from_shape((2**19, 8), ("dp", "tp"))
    plan = reshard(Sharding(view, (R, Shard(0)), (64,)), Sharding(view, (Shard(0), R), (64,)))
    with pytest.raises(TooManyRanksError) as info:
        plan.traffic()
    assert "at most 1,048,576, and this destination has 4,194,304" in str(info.value)
    assert "ask Reshard.receives(rank) and Reshard.sends(rank)" in info.value.hint
    assert "limit=" not in str(info.value)


def test_a_tile_held_by_more_ranks_than_a_plan_lists_is_refused_without_a_limit_hint() -> None:
    view = MeshView.from_shape((2**21, 2), ("dp", "tp"))
    plan = reshard(Sharding(view, (R, Shard(0)), (64,)),
                   Sharding(MeshView.from_ranks([0, 1], ("x",)), (Shard(0),), (64,)))
    with pytest.raises(TooManyRanksError) as info, bounded(200_000, 50 << 20):
        plan.receives(0)
    assert "lists the source ranks holding one tile, at most 1,048,576" in str(info.value)
    assert "2,097,152" in str(info.value) and "limit=" not in str(info.value)


def test_holders_past_their_limit_name_their_own_default() -> None:
    view = MeshView.from_shape((2**21, 2), ("dp", "tp"))
    with pytest.raises(TooManyRanksError) as info:
        Sharding(view, (R, Shard(0)), (64,)).holders({1: 0})
    assert "the default is 1,048,576" in str(info.value) and "limit=1,048,576 here" in str(
        info.value)


def test_a_listing_refusal_pickles_with_its_fact_and_hint() -> None:
    import pickle

    with pytest.raises(TooManyRanksError) as info:
        V.groups("dp", limit=1)
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.fact, back.hint, str(back)) == (info.value.fact, info.value.hint,
                                                str(info.value))
    assert str(back) == f"{back.fact}; {back.hint}" and "limit=1 here" in back.hint


_SEGMENTS_AT_THE_LIMIT = """
import resource, time
from mesh import MAX_TILES, MeshView, Shard, Sharding
s = Sharding(MeshView.from_shape((MAX_TILES,), ("x",)), (Shard(0),), (MAX_TILES * 4,))
before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
assert len(s.segments(0)) == MAX_TILES
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
      time.monotonic() - start)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_segments_at_the_tile_limit_take_bounded_memory() -> None:
    """A tensor dim cut into MAX_TILES pieces: its segments (about 170 MiB of tuples) are
    listed with no second list of them beside (377 MiB at the peak before, 193 after)."""
    import subprocess

    run = subprocess.run([sys.executable, "-c", _SEGMENTS_AT_THE_LIMIT], capture_output=True,
                         text=True, timeout=600, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    grown_mib, took = map(float, run.stdout.split())
    assert grown_mib < 300 and took < 120, (grown_mib, took)  # about 3 s on a busy machine
