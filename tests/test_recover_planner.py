"""``mesh.recover``: the ways on after a failure, priced and ranked.

The oracle (``recover_oracle.brute``) is written independently of the code under test: it
lists every element of every new local block, finds who held it before by enumerating every
old rank's block, prices each receiver by the law stated in ``mesh.Costs``'s docstring,
counts groups by listing them, and ranks the ways by ``seconds + (1 − throughput) ·
horizon``.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from recover_oracle import KINDS, brute, elements, ranked, ranks_of, rows, senders

from mesh import (
    Costs,
    MeshError,
    MeshTypeError,
    MeshView,
    RankNotInMeshError,
    Recovery,
    RecoveryError,
    Replicate,
    Shard,
    Sharding,
    StridedShard,
    SurvivalError,
    Topology,
    Way,
    recover,
)


def test_the_kinds_are_the_documented_ones_in_tie_break_order() -> None:
    assert tuple(k.value for k in Way.Kind) == KINDS
    assert Way.Kind.SPARE == "spare"


# ---- plans ---------------------------------------------------------------------------------
def world_only(world: MeshView) -> dict[str, MeshView]:
    return {"world": world}


def hsdp(world: MeshView) -> dict[str, MeshView]:
    """(dp, fsdp, tp): the world and the flattened data-parallel dims."""
    return {"world": world, "dp_fsdp": world.flatten(("dp", "fsdp"), "dp_fsdp")}


def state_of(views: dict[str, MeshView]) -> dict[str, Sharding]:
    """Tensors of one placement whose dims the meshes cut alike but of other lengths (priced
    together), and others cut unevenly (priced apart)."""
    w = views["world"]
    out = {"norm": Sharding(w, (Replicate(),) * w.ndim, (6,)),
           "step": Sharding(w, (Replicate(),) * w.ndim, ())}  # a scalar
    if w.names == ("dp", "tp"):
        out["wq"] = Sharding(w, (Replicate(), Shard(0)), (8, 3))
        out["wk"] = Sharding(w, (Replicate(), Shard(0)), (8, 5))  # wq's cuts, other lengths
        out["wv"] = Sharding(w, (Replicate(), Shard(0)), (7, 2))  # uneven cuts
        out["wo"] = Sharding(w, (Shard(1), Shard(0)), (5, 4))
    else:
        out["wq"] = Sharding(w, (Replicate(), StridedShard(0, 2), Shard(0)), (8, 3))
        out["w2"] = Sharding(w, (Replicate(), Shard(0), Shard(1)), (4, 6))
        out["w3"] = Sharding(w, (Replicate(), Shard(0), Shard(1)), (8, 2))  # w2's cuts
        out["flat"] = Sharding(views["dp_fsdp"], (Replicate(), Shard(1)), (3, 8))
    return out


CASES: list[tuple[str, Callable[[MeshView], dict[str, MeshView]], MeshView, list[int],
                  list[int], Topology | None]] = [
    ("dp-tp one rank, no spare", world_only, MeshView.from_shape((4, 2), ("dp", "tp")),
     [3], [], None),
    ("dp-tp one rank, a spare, hosts of 2", world_only,
     MeshView.from_shape((4, 2), ("dp", "tp")), [3], [8, 9], Topology(10, 2)),
    ("dp-tp two ranks, domains", world_only, MeshView.from_shape((4, 2), ("dp", "tp")),
     [2, 5], [], Topology(8, 2, hosts_per_domain=2)),
    ("hsdp one rank, spares", hsdp, MeshView.from_shape((2, 2, 2), ("dp", "fsdp", "tp")),
     [6], [8, 9], Topology(10, 2)),
    ("hsdp a whole dp-tp pair, hosts of 4", hsdp,
     MeshView.from_shape((2, 2, 2), ("dp", "fsdp", "tp")), [0, 1], [8, 9, 10, 11],
     Topology(12, 4)),
    ("hsdp two slices hit", hsdp, MeshView.from_shape((3, 2, 2), ("dp", "fsdp", "tp")),
     [1, 6], [], Topology(12, 2, hosts_per_domain=2)),
    ("hsdp one rank, hosts of one rank in domains of two", hsdp,  # the fast domain's tiles
     MeshView.from_shape((3, 2, 2), ("dp", "fsdp", "tp")), [0], [],  # tell receivers apart
     Topology(12, 1, hosts_per_domain=2)),
]


PATHS = {"default": {},
         "forced": {"mesh._decide._bulk": {"_SPARSE": 0, "_CLASS_TABLE": 0, "_CLASS_SPAN": 0,
                                           "_MIX": 0, "_MEMBERS": 0, "_DENSE_OLD": False,
                                           "_COARSER": False, "_ROW_MAJOR": False,
                                           "_SHARED_CLASSES": False, "_BROUGHT": False},
                    "mesh._recover._ways": {"_GATHER_FROM": 1},
                    "mesh._core._rankmap": {"_SCANS": 1 << 30},
                    "mesh._decide._price": {"_FEW_ROWS": 0},
                    "mesh._decide._egress": {"_TABLE": 0, "_SPAN": 0, "_FEW": 0,
                                             "_BOUND": False, "_ASKING": 2}},
         "sets": {"mesh._decide._bulk": {"_ROW_SETS": False}}}
"""The size thresholds that choose between a planner's exact paths, set so that the small
cases take the paths large worlds take (and the others).  Forced: coordinates listed
through rank tables (not from a row-major view's offsets) and by sorting, receiver classes
numbered by sorting at every step, old ranks searched, every row hash colliding (so the
rows are compared column by column), places' sets asked through their members' keys,
survivor worlds gathered with NumPy, rank look-ups by scanning, every way's receivers
priced by class (their rows summed and the slowest found all at once), and the groups'
classes numbered together, each group numbering its own (none shared by groups alike),
every sender listed (no bound first), each holder found by sorting keys and counted
listing every rank up, only the receivers of classes asking on a host or in a domain
listed there.
Sets: places named by their sets of tiles, not by their rows (as on an irregular
machine)."""


@pytest.fixture(params=[(c, paths) for paths in PATHS for c in CASES],
                ids=[f"{c[0]}, {paths} paths" for paths in PATHS for c in CASES])
def case(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[Any, ...]:
    (_, plan, world, failed, spares, topology), paths = request.param
    for module, values in PATHS[paths].items():
        for name, value in values.items():
            monkeypatch.setattr(f"{module}.{name}", value)
    state = state_of(plan(world))
    costs = Costs(horizon_s=100.0, restart_s=5.0, repair_s=50.0, across_gbps=1e-6,
                  domain_gbps=2e-6, host_gbps=4e-6, storage_gbps=1e-7, create_s=0.5,
                  reconfigure_s=0.1, copy_gbps=3e-6, shared_gbps=6e-6)  # slow links and
    # copies, and a shared limit that binds where many ranks receive: bytes decide
    r = recover(plan, world, failed, state=state, spares=spares, topology=topology,
                costs=costs, itemsize=2)
    return r, plan(world), state, set(failed), topology, costs


def test_every_way_priced_as_the_brute_force_prices_it(case: tuple[Any, ...]) -> None:
    r, old, state, failed, topology, costs = case
    assert r.ways
    for way in r.ways:
        want = brute(way, old, state, failed, topology, costs, 2)
        assert dict(way.bytes) == want["bytes"], way
        assert dict(way.communicators) == want["communicators"], way
        assert way.throughput == want["throughput"]
        assert way.seconds == pytest.approx(want["seconds"], rel=1e-9), way


def test_every_receivers_row_is_the_brute_force_row(case: tuple[Any, ...]) -> None:
    """Per way and tensor, each receiver's bytes per tier and the bytes of the block it
    rebuilds (all of it when it gets anything, none when it gets nothing), priced all at
    once (``bulk_rows``) and one by one (``few_rows``), equal the oracle's, which lists every
    element."""
    from mesh._decide._bulk import Memo, bulk_rows, few_rows

    r, old, state, failed, topology, _ = case
    names = {v: n for n, v in old.items()}
    for way in r.ways:
        if way.kind.value == "restart":
            continue
        for s in state.values():
            dst = Sharding(way.views[names[s.view]], s.placements, s.shape)
            want, _ = rows(s, dst, failed, topology, 2)
            memo = Memo(np, tuple(sorted(failed)), topology)
            universe = sorted(ranks_of(dst.view))
            assert dict(zip(universe, bulk_rows(memo, [(s, dst, 2)]).tolist())) == want
            one = few_rows(Memo(None, tuple(sorted(failed)), topology), s, dst,
                           tuple(universe))
            assert {q: [2 * b for b in row] for q, row in one.items()} == want


@pytest.mark.parametrize("arrays", [True, False], ids=["numpy", "no numpy"])
def test_every_senders_bytes_are_the_brute_force_senders(
        case: tuple[Any, ...], arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per way, each rank's bytes out per tier over the whole state (every sender listed:
    no bound first), with arrays and rank by rank, equal the oracle's, which charges each
    element a receiver gets to the holders at the tier nearest it in equal shares."""
    import mesh._decide._door as door
    import mesh._decide._egress as egress

    r, old, state, failed, topology, costs = case
    monkeypatch.setattr(egress, "_BOUND", False)
    if not arrays:
        monkeypatch.setattr(door, "numpy", lambda: None)
    seen: list[dict[int, list[float]]] = []
    listed, per_rank = egress.Egress._listed, egress.Egress._per_rank

    def from_lists(self: Any) -> dict[int, list[float]]:
        seen.append(listed(self))
        return seen[-1]

    def from_arrays(self: Any, parts: Any) -> Any:
        ranks, per = got = per_rank(self, parts)
        seen.append({q: [float(per[t][i]) for t in range(3)] for i, q in enumerate(ranks.tolist())
                     if any(per[t][i] for t in range(3))})
        return got

    monkeypatch.setattr(egress.Egress, "_listed", from_lists)
    monkeypatch.setattr(egress.Egress, "_per_rank", from_arrays)
    got = {}
    priced = door.priced

    def recorded(*args: Any) -> Any:
        seen.clear()
        way = priced(*args)
        got[way.kind.value, way.label] = seen[0] if seen else {}
        return way

    monkeypatch.setattr(door, "priced", recorded)
    plan = hsdp if "dp_fsdp" in old else world_only
    again = recover(plan, old["world"], sorted(failed), state=state, spares=list(r.spares),
                    topology=topology, costs=costs, itemsize=2)
    for way in again.ways:
        if way.kind.value == "restart":
            continue
        want = senders(way, old, state, failed, topology, 2)
        mine = got[way.kind.value, way.label]
        assert set(mine) == set(want), way
        for q, row in want.items():
            assert mine[q] == pytest.approx(row, rel=1e-9), (way, q)


def test_the_ranking_is_the_brute_force_ranking(case: tuple[Any, ...]) -> None:
    r, old, state, failed, topology, costs = case
    assert [(w.kind.value, w.label) for w in r.ways] == ranked(r, old, state, failed,
                                                               topology, costs, 2)


def test_every_element_of_every_new_block_is_delivered_exactly_once(
        case: tuple[Any, ...]) -> None:
    r, _, state, failed, *_ = case
    for way in r.ways:
        if way.kind.value == "restart":
            assert not way.moves
            assert all(box == (tuple((0, n) for n in state[t].shape),)
                       for t, box in way.lost.items())
            continue
        for name, plan in way.moves.items():
            lost = {e for box in way.lost[name] for e in itertools.product(
                *[range(a, b) for a, b in box])}
            for rank in ranks_of(plan.dst.view):
                got: list[tuple[int, ...]] = []
                keep = plan.keeps(rank)
                for t in (*plan.receives(rank), *(() if keep is None else (keep,))):
                    assert t.source not in failed, (way, name, t)
                    got += [e for box in t.boxes
                            for e in itertools.product(*[range(a, b) for a, b in box])]
                read = [e for box in plan.lost(rank)
                        for e in itertools.product(*[range(a, b) for a, b in box])]
                assert set(read) <= lost
                assert sorted(got + read) == sorted(elements(plan.dst, rank)), (way, name)


def test_a_moved_state_equals_the_new_sharding_of_the_same_values(
        case: tuple[Any, ...]) -> None:
    """Reshard.apply from the survivors' arrays and the checkpoint gives every new rank
    exactly what distributing the full tensor over the new view gives it."""
    r, _, state, failed, *_ = case
    for way in r.ways:
        for name, plan in way.moves.items():
            full = np.arange(math.prod(state[name].shape), dtype=np.float64).reshape(
                state[name].shape)
            shards = {q: plan.src.local(full, q) for q in ranks_of(plan.src.view)
                      if q not in failed}
            out = plan.apply(shards, checkpoint=full)
            for rank, got in out.items():
                assert np.array_equal(got, plan.dst.local(full, rank)), (way, name, rank)


def test_no_way_but_waiting_keeps_a_failed_rank_in_a_view(case: tuple[Any, ...]) -> None:
    r, *_, = case
    failed = set(r.failed)
    for way in r.ways:
        for v in way.views.values():
            inside = {q for q in failed if v.ranks.offset_of(q) is not None}
            assert inside == (failed if way.kind.value == "wait" else set()), way


def test_lost_boxes_are_exactly_what_no_rank_up_holds(case: tuple[Any, ...]) -> None:
    r, _, state, failed, *_ = case
    for name, s in state.items():
        up = {e for q in ranks_of(s.view) if q not in failed for e in elements(s, q)}
        everything = set(itertools.product(*[range(n) for n in s.shape]))
        for way in r.ways:
            if way.kind.value == "restart":
                continue
            lost = {e for box in way.lost[name]
                    for e in itertools.product(*[range(a, b) for a, b in box])}
            assert lost == everything - up, (way, name)


# ---- by example ----------------------------------------------------------------------------
DP_TP = MeshView.from_shape((4, 2), ("dp", "tp"))


def test_with_a_spare_the_spare_way_is_cheapest_and_reads_only_the_lost_rows() -> None:
    s = Sharding(DP_TP, (Shard(0), Shard(1)), (8, 4))  # no replica: rank 3's tile is lost
    r = recover(world_only, DP_TP, [3], state={"w": s}, spares=[8])
    best = r.ways[0]
    assert (best.kind.value, best.label) == ("spare", "spares [8]")
    assert best.lost["w"] == (((2, 4), (2, 4)),)
    assert best.bytes["storage"] == 4 * 4 and best.bytes["across"] == 0
    # rank 3's dp and tp groups get the spare, a member they did not have: created anew
    assert best.communicators == {"kept": 4, "reconfigured": 0, "created": 2}


def test_a_replica_sends_instead_of_the_checkpoint() -> None:
    s = Sharding(DP_TP, (Replicate(), Shard(1)), (8, 4))
    best = recover(world_only, DP_TP, [3], state={"w": s}, spares=[8]).ways[0]
    assert best.lost["w"] == () and best.bytes["storage"] == 0
    assert best.bytes["across"] == 8 * 2 * 4  # rank 3's half of the columns, float32
    senders = {t.source for t in best.moves["w"].receives(8)}
    assert senders and senders <= {1, 5, 7}


def test_a_rank_left_out_sends_its_block_to_every_receiver_and_they_wait_for_it() -> None:
    """The senders' side of the law: (dp, tp) = (2, 2), a tensor of 4 one-byte elements
    cut over tp.  Rank 3 fails; dropping 'tp' keeps ranks 0 and 2, each of which now needs
    the whole tensor, and the elements [2, 4) are held only by rank 1, left out but alive.
    At 1 byte/s (8e-9 Gb/s) on every link and for every rebuilt byte: each receiver gets 2
    bytes (2 s) and rebuilds its 4-byte block (4 s), but rank 1 sends 2 bytes to each (4 s),
    so the way takes 4 + 4 = 8 s, not 2 + 4 = 6 s."""
    world = MeshView.from_shape((2, 2), ("dp", "tp"))
    slow = Costs(across_gbps=8e-9, copy_gbps=8e-9, across_latency_us=0, rebind_s=0,
                 create_s=0, reconfigure_s=0)
    r = recover(world_only, world, [3], state={"w": Sharding(world, (Replicate(), Shard(0)),
                                                             (4,))}, costs=slow, itemsize=1)
    way = next(w for w in r.ways if w.label == "drop 'tp'")
    assert {t.source for t in way.moves["w"].receives(0)} == {1}
    assert {t.source for t in way.moves["w"].receives(2)} == {1}
    assert way.bytes["across"] == 4
    assert way.seconds == pytest.approx(8.0)


def test_replicas_share_the_sending_evenly_in_the_law() -> None:
    """(dp, tp) = (3, 2), 4 one-byte elements cut over tp, replicated over dp.  Rank 5
    fails; dropping 'tp' keeps ranks 0, 2 and 4, each asking for [2, 4), which ranks 1 and
    3 hold (both left out, alive).  The law charges each an equal share of the 6 bytes
    asked (3 s at 1 byte/s; the plan itself takes them in turn: one sends 4, the other 2),
    so the way takes 3 + 4 = 7 s: the senders' 3 s, then a 4-byte rebuild."""
    world = MeshView.from_shape((3, 2), ("dp", "tp"))
    slow = Costs(across_gbps=8e-9, copy_gbps=8e-9, across_latency_us=0, rebind_s=0,
                 create_s=0, reconfigure_s=0)
    s = Sharding(world, (Replicate(), Shard(0)), (4,))
    way = next(w for w in recover(world_only, world, [5], state={"w": s}, costs=slow,
                                  itemsize=1).ways if w.label == "drop 'tp'")
    sent = sorted(sum(t.elements for t in way.moves["w"].sends(q)) for q in (1, 3))
    assert sent == [2, 4] and way.bytes["across"] == 6
    assert way.seconds == pytest.approx(7.0)


def test_a_long_horizon_prefers_waiting_to_a_smaller_world() -> None:
    s = {"w": Sharding(DP_TP, (Replicate(), Shard(1)), (8, 4))}
    short = recover(world_only, DP_TP, [3], state=s, costs=Costs(horizon_s=10.0))
    long = recover(world_only, DP_TP, [3], state=s, costs=Costs(horizon_s=1e6))
    assert short.ways[0].kind.value == "drop" and long.ways[0].kind.value == "wait"


def test_every_impossible_way_is_refused_with_its_reason() -> None:
    r = recover(world_only, DP_TP, [0, 7], state={})
    reasons = {(x.kind.value, x.label): x.reason for x in r.refused}
    assert "2 failed ranks need 2 spares, 0 given" in reasons["spare", "spares"]
    assert "each of its 2 slices holds a failed rank" in reasons["drop", "drop 'tp'"]
    assert "needs a topology" in reasons["evict_host", "evict host"]


def test_a_dim_the_model_cannot_shrink_is_refused_naming_the_plan_error() -> None:
    def even_dp(world: MeshView) -> dict[str, MeshView]:
        if world.shape[0] % 2:
            raise ValueError(f"dp must be even, got {world.shape[0]}")
        return {"world": world}
    r = recover(even_dp, DP_TP, [3])
    reasons = {(x.kind.value, x.label): x.reason for x in r.refused}
    assert "dp must be even, got 3" in reasons["drop", "drop 'dp'"]


def test_no_checkpoint_refuses_restart_and_a_lost_element_is_an_error() -> None:
    kept = {"w": Sharding(DP_TP, (Replicate(), Shard(1)), (8, 4))}
    r = recover(world_only, DP_TP, [3], state=kept, checkpoint=False)
    assert "restart" not in {w.kind.value for w in r.ways}
    assert any(x.kind.value == "restart" for x in r.refused)
    gone = {"w": Sharding(DP_TP, (Shard(0), Shard(1)), (8, 4))}
    with pytest.raises(RecoveryError, match=r"tensor 'w': the box \(\(2, 4\), \(2, 4\)\)"):
        recover(world_only, DP_TP, [3], state=gone, checkpoint=False)


@pytest.mark.parametrize("bad, error, words", [
    ({"failed": [99]}, RankNotInMeshError, "failed rank 99"),
    ({"failed": []}, RecoveryError, "at least one failed rank"),
    ({"spares": [5]}, SurvivalError, "spare rank 5 is already in the view"),
    ({"state": {"w": Sharding(MeshView.from_shape((8,), ("x",)), (Replicate(),), (2,))}},
     RecoveryError, "state['w'] is sharded over"),
    ({"state": {"w": 3}}, MeshTypeError, "state['w'] must be a mesh.Sharding"),
    ({"costs": "cheap"}, MeshTypeError, "costs must be a mesh.Costs"),
    ({"topology": Topology(8, 2), "spares": [9]}, RecoveryError, "spare rank 9 is not on"),
    ({"topology": Topology(12, 2).with_domains(1), "spares": [8]}, None, None),
    ({"topology": Topology.from_hosts([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4]),
      "spares": [8]}, RecoveryError,
     "spare rank 8 is on host 4 of 4 devices"),
    ({"itemsize": 0}, RecoveryError, "itemsize must be an int >= 1"),
    ({"limit": -1}, RecoveryError, "limit must be an int >= 0"),
    ({"checkpoint": 1}, MeshTypeError, "checkpoint must be a bool"),
])
def test_bad_input_is_a_typed_error_naming_the_value(bad: dict[str, Any], error: Any,
                                                     words: str | None) -> None:
    args: dict[str, Any] = {"failed": [3], **bad}
    failed = args.pop("failed")
    if error is None:
        assert isinstance(recover(world_only, DP_TP, failed, **args), Recovery)
        return
    with pytest.raises(error) as got:
        recover(world_only, DP_TP, failed, **args)
    assert isinstance(got.value, MeshError) and words in str(got.value)


@pytest.mark.parametrize("field, value, error", [
    ("across_gbps", -1, RecoveryError), ("across_gbps", 0, RecoveryError),
    ("restart_s", float("nan"), RecoveryError), ("create_s", float("inf"), RecoveryError),
    ("horizon_s", "1h", MeshTypeError), ("repair_s", True, MeshTypeError),
    ("rebind_s", -0.5, RecoveryError), ("copy_gbps", 0, RecoveryError),
    ("shared_gbps", 0, RecoveryError), ("shared_gbps", float("inf"), RecoveryError),
    ("shared_gbps", "fast", MeshTypeError),
])
def test_a_bad_cost_is_a_typed_error_naming_the_field(field: str, value: Any,
                                                      error: type[Exception]) -> None:
    with pytest.raises(error, match=field if error is RecoveryError else "a cost must be"):
        Costs(**{field: value})


def test_costs_defaults_are_the_documented_ones() -> None:
    assert Costs().to_dict() == {
        "host_gbps": 3600.0, "domain_gbps": 3600.0, "across_gbps": 400.0,
        "host_latency_us": 2.0, "domain_latency_us": 3.0, "across_latency_us": 10.0,
        "storage_gbps": 16.0, "copy_gbps": 12000.0, "shared_gbps": None, "create_s": 2.0,
        "reconfigure_s": 0.2,
        "rebind_s": 1.0,
        "restart_s": 600.0, "repair_s": 3600.0, "horizon_s": 3600.0}


def test_a_recovery_is_json_and_values_are_not_constructed() -> None:
    s = {"w": Sharding(DP_TP, (Shard(0), Shard(1)), (8, 4))}
    r = recover(world_only, DP_TP, [3], state=s, spares=[8])
    data = json.loads(json.dumps(r.to_dict()))
    assert data["ways"][0]["kind"] == "spare" and data["ways"][0]["lost"]["w"] == [[[2, 4],
                                                                                   [2, 4]]]
    assert data["refused"] and "across_gbps" in data["costs"]
    assert "spare" in r.table().splitlines()[2]
    with pytest.raises(MeshTypeError, match=r"made by mesh\.recover"):
        Way()
    assert pickle.loads(pickle.dumps(Costs(across_gbps=5))) == Costs(across_gbps=5)
    assert pickle.loads(pickle.dumps(r)).to_dict() == r.to_dict()


def test_moves_and_lost_list_the_tensors_in_the_state_order() -> None:
    shard, rep = (Shard(0), Shard(1)), (Replicate(), Shard(1))
    state = {"z": Sharding(DP_TP, shard, (8, 4)), "w": Sharding(DP_TP, rep, (8, 4)),
             "a": Sharding(DP_TP, shard, (8, 4))}
    for way in recover(world_only, DP_TP, [3], state=state, spares=[8]).ways:
        assert list(way.lost) == ["z", "w", "a"]
        assert list(way.moves) == ([] if way.kind.value == "restart" else ["z", "w", "a"])


def test_without_numpy_every_way_is_priced_the_same(case: tuple[Any, ...],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Pricing every receiver with arrays and rank by rank (no NumPy) agree."""
    r, old, state, failed, topology, costs = case
    import mesh._decide._door as door
    monkeypatch.setattr(door, "numpy", lambda: None)
    plan = hsdp if "dp_fsdp" in old else world_only
    again = recover(plan, old["world"], sorted(failed), state=state, spares=list(r.spares),
                    topology=topology, costs=costs, itemsize=2)
    assert [(w.kind, w.label, dict(w.bytes), w.seconds) for w in again.ways] == \
        [(w.kind, w.label, dict(w.bytes), w.seconds) for w in r.ways]


def test_near_holders_found_by_table_and_by_binary_search_agree(
        case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Key sets looked up in a table (small ranges) and by binary search give one answer."""
    r, old, state, failed, topology, costs = case
    import mesh._decide._bulk as bulk
    monkeypatch.setattr(bulk, "_DENSE", 0)
    plan = hsdp if "dp_fsdp" in old else world_only
    again = recover(plan, old["world"], sorted(failed), state=state, spares=list(r.spares),
                    topology=topology, costs=costs, itemsize=2)
    assert [(w.label, dict(w.bytes)) for w in again.ways] == \
        [(w.label, dict(w.bytes)) for w in r.ways]


@pytest.mark.parametrize("n", [1 << 20, 1 << 40])
def test_pricing_a_few_receivers_and_finding_lost_boxes_do_not_list_the_world(n: int) -> None:
    """The repaired rank's bytes (``few_rows``, what spares and waiting are priced by) and
    the lost boxes come from the failed ranks' hosts and domains only: the same work at
    2**20 and 2**40 ranks."""
    from work_bound import bounded

    from mesh._decide._bulk import Memo, few_rows
    from mesh._decide._door import lost_boxes
    world = MeshView.from_shape((n // 8, 8), ("dp", "tp"))
    s = Sharding(world, (Replicate(), Shard(0)), (64, 4))  # tp coordinate t: rows 8t..8t+8
    topology = Topology(n, 8, hosts_per_domain=2)  # hosts of 8, domains of 2 hosts
    with bounded(events=60_000, peak_bytes=1 << 20):
        rows = few_rows(Memo(None, (13,), topology), s, s, (13,))
        lost = lost_boxes(s, (13,))
    # rank 13 (dp 1, tp 5) lost its rows 40..48 (32 elements); on its host (8-15) only it
    # holds them; in its domain (0-15) rank 5 does: [host, domain, cross, storage, and the
    # block it rebuilds: all 32, as it gets something]
    assert rows == {13: [0, 32, 0, 0, 32]}
    assert lost == ()  # n / 8 - 1 other ranks hold them, counted, not listed


@pytest.mark.parametrize("seed", range(5))
def test_tier_tallies_by_bincount_and_tier_by_tier_equal_a_plain_sum(seed: int) -> None:
    """Each receiver's bytes per tier are its cells' sizes summed by tier code (4: kept,
    its own column), whether summed by float64 ``bincount`` (sums below 2**53) or tier by
    tier in int64 (above): both equal the plain Python sum."""
    from mesh._decide._bulk import _tallied

    rng = np.random.default_rng(seed)
    code = rng.integers(0, 5, size=(50, 7))
    size = rng.integers(0, 1 << 40, size=(50, 7))
    want = [[int(sum(int(s) for c, s in zip(cr, sr) if c == t)) for t in range(5)]
            for cr, sr in zip(code.tolist(), size.tolist())]
    assert _tallied(np, code, size, 1 << 52).tolist() == want
    assert _tallied(np, code, size, 1 << 60).tolist() == want


def test_coarser_classes_map_through_the_finest_only_when_they_are_functions_of_it() -> None:
    """A group's receiver classes are priced through the finest group's exactly when each
    fine class lies in one class of the group: the table then gives it; else None (and the
    classes are numbered together)."""
    np = pytest.importorskip("numpy")
    from mesh._decide._bulk import _coarser

    fine = np.array([0, 0, 1, 2, 1, 2])
    assert _coarser(np, fine, 3, np.array([5, 5, 7, 5, 7, 5])).tolist() == [5, 7, 5]
    assert _coarser(np, fine, 3, fine).tolist() == [0, 1, 2]
    assert _coarser(np, fine, 3, np.array([5, 6, 7, 5, 7, 5])) is None  # class 0 split
    assert _coarser(np, fine, 3, np.array([5, 5, 7, 5, 7, 4])) is None  # class 2 split
