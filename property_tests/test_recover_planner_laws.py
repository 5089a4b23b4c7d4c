"""Laws of ``mesh.recover`` over random plans, states, failures, spares and machines.

A world is a row-major (2 or 3 dims) view, the plan its world and one flattened view; the
state a few small tensors sharded over either with random ``Shard``, ``StridedShard`` and
``Replicate`` placements.  The oracle enumerates elements (``Sharding.runs``, the tensor
wing's answer per rank) and asks each way's plans per rank (``receives``, ``keeps``,
``lost``); it never reads the planner's own pricing code.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from recover_oracle import brute, ranked

from mesh import (
    Costs,
    MeshView,
    Replicate,
    Shard,
    Sharding,
    StridedShard,
    Topology,
    recover,
)


def elements(s: Sharding, rank: int) -> list[tuple[int, ...]]:
    per_dim = [[a + j for a, n in runs for j in range(n)] for runs in s.runs(rank)]
    return list(itertools.product(*per_dim))


def in_box(box: Any) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(a, b) for a, b in box]))


def ranks_of(view: MeshView) -> list[int]:
    return [view.ranks(i) for i in range(view.ranks.size)]


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(2, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    names = ("a", "b", "c")[:ndim]
    world = MeshView.from_shape(shape, names)
    n = world.size()
    flat = names[:2]

    def plan(w: MeshView) -> dict[str, MeshView]:
        return {"world": w, "flat": w.flatten(flat, "ab")}

    views = plan(world)
    state = {}
    for t in range(draw(st.integers(1, 3))):
        view = views[draw(st.sampled_from(["world", "flat"]))]
        tshape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=2)))
        placements = []
        for _ in range(view.ndim):
            d = draw(st.integers(0, len(tshape) - 1))
            placements.append(draw(st.sampled_from([Replicate(), Shard(d), StridedShard(d, 2)])))
        state[f"t{t}"] = Sharding(view, placements, tshape)
    failed = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(3, n), unique=True))
    per_host = draw(st.sampled_from([h for h in (1, 2, 3) if n % h == 0]))
    spare_hosts = draw(st.integers(0, 2))
    spares = list(range(n, n + spare_hosts * per_host))
    topology = draw(st.sampled_from([None, Topology(n + spare_hosts * per_host, per_host),
                                     Topology(n + spare_hosts * per_host, per_host,
                                              hosts_per_domain=2)]))
    return {"plan": plan, "world": world, "state": state, "failed": failed,
            "spares": spares, "topology": topology}


def tier(topology: Topology | None, a: int, b: int) -> str:
    if topology is None:
        return "across"
    if topology.host(a) == topology.host(b):
        return "host"
    return "domain" if topology.domain(a) == topology.domain(b) else "across"


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_every_element_arrives_once_from_a_rank_up_or_the_checkpoint(case: dict[str, Any]
                                                                    ) -> None:
    """LAW: for every way but restart and every tensor, each rank's new block is exactly the
    union, without repeats, of what it keeps, what it receives (never from a failed rank)
    and what it reads from storage; what it reads is held by no rank up; and the way's
    bytes per tier are those transfers summed (``local``: kept), by the topology's tiers."""
    r = recover(case["plan"], case["world"], case["failed"], state=case["state"],
                spares=case["spares"], topology=case["topology"], itemsize=1)
    dead = set(case["failed"])
    for way in r.ways:
        if way.kind.value == "restart":
            continue
        total = dict.fromkeys(("kept", "host", "domain", "across", "storage"), 0)
        for name, plan in way.moves.items():
            src = case["state"][name]
            up = {e for q in ranks_of(src.view) if q not in dead for e in elements(src, q)}
            for rank in ranks_of(plan.dst.view):
                got: list[tuple[int, ...]] = []
                keep = plan.keeps(rank)
                if keep is not None:
                    got += [e for box in keep.boxes for e in in_box(box)]
                    total["kept"] += keep.elements
                for t in plan.receives(rank):
                    assert t.source not in dead
                    got += [e for box in t.boxes for e in in_box(box)]
                    total[tier(case["topology"], t.source, rank)] += t.elements
                read = [e for box in plan.lost(rank) for e in in_box(box)]
                assert not set(read) & up
                total["storage"] += len(read)
                assert sorted(got + read) == sorted(elements(plan.dst, rank))
        assert dict(way.bytes) == total, way


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_ways_are_ranked_by_cost_and_hold_no_failed_rank(case: dict[str, Any]) -> None:
    """LAW: the ways are sorted by ``cost = seconds + (1 − throughput) · horizon``; no
    way's views hold a failed rank but ``wait``'s (the repaired ranks come back); each way's
    throughput is its ranks over the world's; a spare way exists exactly when there are as
    many spares as failed ranks."""
    r = recover(case["plan"], case["world"], case["failed"], state=case["state"],
                spares=case["spares"], topology=case["topology"])
    costs = [w.cost for w in r.ways]
    assert costs == sorted(costs)
    dead = set(case["failed"])
    n = case["world"].size()
    for w in r.ways:
        assert math.isclose(w.cost, w.seconds + (1 - w.throughput) * r.costs.horizon_s)
        assert w.throughput == next(iter(w.views.values())).ranks.size / n
        for v in w.views.values():
            inside = {q for q in dead if v.ranks.offset_of(q) is not None}
            assert inside == (dead if w.kind.value == "wait" else set())
    has_spare = any(w.kind.value == "spare" for w in r.ways)
    assert has_spare == (len(case["spares"]) >= len(dead))


SLOW = Costs(horizon_s=100.0, restart_s=5.0, repair_s=50.0, across_gbps=1e-6, domain_gbps=2e-6,
             host_gbps=4e-6, storage_gbps=1e-7, create_s=0.5, reconfigure_s=0.1)
"""Links so slow that bytes, not latencies, decide the ranking."""


@settings(max_examples=100, deadline=None)
@given(case=cases())
def test_the_ranking_and_every_price_equal_the_brute_force(case: dict[str, Any]) -> None:
    """LAW: on a small plan, each way's bytes per tier, communicators, throughput and
    seconds are what ``recover_oracle.brute`` computes from first principles (elements
    enumerated, groups listed, the law of ``mesh.Costs``), and the ways come in the order of
    the oracle's costs."""
    r = recover(case["plan"], case["world"], case["failed"], state=case["state"],
                spares=case["spares"], topology=case["topology"], costs=SLOW, itemsize=2)
    old, dead = case["plan"](case["world"]), set(case["failed"])
    for way in r.ways:
        want = brute(way, old, case["state"], dead, case["topology"], SLOW, 2)
        assert dict(way.bytes) == want["bytes"], way
        assert dict(way.communicators) == want["communicators"], way
        assert way.throughput == want["throughput"]
        assert math.isclose(way.seconds, want["seconds"], rel_tol=1e-9), way
    assert [(w.kind.value, w.label) for w in r.ways] == ranked(
        r, old, case["state"], dead, case["topology"], SLOW, 2)
