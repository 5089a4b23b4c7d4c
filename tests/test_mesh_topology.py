"""Topology queries and dim families, against brute force over explicit rank tensors."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from work_bound import bounded

from mesh import (
    Family,
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
