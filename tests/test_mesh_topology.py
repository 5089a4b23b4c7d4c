"""Topology queries and dim families, against brute force over explicit rank tensors."""

from __future__ import annotations

import itertools
import json
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from work_bound import bounded

from mesh import (
    Family,
    InvalidMeshDataError,
    MeshError,
    MeshTypeError,
    MeshView,
    RankMap,
    Topology,
    TopologyError,
    UnknownDimError,
)


def brute_groups(tensor: np.ndarray, k: int) -> np.ndarray:
    """Every group along axis ``k`` of an explicit rank tensor, one per row."""
    return np.moveaxis(tensor, k, -1).reshape(-1, tensor.shape[k])


def brute_most(rows: np.ndarray, host_of: np.ndarray) -> int:
    """The most distinct hosts in one row."""
    return max(len(set(host_of[row].tolist())) for row in rows)


def brute_family(rows: np.ndarray) -> frozenset[tuple[int, ...]]:
    return frozenset(map(tuple, rows.tolist()))


# ---- worked examples ---------------------------------------------------------------------
def test_default_hosts_are_consecutive_blocks() -> None:
    topo = Topology(16, 4)
    assert [topo.host(r) for r in range(16)] == [r // 4 for r in range(16)]
    assert topo.num_hosts == 4 and topo.host_name(2) == "host2"


def test_a_tp_dim_inside_a_host_and_a_dp_dim_across_hosts() -> None:
    view = MeshView.from_shape((4, 8), ("dp", "tp"))
    topo = Topology(32, 8)
    assert topo.is_intra_host(view, "tp") and topo.hosts_per_group(view, "tp") == 1
    assert not topo.is_intra_host(view, "dp") and topo.hosts_per_group(view, "dp") == 4
    assert topo.hosts_of(view, 13, "dp") == (0, 1, 2, 3)
    assert topo.hosts_of(view, 13, "tp") == (1,)


def test_a_group_straddling_a_host_boundary_counts_both_hosts() -> None:
    """tp=3 on hosts of 4: groups (0,1,2) stay, (3,4,5) straddles hosts 0 and 1."""
    view = MeshView.from_shape((4, 3), ("dp", "tp"))
    topo = Topology(12, 4)
    assert topo.hosts_per_group(view, "tp") == 2
    assert topo.hosts_of(view, 4, "tp") == (0, 1)
    assert topo.hosts_of(view, 0, "tp") == (0,)


def test_fast_domains_group_consecutive_hosts() -> None:
    """An NVL domain of 2 hosts of 4: a dp group of stride 4 spans 2 hosts but 1 domain."""
    view = MeshView.from_shape((2, 2, 4), ("pp", "dp", "tp"))
    topo = Topology(16, 4, hosts_per_domain=2)
    assert topo.hosts_per_group(view, "dp") == 2
    assert topo.domains_per_group(view, "dp") == 1 and topo.is_intra_domain(view, "dp")
    assert topo.domains_per_group(view, "pp") == 2 and not topo.is_intra_domain(view, "pp")
    assert [topo.domain(r) for r in (0, 7, 8, 15)] == [0, 0, 1, 1]


def test_a_partial_last_domain() -> None:
    topo = Topology(12, 2, hosts_per_domain=4)  # 6 hosts: domains of 4 and 2 hosts
    assert topo.num_domains == 2 and topo.domain(11) == 1


def test_explicit_hosts_numbered_by_first_appearance() -> None:
    topo = Topology.from_hosts(["b", "a", "b", "a"])
    assert [topo.host(r) for r in range(4)] == [0, 1, 0, 1]
    assert topo.host_name(1) == "a" and topo.devices_per_host is None
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    assert topo.hosts_per_group(view, "tp") == 2 and topo.hosts_per_group(view, "dp") == 1


def test_a_host_size_counts_the_ranks_on_it_without_listing_them() -> None:
    odd = Topology.from_hosts(["a", "b", "b", "a", "c"])
    assert [odd.host_size(h) for h in range(3)] == [2, 2, 1]
    assert Topology(2**40, 8).host_size(2**37 - 1) == 8


def test_regular_explicit_hosts_equal_the_default_topology() -> None:
    assert Topology.from_hosts([0, 0, 1, 1, 2, 2]) == Topology(6, 2)
    assert hash(Topology.from_hosts(["x", "x"])) == hash(Topology(2, 2))
    assert Topology(8, 2) != Topology(8, 4) != Topology(8, 4, hosts_per_domain=2)


def test_topology_pickles() -> None:
    for topo in (Topology(64, 8, hosts_per_domain=2), Topology.from_hosts([1, 0, 1])):
        assert pickle.loads(pickle.dumps(topo)) == topo


def test_a_view_over_a_sub_universe_fits_a_bigger_topology() -> None:
    view = MeshView.from_ranks([[6, 7], [8, 9]], ("dp", "tp"))  # hosts 1 and 2 of 4 ranks
    topo = Topology(16, 4)
    assert topo.hosts_per_group(view, "dp") == 2 and topo.hosts_per_group(view, "tp") == 1


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: Topology(12, 8), TopologyError, "not a whole number of hosts"),
    (lambda: Topology(0, 8), Exception, "world_size"),
    (lambda: Topology(8, 0), Exception, "devices_per_host"),
    (lambda: Topology(8, 2, hosts_per_domain=0), Exception, "hosts_per_domain"),
    (lambda: Topology(8.0, 2), MeshTypeError, "world_size"),
    (lambda: Topology(True, 1), MeshTypeError, "world_size"),
    (lambda: Topology.from_hosts([]), TopologyError, "at least one"),
    (lambda: Topology.from_hosts({"a", "b"}), MeshTypeError, "ordered"),
    (lambda: Topology.from_hosts(["a", 1.5]), MeshTypeError, r"hosts\[1\]"),
    (lambda: Topology.from_hosts([["a"]]), MeshTypeError, r"hosts\[0\]"),
    # an empty host name (from_dict refuses it, so such a topology could not be loaded back)
    (lambda: Topology.from_hosts(["a", ""]), TopologyError, r"hosts\[1\].*''"),
    (lambda: Topology(8, 2).host(8), TopologyError, "rank 8"),
    (lambda: Topology(8, 2).host(-1), TopologyError, "rank -1"),
    (lambda: Topology(8, 2).host_name(4), TopologyError, "host 4"),
    (lambda: Topology.from_hosts(["a", "b"]).host_size(2), TopologyError, r"host 2 .*< 2"),
    (lambda: Topology(8, 2).host_size(-1), TopologyError, "host -1"),
    (lambda: Topology(8, 2).hosts_per_group("tp", 0), MeshTypeError, "MeshView"),
    (lambda: Topology(8, 2).hosts_per_group(MeshView.from_shape(16), 0), TopologyError,
     "rank 15"),
    (lambda: Topology(8, 2).is_intra_host(MeshView.from_shape(8, ("x",)), "y"),
     UnknownDimError, "'y'"),
])
def test_bad_topology_input_is_refused_with_a_typed_error(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()


# ---- against brute force ---------------------------------------------------------------------
def _views(n: int) -> list[tuple[MeshView, list[np.ndarray]]]:
    """Views over ``n`` ranks reached by slicing, flattening, transposing and explicit maps,
    each with its instances as explicit rank tensors built here by NumPy (row-major
    ``arange``, then the same transpose, slice or merge of axes)."""
    shape = (2, 3, 2, 4) if n == 48 else (4, 4, 4)
    mesh = MeshView.from_shape(shape, None)
    ranks, last = np.arange(n).reshape(shape), len(shape) - 1
    # the slice (first, last dim): one instance per coordinate of the dims in between
    sliced = np.moveaxis(ranks, (0, last), (-2, -1)).reshape(-1, shape[0], shape[last])
    merged = ranks.reshape(shape[0], shape[1] * shape[2], *shape[3:])  # flatten dims 1 and 2
    perm = np.random.default_rng(n).permutation(n).reshape(shape)
    return [
        (mesh, [ranks]),
        (mesh.transpose(*reversed(mesh.names)), [ranks.T]),
        (mesh[mesh.names[0], mesh.names[-1]], list(sliced)),
        (mesh.flatten(mesh.names[1:3]), [merged]),
        (MeshView.from_ranks(perm.tolist(), mesh.names), [perm]),
        (MeshView.from_ranks(ranks.T.tolist(), None), [ranks.T]),
    ]


@pytest.mark.parametrize(("n", "per_host", "per_domain"), [
    (n, h, f) for n in (48, 64) for h in (1, 2, 3, 4, 8, 16) for f in (1, 2, 3) if n % h == 0])
def test_hosts_per_group_matches_brute_force(n: int, per_host: int, per_domain: int) -> None:
    topo = Topology(n, per_host, hosts_per_domain=per_domain)
    host_of = np.arange(n) // per_host
    for view, insts in _views(n):
        for k in range(view.ndim):
            rows = np.concatenate([brute_groups(t, k) for t in insts])
            assert topo.hosts_per_group(view, k) == brute_most(rows, host_of), (view, k)
            assert topo.domains_per_group(view, k) == brute_most(rows, host_of // per_domain)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 8]), min_size=1, max_size=4),
       st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), st.integers(1, 3), st.randoms())
def test_hosts_per_group_law(shape, per_host, per_domain, rnd) -> None:
    """Law: hosts_per_group(view, k) = max over the groups g along k of |{host(r) : r in g}|,
    for any view (sliced, transposed, flattened) and any regular or explicit topology."""
    n = math.prod(shape)
    world = -(-n // per_host) * per_host
    names = [f"d{i}" for i in range(len(shape))]
    view = MeshView.from_shape(tuple(shape), names)
    axes = list(range(len(shape)))  # the axis of the row-major rank tensor behind each dim
    if len(shape) > 1 and rnd.random() < 0.5:
        axes = rnd.sample(axes, rnd.randint(1, len(axes)))
        view = view[tuple(names[a] for a in axes)]
    if rnd.random() < 0.3:
        labels = [rnd.randrange(4) for _ in range(world)]
        topo = Topology.from_hosts(labels, hosts_per_domain=per_domain)
        number = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}  # first appearance
        hosts = np.asarray([number[lab] for lab in labels])
    else:
        topo = Topology(world, per_host, hosts_per_domain=per_domain)
        hosts = np.arange(world) // per_host  # consecutive blocks of per_host ranks
    ranks = np.arange(n).reshape(shape)
    for k, axis in enumerate(axes):
        rows = brute_groups(ranks, axis)  # a sliced dim's groups are its source axis's
        assert topo.hosts_per_group(view, k) == brute_most(rows, hosts)
        assert topo.domains_per_group(view, k) == brute_most(rows, hosts // per_domain)
        row = rows[rnd.randrange(len(rows))]
        r = int(row[rnd.randrange(len(row))])
        expected = tuple(dict.fromkeys(hosts[row].tolist()))  # in the group's order
        assert topo.hosts_of(view, r, k) == expected


def test_hosts_per_group_at_2_to_the_40_ranks_is_arithmetic() -> None:
    """A 2**40-rank plan: answered without listing (a listing would not fit in memory)."""
    n = 1 << 40
    view = MeshView.from_shape((1 << 20, 1 << 12, 1 << 8), ("dp", "cp", "tp"))
    topo = Topology(n, 8)
    assert [topo.hosts_per_group(view, d) for d in view.names] == [1 << 20, 1 << 12, 32]
    assert Topology(n, 1 << 9).hosts_per_group(view, "tp") == 1


# ---- families --------------------------------------------------------------------------------
def _family_examples() -> list[tuple[MeshView, int]]:
    base = MeshView.from_shape((2, 2, 4), ("a", "b", "c"))
    world = MeshView.from_shape(16, ("w",))
    return [
        *[(base, k) for k in range(3)],
        (base.flatten(("a", "b")), 0),
        (world.unflatten("w", (4, 4), ("x", "y")), 0),
        (world.unflatten("w", (4, 4), ("x", "y")), 1),
        (world.unflatten("w", (4, 2, 2), ("x", "y", "z")), 0),
        (base.transpose("c", "b", "a"), 0),
        (MeshView.from_ranks(np.arange(16).reshape(4, 4).T.tolist(), ("p", "q")), 0),
        (MeshView.from_ranks(np.arange(16).reshape(4, 4).T.tolist(), ("p", "q")), 1),
        (MeshView.from_ranks(np.arange(16)[::-1].reshape(4, 4).tolist(), ("p", "q")), 1),
        (MeshView.from_ranks(np.arange(16).reshape(2, 8).tolist(), ("p", "q")), 0),
        (MeshView.from_ranks([[1, 0, 3, 2], [5, 4, 7, 6], [9, 8, 11, 10], [13, 12, 15, 14]],
                             ("p", "q")), 0),
        (MeshView.from_ranks([[0, 1, 2, 3], [8, 9, 10, 11], [4, 5, 6, 7], [12, 13, 14, 15]],
                             ("p", "q")), 1),
        (MeshView.from_ranks([[0, 1, 2, 3], [8, 9, 10, 11], [4, 5, 6, 7], [12, 13, 14, 15]],
                             ("p", "q")), 0),
        (MeshView.from_shape((16, 1), ("p", "one")), 1),
        (MeshView.from_ranks([[r] for r in range(16)], ("p", "one")), 1),
    ]


def test_families_are_equal_exactly_when_the_ordered_groups_are() -> None:
    """Law: view.family(k) == other.family(j)  <=>  the two dims' sets of ordered groups
    are equal, over identity and explicit universes alike."""
    cases = _family_examples()
    for (v1, k1), (v2, k2) in itertools.product(cases, repeat=2):
        same = set(v1.groups(k1)) == set(v2.groups(k2))
        assert (v1.family(k1) == v2.family(k2)) == same, (v1, k1, v2, k2)


def test_a_permuted_explicit_universe_reaches_the_identity_family() -> None:
    transposed = MeshView.from_ranks([[0, 2], [1, 3]], ("tp", "dp"))
    assert transposed.family("tp") == MeshView.from_shape((2, 2), ("dp", "tp")).family("tp")
    assert transposed.family("tp") == Family(RankMap(4), MeshView.from_shape(2).layout[0])


def test_a_family_counts_its_groups() -> None:
    fam = MeshView.from_shape((4, 8), ("dp", "tp")).family("dp")
    assert (fam.group_size, fam.num_groups) == (4, 8)


def test_an_irregular_huge_placement_is_refused_quickly_not_enumerated() -> None:
    """Groups of 3,200,000 ranks that do not align with hosts of 6 (in domains of 7): exact
    counting would enumerate millions of placements; a TopologyError says so, in a few
    thousand Python steps and under 1 MiB.  (Its seconds, against a 2 s target:
    ``bench/time_bounds.py``.)"""
    view = MeshView.from_shape((1024, 9, 3125)).flatten((0, 2))
    topo = Topology(28_800_000, 6, hosts_per_domain=7)
    with bounded(events=20_000, peak_bytes=1 << 20), \
            pytest.raises(TopologyError, match="do not align with the hosts"):
        topo.domains_per_group(view, 0)


def test_irregular_small_placements_are_counted_exactly() -> None:
    """tp = 3 on hosts of 4 inside a (5, 3) mesh: groups (0,1,2) (3,4,5) (6,7,8) (9,10,11)
    (12,13,14) span 1, 2, 2, 1, 2 hosts; dp groups of stride 3 span up to 4 hosts."""
    view = MeshView.from_shape((5, 3), ("dp", "tp"))
    topo = Topology(16, 4)
    assert topo.hosts_per_group(view, "tp") == 2
    assert topo.hosts_per_group(view, "dp") == 4  # (2, 5, 8, 11, 14): hosts 0, 1, 2, 2, 3


# ---- explicit domains, devices, saving and loading --------------------------------------------
def test_partial_racks_are_explicit_domains() -> None:
    """Hosts of 2 in three racks of 3, 1 and 2 hosts: a dp group of stride 2 spans the hosts
    of one rack, the rack of one host leaves a dp group of 4 split over two racks."""
    hosts = [f"n{r // 2}" for r in range(12)]
    racks = ["A"] * 6 + ["B"] * 2 + ["C"] * 4
    topo = Topology.from_hosts(hosts, domains=racks)
    assert (topo.devices_per_host, topo.hosts_per_domain, topo.num_domains) == (2, None, 3)
    assert [topo.domain(r) for r in range(0, 12, 2)] == [0, 0, 0, 1, 2, 2]
    view = MeshView.from_shape((3, 2, 2), ("pp", "dp", "tp"))  # dp pairs: (0, 2), (4, 6), ...
    rows = np.arange(12).reshape(3, 2, 2).transpose(0, 2, 1).reshape(-1, 2)
    domain_of = np.asarray([0] * 6 + [1] * 2 + [2] * 4)
    assert topo.domains_per_group(view, "dp") == brute_most(rows, domain_of) == 2
    assert topo.sizes() == ((2,), (2, 4, 6))


def test_explicit_domains_that_are_regular_become_hosts_per_domain() -> None:
    topo = Topology.from_hosts([r // 4 for r in range(32)], domains=[r // 8 for r in range(32)])
    assert topo == Topology(32, 4, hosts_per_domain=2) and topo.hosts_per_domain == 2


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.lists(st.integers(0, 2),
       min_size=6, max_size=6), st.lists(st.integers(1, 4), min_size=1, max_size=3), st.randoms())
def test_domains_per_group_law_on_irregular_machines(host_sizes, racks, shape, rnd) -> None:
    """Law: for hosts of any sizes in any racks, domains_per_group(view, k) = max over the
    groups g along k of |{domain(r) : r in g}|, and first_crossing(view, k, level) is the
    first group of view.groups(k) spanning more than one host (domain), or None."""
    hosts = [h for h, size in enumerate(host_sizes) for _ in range(size)]
    n = len(hosts)
    labels = [racks[h] for h in hosts]
    topo = Topology.from_hosts(hosts, domains=labels)
    number = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}
    domain_of = np.asarray([number[lab] for lab in labels])
    ranks = list(range(n))
    rnd.shuffle(ranks)
    sizes = [s for s in shape if n % s == 0] or [1]
    view = MeshView.from_ranks(ranks, ("w",)).unflatten("w", (sizes[0], n // sizes[0]),
                                                         ("a", "b"))
    for k in range(2):
        groups = view.groups(k)
        rows = np.asarray(groups)
        assert topo.domains_per_group(view, k) == brute_most(rows, domain_of)
        assert topo.hosts_per_group(view, k) == brute_most(rows, np.asarray(hosts))
        for level, of in (("host", np.asarray(hosts)), ("domain", domain_of)):
            crossing = [g for g in groups if len(set(of[list(g)].tolist())) > 1]
            assert topo.first_crossing(view, k, level=level) == (
                crossing[0] if crossing else None)


def test_first_crossing_on_a_regular_machine_is_found_without_listing() -> None:
    """tp = 3 on hosts of 4 over 2**40 ranks: the second group (3, 4, 5) is the first to
    cross, found in a few thousand steps."""
    view = MeshView.from_shape((4 * 2**36, 3), ("dp", "tp"))
    topo = Topology(view.size(), 4)
    with bounded(events=50_000, peak_bytes=1 << 20):
        assert topo.first_crossing(view, "tp") == (3, 4, 5)
    assert Topology(view.size(), 3).first_crossing(view, "tp") is None


def test_devices_are_the_local_ranks_and_no_two_ranks_share_one() -> None:
    topo = Topology.from_hosts(["a", "a", "b", "b"], devices=[1, 0, 0, 1])
    assert [topo.device(r) for r in range(4)] == [1, 0, 0, 1] and topo.devices_per_host is None
    assert Topology.from_hosts(["a", "a", "b", "b"], devices=[0, 1, 0, 1]) == Topology(4, 2)
    with pytest.raises(TopologyError, match=r"two ranks claim one device: rank 0 and rank 1 .*"
                                            r"host 0 \(a\), device 3"):
        Topology.from_hosts(["a", "a"], devices=[3, 3])


def test_unordered_devices_are_refused_naming_the_argument() -> None:
    with pytest.raises(MeshTypeError, match=r"^devices must be an ordered sequence"):
        Topology.from_hosts(["a", "b"], devices={1, 2})


_SAVED = [
    Topology(16, 4), Topology(2**62, 8, hosts_per_domain=18),
    Topology.from_hosts([f"node{r // 4:03d}" for r in range(16)], hosts_per_domain=2),
    Topology.from_hosts(["b", "a", "b", "a", "c"]),
    Topology.from_hosts([r // 4 for r in range(20)], domains=[0] * 12 + [1] * 8),
    Topology.from_hosts(["x", "y", "y"], devices=[5, 2, 3], domains=["r", "s", "s"]),
]


@pytest.mark.parametrize("topo", _SAVED, ids=repr)
def test_a_topology_saved_and_loaded_is_the_same_machine(topo: Topology) -> None:
    data = json.loads(json.dumps(topo.to_dict()))
    back = Topology.from_dict(data)
    assert back == topo and hash(back) == hash(topo) and back.to_dict() == topo.to_dict()
    assert [back.host_name(h) for h in range(min(back.num_hosts, 8))] == \
        [topo.host_name(h) for h in range(min(topo.num_hosts, 8))]
    assert pickle.loads(pickle.dumps(topo)).to_dict() == topo.to_dict()


def test_the_saved_data_grows_with_the_hosts_not_the_ranks() -> None:
    """131,072 ranks on 32,768 hosts named node[00000-32767], in racks of 18 hosts (the last
    partial): a few hundred bytes.  With one rack cut short, the data names the racks
    (a run per rack), still not the ranks."""
    names = [f"node{h:05d}" for h in range(32768)]
    topo = Topology.from_hosts([names[r // 4] for r in range(131072)], hosts_per_domain=18)
    text = json.dumps(topo.to_dict())
    assert len(text) < 200 and '"node[00000-32767]"' in text
    racks = [0 if h < 10 else 1 + (h - 10) // 18 for h in range(32768)]  # 10, 18, 18, ...
    cut = Topology.from_hosts([names[r // 4] for r in range(131072)],
                              domains=[racks[r // 4] for r in range(131072)])
    data = cut.to_dict()
    assert data["ranks"] is None and len(data["domains"]) == len(set(racks))
    assert Topology.from_dict(json.loads(json.dumps(data))) == cut


def _data(**change: object) -> dict[str, object]:
    base: dict[str, object] = {"version": 1, "world": 8, "devices_per_host": None,
                               "ranks": [[0, 4, 0], [1, 4, 0]], "hosts_per_domain": 1,
                               "domains": None, "hosts": ["a", "b"]}
    return {**base, **change}


@pytest.mark.parametrize(("data", "error", "match"), [
    ([1], InvalidMeshDataError, "exactly the keys"),
    ({**_data(), "extra": 1}, InvalidMeshDataError, "exactly the keys"),
    ({k: v for k, v in _data().items() if k != "hosts"}, InvalidMeshDataError, "keys"),
    (_data(version=2), InvalidMeshDataError, "version 2"),
    (_data(world=8.0), InvalidMeshDataError, "'world'"),
    (_data(devices_per_host=4), InvalidMeshDataError, "exactly one of 'devices_per_host'"),
    (_data(ranks=None), InvalidMeshDataError, "exactly one of 'devices_per_host'"),
    (_data(domains=[[0, 2]]), InvalidMeshDataError, "exactly one of 'hosts_per_domain'"),
    (_data(ranks=[[0, 4]]), InvalidMeshDataError, r"'ranks'\[0\] must be \[host, count"),
    (_data(ranks=[[0, 0, 0], [1, 8, 0]]), InvalidMeshDataError, "count >= 1"),
    (_data(ranks=[[0, -1, 0]]), InvalidMeshDataError, "ints >= 0"),
    (_data(hosts="node[3-1]"), TopologyError, "A <= B"),
    (_data(hosts="node[0-99999999999]"), TopologyError, "more than 4,194,304 hosts"),
    (_data(hosts=[1, 2]), InvalidMeshDataError, "'hosts' must be"),
    # inconsistent
    (_data(ranks=[[0, 4, 0], [0, 4, 2]], hosts=["a"]), TopologyError,
     r"two ranks claim one device: rank 2 and rank 4 are both on host 0 \(a\), device 2"),
    (_data(ranks=[[0, 8, 0]]), TopologyError, r"host 1 \(b\) has no ranks"),
    (_data(ranks=[[0, 4, 0], [2, 4, 0]], hosts=None), TopologyError, "host 1 .* has no ranks"),
    (_data(ranks=[[0, 4, 0], [1, 8, 0]]), TopologyError, "12 ranks, more than the world"),
    (_data(ranks=[[0, 4, 0], [1, 2, 0]]), TopologyError, "6 ranks, fewer"),
    (_data(ranks=[[0, 4, 0], [3, 4, 0]]), TopologyError, "host 3, but 'hosts' names only 2"),
    (_data(hosts=["a", "a"]), TopologyError, "host 'a' is named twice"),
    (_data(hosts_per_domain=None, domains=[[0, 1], [2, 1]]), TopologyError,
     "domain 1 has no hosts"),
    (_data(hosts_per_domain=None, domains=[[0, 3]]), TopologyError, "domains hold 3 hosts"),
    (_data(devices_per_host=3, ranks=None), TopologyError, "not a whole number of hosts"),
    (_data(devices_per_host=2, ranks=None), TopologyError, "names 2 hosts, but 8 ranks"),
])
def test_a_bad_saved_topology_is_refused_naming_what_is_wrong(data, error, match) -> None:
    with bounded(events=200_000, peak_bytes=1 << 22), pytest.raises(error, match=match):
        Topology.from_dict(data)


def test_a_huge_explicit_topology_is_read_from_its_runs_without_listing() -> None:
    """2**62 ranks in two hosts of different devices: the runs answer host() and device();
    a query that must list the ranks refuses (a MeshError), in bounded work."""
    data = _data(world=2**62, ranks=[[0, 2**61, 0], [1, 2**61, 7]])
    with bounded(events=20_000, peak_bytes=1 << 20):
        topo = Topology.from_dict(data)
        assert topo.host(2**61) == 1 and topo.device(2**61 + 1) == 8
        assert topo.host_size(1) == 2**61
        with pytest.raises(MeshError):
            topo.hosts_per_group(MeshView.from_shape((2, 2**61), ("a", "b")), "a")


def test_a_huge_irregular_machine_is_refused_without_offering_a_limit() -> None:
    """Two hosts of 3 and 2**40 - 3 ranks cannot be answered by arithmetic: the queries (and
    place) refuse to list 2**40 ranks with a TooManyRanksError naming the count, and do not
    tell the user to pass a limit= they do not take."""
    from mesh import TooManyRanksError, place

    machine = Topology.from_dict({
        "version": 1, "world": 2**40, "devices_per_host": None,
        "ranks": [[0, 3, 0], [1, 2**40 - 3, 0]], "hosts_per_domain": 1, "domains": None,
        "hosts": None})
    view = MeshView.from_shape((2**20, 2**20), ("dp", "tp"))
    for query in (lambda: machine.hosts_per_group(view, "tp"),
                  lambda: machine.first_crossing(view, "tp"),
                  lambda: machine.ranks_on(1),
                  lambda: place((2**20, 2**20), ("dp", "tp"), machine, traffic={"tp": 1})):
        with pytest.raises(TooManyRanksError) as e:
            query()
        assert "1,099,511,627,77" in str(e.value) and "limit=" not in str(e.value)


# ---- Topology.from_runs -----------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=8),
       st.lists(st.sampled_from("xyz"), min_size=4, max_size=4))
def test_from_runs_is_from_hosts_of_the_same_ranks(pieces, domain_of) -> None:
    """Law: for runs ``(host, count, first device)`` whose devices go on from the host's last
    (what a hosts file gives), ``from_runs(runs, hosts=names, domains=...)`` equals
    ``from_hosts`` of every rank's host (and domain), and answers alike rank by rank."""
    used = sorted({h for h, _ in pieces})
    if used != list(range(len(used))):
        pieces = [(used.index(h), c) for h, c in pieces]  # no idle host
    next_device: dict[int, int] = {}
    runs = []
    for h, c in pieces:
        runs.append((h, c, next_device.get(h, 0)))
        next_device[h] = next_device.get(h, 0) + c
    hosts = max(h for h, _ in pieces) + 1
    names = [f"n{h}" for h in range(hosts)]
    per_rank = [names[h] for h, c in pieces for _ in range(c)]
    made = Topology.from_runs(runs, hosts=names, domains=domain_of[:hosts])
    ref = Topology.from_hosts(per_rank, domains=[domain_of[int(n[1:])] for n in per_rank])
    assert made == ref and made.to_dict() == ref.to_dict()
    assert [(made.host(r), made.device(r), made.domain(r)) for r in range(made.world_size)] \
        == [(ref.host(r), ref.device(r), ref.domain(r)) for r in range(ref.world_size)]


def test_from_runs_of_equal_hosts_is_the_regular_topology() -> None:
    t = Topology.from_runs([(0, 4, 0), (1, 4, 0), (2, 4, 0)], hosts_per_domain=2)
    assert t == Topology(12, 4, hosts_per_domain=2) and t.devices_per_host == 4
    assert t.to_dict()["ranks"] is None  # saved in the regular form


@pytest.mark.parametrize(("runs", "kwargs", "match"), [
    ([], {}, "at least one run"),
    ([(0, 4)], {}, r"runs\[0\] must be \(host, count, first_device\)"),
    ([(0, 0, 0)], {}, "count >= 1"),
    ([(-1, 2, 0)], {}, "host and device >= 0"),
    ([(0, 2**62, 0), (1, 2**62, 0), (2, 1, 0)], {}, "at most 2\\*\\*63 ranks"),
    ([(0, 4, 0), (2**62, 4, 0)], {},
     r"host 1 \(host1\) has no ranks.*on host 4,611,686,018,427,387,904: a topology of 8 "
     r"ranks has hosts 0 <= host < 8"),
    ([(0, 4, 0), (2, 4, 0)], {}, r"host 1 \(host1\) has no ranks"),
    ([(0, 4, 0), (1, 4, 0)], {"hosts": ["a"]}, "name each of the 2 hosts"),
    ([(0, 4, 0), (1, 4, 0)], {"hosts": ["a", "a"]}, "host 'a' is named twice"),
    ([(0, 4, 0), (1, 4, 0)], {"domains": ["x"]}, "one domain label per host"),
    ([(0, 4, 0), (1, 4, 0)], {"domains": ["x", "y"], "hosts_per_domain": 2}, "not both"),
    ([(0, 4, 0), (0, 4, 2)], {}, "two ranks claim one device"),
    ({(0, 4, 0)}, {}, "set"),
])
def test_bad_runs_are_refused_naming_what_is_wrong(runs, kwargs, match) -> None:
    with bounded(events=200_000, peak_bytes=1 << 22), pytest.raises(MeshError, match=match):
        Topology.from_runs(runs, **kwargs)


@pytest.mark.parametrize(("data", "match"), [
    (_data(ranks=[[0, 4, 0], [2**62, 4, 0]]),
     r"host 1 \(b\) has no ranks.*hosts 0 <= host < 8"),
    (_data(hosts_per_domain=None, domains=[[0, 1], [2**62, 1]]),
     r"domain 1 has no hosts.*2 hosts have domains 0 <= domain < 2"),
])
def test_an_index_past_the_world_is_refused_naming_it_and_the_bound(data, match) -> None:
    """Issue 34, item 4: an index is bounded by the world (hosts by the ranks, domains by
    the hosts) before any work that grows with it, and the error names index and bound."""
    with bounded(events=20_000, peak_bytes=1 << 20), pytest.raises(TopologyError, match=match):
        Topology.from_dict(data)
