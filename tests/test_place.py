"""Placement: the rank order ``mesh.place`` chooses is the best there is, on small worlds by
brute force over every rank order, on worlds up to 4,096 ranks over every assignment of dim
factors to host, domain and across levels, and never worse than torchtitan's or JAX's order.

The oracles (``tests/placement_oracle.py``) never call ``place``: they cost an order with the
α-β formula written out again and read hosts and domains from the topology's own queries or
plain lists.  The baselines are read from upstream (cited there): torchtitan's
``ParallelDims.build_mesh`` order and JAX's ``create_hybrid_device_mesh``.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from placement_oracle import (
    best_over_factor_levels,
    best_over_rank_orders,
    jax_hybrid_order,
    key_of,
    keys,
    machine,
    torchtitan_order,
)

from mesh import (
    MAX_PLACED_DIMS,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    Placement,
    Topology,
    TopologyError,
    UnknownDimError,
    compare,
    place,
)

GiB, MiB = 1 << 30, 1 << 20


# ---- small worlds: every rank order --------------------------------------------------------
def _racks(host_sizes: list[int], racks: list[int]) -> Topology:
    hosts = [h for h, s in enumerate(host_sizes) for _ in range(s)]
    return Topology.from_hosts(hosts, domains=[racks[h] for h in hosts])


SMALL_MACHINES = {
    "4 hosts of 4": Topology(16, 4),
    "4 hosts of 4, domains of 2": Topology(16, 4, hosts_per_domain=2),
    "8 hosts of 2, domains of 4": Topology(16, 2, hosts_per_domain=4),
    "3 hosts of 4, a partial domain": Topology(12, 4, hosts_per_domain=2),
    "hosts of 8, 4, 4": Topology.from_hosts([0] * 8 + [1] * 4 + [2] * 4),
    "hosts of 4, 4, 2, 2, 4 in racks of 2 and 3": _racks([4, 4, 2, 2, 4], [0, 0, 1, 1, 1]),
    "8 hosts of 2 in racks of 3, 1, 2, 2 hosts": _racks([2] * 8, [0, 0, 0, 1, 2, 2, 3, 3]),
    "4 hosts of 4, ranks round-robin": Topology.from_hosts([r % 4 for r in range(16)]),
    "4 hosts of 4 in 2 racks, interleaved": _racks([4, 4, 4, 4], [0, 1, 0, 1]),
    "2 hosts of 6 and 4 hosts of 1": Topology.from_hosts([0] * 6 + [1] * 6 + [2, 3, 4, 5]),
}
SHAPES = {16: [(2, 2, 4), (4, 4), (2, 8), (2, 2, 2, 2)], 12: [(3, 4), (2, 2, 3), (2, 6)]}
SLOW = {"8 hosts of 2 in racks of 3, 1, 2, 2 hosts": [(4, 4), (2, 2, 2, 2)],
        "2 hosts of 6 and 4 hosts of 1": [(4, 4), (2, 8)]}  # the oracle takes ~1 s per plan
TRAFFIC = [(1, 4, 16, 64), (16, 4, 1, 0), (4, 4, 4, 4), (0, 0, 0, 0), (1 << 10, 0, 1 << 20, 1)]


def _small_cases() -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [(name, shape, t[-len(shape):])
            for name, topo in SMALL_MACHINES.items()
            for shape in SLOW.get(name, SHAPES[topo.world_size])
            for t in (TRAFFIC[:3] if name in SLOW else TRAFFIC)]


@pytest.mark.parametrize(("machine_name", "shape", "weights"), _small_cases())
def test_the_placement_is_the_best_rank_order_of_a_small_world(machine_name, shape, weights):
    """For every machine, plan and traffic (in MiB per dim): the placed view's (estimate,
    estimate as if only hosts were fast) is the least over every rank order."""
    topo = SMALL_MACHINES[machine_name]
    names = tuple(f"d{i}" for i in range(len(shape)))
    traffic = {n: w * MiB for n, w in zip(names, weights)}
    view = place(shape, names, topo, traffic=traffic)
    assert key_of(view, topo, traffic) == _best(machine_name, shape, weights)
    assert view.shape == shape and view.names == names
    assert sorted(view.ranks(i) for i in range(view.ranks.size)) == list(range(topo.world_size))


@functools.cache
def _best(machine_name: str, shape: tuple[int, ...], weights: tuple[int, ...]
          ) -> tuple[float, float]:
    hosts, domain_of = machine(SMALL_MACHINES[machine_name])
    return best_over_rank_orders(shape, [w * MiB for w in weights], hosts, domain_of)


def test_the_small_worlds_tell_orders_apart() -> None:
    """The brute force is a test: in at least a quarter of the small cases the order as
    given (row-major over the ranks as numbered) is worse than the best rank order."""
    worse = 0
    cases = _small_cases()
    for machine_name, shape, weights in cases:
        names = tuple(f"d{i}" for i in range(len(shape)))
        traffic = {n: w * MiB for n, w in zip(names, weights)}
        given = key_of(MeshView.from_shape(shape, names), SMALL_MACHINES[machine_name], traffic)
        worse += given[0] > _best(machine_name, shape, weights)[0]
    assert worse >= len(cases) // 4, (worse, len(cases))


def test_the_rank_order_oracle_agrees_with_plain_enumeration() -> None:
    """The oracle's shortcuts (interchangeable hosts and domains, the bound) lose nothing: on
    8 ranks it finds what trying all 40,320 permutations finds."""
    topo = Topology.from_hosts([0, 0, 0, 0, 1, 1, 2, 2], domains=[0] * 4 + [1] * 4)
    hosts, domain_of = machine(topo)
    for shape, traffic in (((2, 2, 2), (MiB, 0, 9 * MiB)),):
        by_rank = [topo.host(r) for r in range(8)]
        best = min(
            keys(shape, traffic, *_crossings(np.asarray(p).reshape(shape), by_rank, topo))
            for p in itertools.permutations(range(8)))
        assert best_over_rank_orders(shape, traffic, hosts, domain_of) == best


def _crossings(tensor: np.ndarray, host_of: list[int], topo: Topology
               ) -> tuple[list[bool], list[bool]]:
    hc, dc = [], []
    for k in range(tensor.ndim):
        rows = np.moveaxis(tensor, k, -1).reshape(-1, tensor.shape[k]).tolist()
        hc.append(any(len({host_of[r] for r in row}) > 1 for row in rows))
        dc.append(any(len({topo.domain(r) for r in row}) > 1 for row in rows))
    return hc, dc


# ---- up to 4,096 ranks: every assignment of dim factors to levels ----------------------------
FACTOR_CASES = [
    (Topology(4096, 8, hosts_per_domain=4), (8, 8, 8, 8)),
    (Topology(4096, 4, hosts_per_domain=18), (16, 4, 8, 8)),  # 57 racks, the last of 16 hosts
    (Topology(3072, 8, hosts_per_domain=3), (4, 3, 16, 16)),
    (Topology(2048, 8, hosts_per_domain=1), (2, 16, 8, 8)),
]


@pytest.mark.parametrize(("topo", "shape"), FACTOR_CASES, ids=lambda x: repr(x))
@pytest.mark.parametrize("heavy", ["last", "first", "middle"])
def test_the_placement_is_the_best_assignment_of_factors_to_levels(topo, shape, heavy):
    names = tuple(f"d{i}" for i in range(len(shape)))
    weights = {"last": (1, 4, 64, 256), "first": (256, 64, 4, 1), "middle": (4, 256, 64, 1)}
    traffic = {n: w * MiB for n, w in zip(names, weights[heavy])}
    found = Placement.find(shape, names, topo, traffic=traffic)
    assert key_of(found.view, topo, traffic) == best_over_factor_levels(
        shape, names, topo, traffic)
    assert found.view.ranks.is_identity  # a regular machine: a layout over the world


# ---- never worse than torchtitan or JAX -----------------------------------------------------
NVL72 = Topology(4 * 72, 4, hosts_per_domain=18)  # 4 racks of 18 hosts of 4 GPUs
PARTIAL = _racks([4] * 48, [0] * 18 + [1] * 12 + [2] * 18)  # racks of 18, 12, 18 hosts
MIXED = Topology.from_hosts([h for h, s in enumerate([8, 8, 4, 4, 8, 4, 4, 8])
                             for _ in range(s)])
MIXED_RACKS = _racks([8, 8, 4, 4, 8, 4, 4, 8], [0, 0, 1, 1, 2, 2, 2, 3])
FLEETS = {
    "NVL72 racks": (NVL72, [(4, 9, 2, 4), (2, 36, 1, 4), (1, 18, 4, 4), (8, 9, 1, 4)]),
    "partial racks": (PARTIAL, [(2, 12, 1, 8), (1, 16, 3, 4), (4, 6, 2, 4), (3, 8, 2, 4)]),
    "8-GPU hosts with 4-GPU hosts": (MIXED, [(1, 12, 1, 4), (1, 6, 1, 8), (3, 2, 2, 4)]),
    "mixed hosts in racks": (MIXED_RACKS, [(1, 6, 1, 8), (2, 3, 2, 4), (1, 3, 2, 8)]),
}
NAMES = ("pp", "dp_shard", "cp", "tp")
FLEET_TRAFFIC = [(16, 256, 512, 1024), (0, 1024, 64, 8), (64, 64, 64, 64)]


def _fleet_cases() -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [(fleet, shape, t) for fleet, (_, shapes) in FLEETS.items() for shape in shapes
            for t in FLEET_TRAFFIC]


@pytest.mark.parametrize(("fleet", "shape", "weights"), _fleet_cases())
def test_never_worse_than_torchtitan_or_jax(fleet, shape, weights) -> None:
    topo = FLEETS[fleet][0]
    traffic = {n: w * MiB for n, w in zip(NAMES, weights)}
    found = Placement.find(shape, NAMES, topo, traffic=traffic)
    ours = key_of(found.view, topo, traffic)
    baselines = [torchtitan_order(shape, NAMES)] + [
        v for g in ("host", "domain") if (v := jax_hybrid_order(shape, NAMES, topo, g))]
    for base in baselines:
        assert ours[0] <= key_of(base, topo, traffic)[0], base
    # the estimate the placement reports is compare's for the same view
    total = compare({"p": found.view}, topo, traffic=traffic).to_dict()["rows"][-1]["values"][0]
    assert math.isclose(found.seconds, total, rel_tol=1e-12)


@pytest.mark.parametrize("fleet", list(FLEETS))
def test_a_dim_that_fits_a_domain_is_placed_inside_one_whenever_an_order_allows(fleet) -> None:
    """For every dim of every plan, made the heaviest: when some rank order keeps all its
    groups inside fast domains (its size divides every domain's; the order of the ranks
    domain by domain with the dim innermost shows it), 100% of the placed dim's groups lie
    inside one domain; when none does (a domain whose size it does not divide cannot be
    cut into its groups), none is claimed."""
    topo, shapes = FLEETS[fleet]
    in_order = topo.ranks_in_order()
    for shape in shapes:
        for heavy in range(4):
            traffic = {n: (GiB if i == heavy else MiB) for i, n in enumerate(NAMES)}
            view = place(shape, NAMES, topo, traffic=traffic)
            size = shape[heavy]
            witness = MeshView.from_ranks(np.asarray(in_order).reshape(-1, size).tolist(),
                                          ("rest", "d"))
            feasible = topo.is_intra_domain(witness, "d")
            groups = view.groups(NAMES[heavy])
            inside = sum(len({topo.domain(r) for r in g}) == 1 for g in groups) / len(groups)
            if feasible:
                assert inside == 1.0, (shape, NAMES[heavy])
            else:
                _, domain_sizes = topo.sizes()
                assert any(d % size for d in domain_sizes) and inside < 1.0


# ---- what the placement is ------------------------------------------------------------------
def test_a_regular_machine_gets_a_layout_and_a_shuffled_one_an_explicit_universe() -> None:
    traffic = {"tp": GiB, "dp": 256 * MiB}
    regular = place((4, 8), ("dp", "tp"), Topology(32, 8), traffic=traffic)
    assert regular.ranks.is_identity and str(regular.layout) == "(4,8):(8,1)"
    shuffled = Topology.from_hosts([r % 4 for r in range(32)])  # ranks dealt round-robin
    view = place((4, 8), ("dp", "tp"), shuffled, traffic=traffic)
    assert not view.ranks.is_identity
    assert view.group(0, "tp") == (0, 4, 8, 12, 16, 20, 24, 28)  # host 0's ranks
    assert shuffled.is_intra_host(view, "tp")


def test_hosts_of_differing_sizes_numbered_in_order_need_no_explicit_universe() -> None:
    topo = MIXED
    view = place((12, 4), ("dp", "tp"), topo, traffic={"tp": GiB})
    assert view.ranks.is_identity and topo.is_intra_host(view, "tp")


def test_the_report_shows_the_levels_the_runner_up_and_the_order_as_given() -> None:
    found = Placement.find((4, 8, 4, 8), ("pp", "dp", "cp", "tp"),
                           Topology(1024, 8, hosts_per_domain=4),
                           traffic={"tp": GiB, "cp": 512 * MiB, "dp": 256 * MiB})
    data = found.to_dict()
    assert [d["level"] for d in data["chosen"]["dims"]] == ["across", "across", "domain", "host"]
    assert data["runner_up"]["seconds"] > data["chosen"]["seconds"]
    assert MeshView.from_dict(data["chosen"]["view"]) == found.view
    text = str(found)
    assert "chosen: layout (4,8,4,8):(256,32,8,1) over ranks 0..1023" in text
    assert "runner-up: layout" in text and "as given" in text
    assert found.runner_up is not None and found.runner_up != found.view


def test_the_runner_up_is_worse_or_there_is_none() -> None:
    """The runner-up's estimate is worse than the chosen one's (docs/plans.md: null when every
    order weighed has the chosen estimate), never a tie printed as the runner-up.  One fast
    domain holding the whole machine: every order stays inside it.  Hosts of 1, 3, 2 and 2
    ranks in domains of 3 hosts (6 ranks, then 2): a = 4 leaves a domain whatever the
    order, and b = 2 placed "across" lands inside a domain anyway, a tie."""
    one = Placement.find((6,), ("a",), Topology(6, 2, hosts_per_domain=3), traffic={"a": GiB})
    assert one.runner_up is None and one.to_dict()["runner_up"] is None
    assert "runner-up: none" in str(one)
    machine = Topology.from_hosts(["h0", "h1", "h1", "h1", "h2", "h2", "h3", "h3"],
                                  hosts_per_domain=3)
    racks = Placement.find((4, 2), ("a", "b"), machine, traffic={"a": GiB, "b": MiB})
    data = racks.to_dict()
    assert [d["level"] for d in data["chosen"]["dims"]] == ["across", "domain"]
    assert data["runner_up"] is None or data["runner_up"]["seconds"] > data["chosen"]["seconds"]
    assert "(the same estimate); the same levels" not in str(racks)
    # a worse order exists: the runner-up of a machine of two whole racks
    two = Placement.find((2, 6), ("a", "b"), Topology(12, 2, hosts_per_domain=3),
                         traffic={"a": MiB, "b": GiB})
    assert two.to_dict()["runner_up"]["seconds"] > two.seconds


def test_placing_a_131072_rank_plan_lists_no_rank() -> None:
    """A 5-D plan over 131,072 ranks of a regular machine is chosen from arithmetic alone:
    bounded memory (its seconds: bench/placement_scale.py)."""
    from work_bound import bounded
    topo = Topology(131072, 4, hosts_per_domain=18)
    with bounded(events=3_000_000, peak_bytes=8 << 20):
        found = Placement.find((8, 4, 64, 4, 16), ("pp", "dp", "fsdp", "cp", "tp"), topo,
                               traffic={"tp": GiB, "cp": GiB // 2, "fsdp": GiB // 4})
    assert found.view.ranks.is_identity


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: place((4, 4), ("a", "b"), Topology(32, 8)), TopologyError, "16 ranks, but"),
    (lambda: place((4, 8), ("a",), Topology(32, 8)), InvalidSizeError, "one name per size"),
    (lambda: place((4, 8), ("a", "a"), Topology(32, 8)), InvalidSizeError, "unique"),
    (lambda: place((4, 8), ("a", "b"), Topology(32, 8), traffic={"c": 1}), UnknownDimError,
     "'c'"),
    (lambda: place((4, 8), ("a", "b"), 32), MeshTypeError, "mesh.Topology"),
    (lambda: place((2,) * (MAX_PLACED_DIMS + 1), tuple("abcdefghijk"),
                   Topology(2 ** (MAX_PLACED_DIMS + 1), 8)), InvalidSizeError, "at most 10"),
    (lambda: Placement({}, MeshView.from_shape(2), None), Exception, "Placement"),
])
def test_bad_placement_input_is_refused_with_a_typed_error(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
