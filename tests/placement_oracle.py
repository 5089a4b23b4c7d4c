"""Oracles for placement: brute forces over rank orders, and the orders torchtitan and JAX use.

Nothing here calls ``mesh.place``; costs come from the same α-β formula as ``mesh.Links``
written out again (:func:`seconds`), and hosts and domains from plain lists (a machine is
``hosts``, a list of host sizes, and ``domain_of``, each host's domain, hosts numbered in
rank order).

- :func:`best_over_rank_orders` searches every rank order of a world of at most 16 ranks:
  each coordinate of the mesh (row-major) gets a host; ranks of one host are interchangeable
  (only hosts and domains enter the estimate), and so are empty hosts of the same size in
  the same domain, and empty domains holding the same hosts, so one of each is tried.  A
  branch stops once the dims it already forces across (a group that holds two hosts or
  two domains) make it no better than the best found: a dim only ever gains crossings as
  coordinates are added, so that bound is exact.
- :func:`best_over_factor_levels` puts every factorization of every dim into (across,
  domain, host) factors on a regular machine, lays the factors out across-outermost, and
  evaluates each layout with the topology's own group queries.
- :func:`torchtitan_order` and :func:`jax_hybrid_order` are the baselines.  torchtitan
  (pytorch/torchtitan, ``torchtitan/distributed/parallel_dims.py``, commit
  73bb964d8f66f585d977b40fe3de88301cdd03cd, ``ParallelDims.build_mesh``) calls
  ``init_device_mesh`` over the dims of size > 1 in the fixed order pp, dp_replicate,
  dp_shard, cp, tp: row-major over torchrun's ranks.  JAX (jax-ml/jax,
  ``jax/experimental/mesh_utils.py``, commit c3dba368140a5c243b915d24d16b9379ddd11e33,
  ``create_hybrid_device_mesh``) groups devices into granules (a process, that is a host,
  on GPU: ``process_is_granule``), lays out each granule as ``mesh_shape`` (row-major on
  GPU) and the granules as ``dcn_mesh_shape``, and joins them with ``np.block``: dim ``i``
  of the result is ``dcn_i`` blocks of ``ici_i``.  The caller chooses the split; here the
  ICI shape is filled from the last (most network-intensive, JAX's convention) dim inward
  with the largest factor that still fits the granule, and the DCN shape takes the rest;
  where the granules differ in size, or the split cannot fill one, JAX has no such mesh.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from layout import Layout
from mesh import Links, MeshView, RankMap, Topology

LINKS = Links()


def seconds(nbytes: int, g: int, inside: bool, links: Links = LINKS) -> float:
    """A ring all-reduce of ``nbytes`` over ``g`` ranks: mesh.Links' formula, written out."""
    if g == 1:
        return 0.0
    gbps = links.intra_host_gbps if inside else links.inter_host_gbps
    lat = links.intra_host_latency_us if inside else links.inter_host_latency_us
    return 2 * (g - 1) / g * 8 * nbytes / (gbps * 1e9) + 2 * (g - 1) * lat * 1e-6


def q(x: float) -> float:
    return float(f"{x:.9g}")


def keys(sizes: Sequence[int], traffic: Sequence[int], host_cross: Sequence[bool],
         domain_cross: Sequence[bool]) -> tuple[float, float]:
    """(estimate, estimate as if only hosts were fast) of dims crossing as given."""
    est = sum(seconds(b, s, not c) for s, b, c in zip(sizes, traffic, domain_cross))
    host = sum(seconds(b, s, not c) for s, b, c in zip(sizes, traffic, host_cross))
    return q(est), q(host)


def best_over_rank_orders(sizes: Sequence[int], traffic: Sequence[int], hosts: Sequence[int],
                          domain_of: Sequence[int]) -> tuple[float, float]:
    """The least (estimate, host-only estimate) over every rank order."""
    n = math.prod(sizes)
    assert sum(hosts) == n
    coords = list(itertools.product(*[range(s) for s in sizes]))
    k = len(sizes)
    # for each coordinate and dim, the first coordinate (row-major) of its group along the dim
    first = [[coords.index((*c[:d], 0, *c[d + 1:])) for d in range(k)] for c in coords]
    host_class = [(domain_of[h], hosts[h]) for h in range(len(hosts))]
    domains = sorted(set(domain_of))
    domain_class = {d: tuple(sorted(hosts[h] for h in range(len(hosts)) if domain_of[h] == d))
                    for d in domains}
    left = list(hosts)
    on = [-1] * n
    best = [(math.inf, math.inf)]

    def bound(hc: list[bool], dc: list[bool]) -> tuple[float, float]:
        return keys(sizes, traffic, hc, dc)

    def visit(i: int, hc: list[bool], dc: list[bool]) -> None:
        if bound(hc, dc) >= best[0]:
            return
        if i == n:
            best[0] = bound(hc, dc)
            return
        tried_host: set[tuple[int, int]] = set()
        tried_domain: set[tuple[int, ...]] = set()
        for h in range(len(hosts)):
            if not left[h]:
                continue
            if left[h] == hosts[h]:  # an empty host: one per class
                if host_class[h] in tried_host:
                    continue
                tried_host.add(host_class[h])
                d = domain_of[h]
                empty = all(left[x] == hosts[x] for x in range(len(hosts)) if domain_of[x] == d)
                if empty:  # an empty domain: one per class of domain
                    if (domain_class[d], hosts[h]) in tried_domain:
                        continue
                    tried_domain.add((domain_class[d], hosts[h]))
            nh, nd = list(hc), list(dc)
            for dim in range(k):
                f = first[i][dim]
                if f != i:
                    nh[dim] = nh[dim] or on[f] != h
                    nd[dim] = nd[dim] or domain_of[on[f]] != domain_of[h]
            on[i], left[h] = h, left[h] - 1
            visit(i + 1, nh, nd)
            on[i], left[h] = -1, left[h] + 1

    visit(0, [False] * k, [False] * k)
    return best[0]


def key_of(view: MeshView, topology: Topology, traffic: dict[str, int]) -> tuple[float, float]:
    """(estimate, host-only estimate) of a view, from the topology's group queries."""
    sizes, nbytes = view.shape, [traffic.get(d, 0) for d in view.names]
    hc = [not topology.is_intra_host(view, d) for d in view.names]
    dc = [not topology.is_intra_domain(view, d) for d in view.names]
    return keys(sizes, nbytes, hc, dc)


def _triples(s: int) -> list[tuple[int, int, int]]:
    """Every (across, domain, host) with product ``s``."""
    divs = [d for d in range(1, s + 1) if s % d == 0]
    return [(a, d, s // (a * d)) for a in divs for d in divs if (s // a) % d == 0]


def best_over_factor_levels(sizes: Sequence[int], names: Sequence[str], topology: Topology,
                            traffic: dict[str, int]) -> tuple[float, float]:
    """The least key over every assignment of dim factors to across, domain and host levels
    (across modes outermost, each level in the dims' order), on a regular machine."""
    cache: dict[tuple[str, str], tuple[bool, bool]] = {}
    best = (math.inf, math.inf)
    for split in itertools.product(*[_triples(s) for s in sizes]):
        modes = [(lv, i, split[i][lv]) for lv in range(3) for i in range(len(sizes))]
        extent = [m[2] for m in modes]
        stride = [math.prod(extent[j + 1:]) for j in range(len(modes))]
        shape, strides = [], []
        for i in range(len(sizes)):
            mine = [(extent[j], stride[j]) for j, m in enumerate(modes) if m[1] == i]
            shape.append(tuple(e for e, _ in mine))
            strides.append(tuple(s for _, s in mine))
        hc, dc = [], []
        for i, name in enumerate(names):
            sig = (str(shape[i]), str(strides[i]))
            if sig not in cache:
                dim = MeshView(Layout((shape[i],), (strides[i],)), (name,),
                               RankMap(math.prod(sizes)))
                cache[sig] = (not topology.is_intra_host(dim, 0),
                              not topology.is_intra_domain(dim, 0))
            hc.append(cache[sig][0])
            dc.append(cache[sig][1])
        best = min(best, keys(sizes, [traffic.get(n, 0) for n in names], hc, dc))
    return best


TORCHTITAN_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


def torchtitan_order(sizes: Sequence[int], names: Sequence[str]) -> MeshView:
    """torchtitan's mesh: its dims in its fixed order, row-major over torchrun's ranks (the
    names must be torchtitan's), returned with the dims in the given order."""
    order = sorted(range(len(names)), key=lambda i: TORCHTITAN_ORDER.index(names[i]))
    view = MeshView.from_shape(tuple(sizes[i] for i in order), tuple(names[i] for i in order))
    return view[tuple(names)]


def jax_hybrid_order(sizes: Sequence[int], names: Sequence[str], topology: Topology,
                     granule: str = "host") -> MeshView | None:
    """JAX's ``create_hybrid_device_mesh`` order (see the module docstring), with granules
    of one host (``process_is_granule``) or of one fast domain; None where JAX has none."""
    in_order = topology.ranks_in_order()
    if granule == "host":
        sizes_of = [topology.host_size(h) for h in range(topology.num_hosts)]
    else:
        sizes_of = []
        for r in in_order:
            d = topology.domain(r)
            if d >= len(sizes_of):
                sizes_of.append(0)
            sizes_of[d] += 1
    if len(set(sizes_of)) != 1:
        return None
    g = sizes_of[0]
    ici, cap = [1] * len(sizes), g
    for i in reversed(range(len(sizes))):
        ici[i] = math.gcd(sizes[i], cap)
        cap //= ici[i]
    if cap != 1:
        return None
    dcn = [s // i for s, i in zip(sizes, ici)]
    devices = np.asarray(in_order).reshape(*dcn, *ici)
    k = len(sizes)
    interleaved = devices.transpose([a for i in range(k) for a in (i, k + i)])
    return MeshView.from_ranks(interleaved.reshape(sizes).tolist(), tuple(names))


def machine(topology: Topology) -> tuple[list[int], list[int]]:
    """(host sizes, domain of each host) of a topology, hosts by index."""
    hosts = [topology.host_size(h) for h in range(topology.num_hosts)]
    first = {}
    for r in range(topology.world_size):
        first.setdefault(topology.host(r), r)
    return hosts, [topology.domain(first[h]) for h in range(topology.num_hosts)]
