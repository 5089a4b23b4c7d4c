"""The oracle of ``mesh.recover``'s prices, written without its code: every element of every
new local block listed, who held it before found by enumerating every old rank's block, each
receiver priced by the law ``mesh.Costs``'s docstring states, groups counted by listing
them.  Only ``Sharding.runs`` (the tensor wing's own, tested against torch) and
``MeshView.groups`` are shared with the code under test."""

from __future__ import annotations

import itertools
from typing import Any

from mesh import Costs, MeshView, Recovery, Sharding, Topology, Way

KINDS = ("spare", "drop", "refactor", "evict_host", "evict_domain", "restart", "wait")
"""The kinds, in the order ties are broken."""


def elements(s: Sharding, rank: int) -> list[tuple[int, ...]]:
    """Every global index ``rank`` holds, in local order."""
    per_dim = [[a + j for a, n in runs for j in range(n)] for runs in s.runs(rank)]
    return list(itertools.product(*per_dim))


def tier(topology: Topology | None, a: int, b: int) -> int:
    if topology is None:
        return 3
    if topology.host(a) == topology.host(b):
        return 1
    return 2 if topology.domain(a) == topology.domain(b) else 3


def ranks_of(view: MeshView) -> list[int]:
    return [view.ranks(i) for i in range(view.ranks.size)]


def rows(s: Sharding, new: Sharding, failed: set[int], topology: Topology | None,
         itemsize: int, restart: bool = False, sent: dict[int, list[float]] | None = None
         ) -> tuple[dict[int, list[int]], int]:
    """Per rank of ``new``'s view, the bytes it gets of the tensor ``s`` becomes ``new``
    (host, domain, across, storage), then what it writes into its rebuilt block (the whole
    block when it gets anything, else 0); and the bytes kept.  Into ``sent``, per old rank
    its bytes out per tier (host, domain, across): each element a receiver gets is sent by
    the holders at the nearest tier, an equal share each."""
    holders: dict[tuple[int, ...], list[int]] = {}
    for q in ranks_of(s.view):
        if q not in failed:
            for e in elements(s, q):
                holders.setdefault(e, []).append(q)
    per: dict[int, list[int]] = {}
    total_kept = 0
    for r in ranks_of(new.view):
        row = per[r] = [0, 0, 0, 0, 0]
        mine = set(elements(s, r)) if s.view.ranks.offset_of(r) is not None \
            and r not in failed else set()
        block = elements(new, r)
        kept = 0
        for e in block:
            if restart:
                row[3] += itemsize
            elif e in mine:
                kept += 1
            elif e in holders:
                near = min(tier(topology, q, r) for q in holders[e])
                row[near - 1] += itemsize
                senders = [q for q in holders[e] if tier(topology, q, r) == near]
                for q in senders if sent is not None else ():
                    sent.setdefault(q, [0.0, 0.0, 0.0])[near - 1] += itemsize / len(senders)
            else:
                row[3] += itemsize
        if kept < len(block):  # it gets something: the whole block is written anew
            row[4] += len(block) * itemsize
        total_kept += kept * itemsize
    return per, total_kept


def senders(way: Way, old_views: dict[str, MeshView], state: dict[str, Sharding],
            failed: set[int], topology: Topology | None, itemsize: int
            ) -> dict[int, list[float]]:
    """Per old rank that sends anything, its bytes out per tier (host, domain, across) over
    the whole state, each element a receiver gets charged in equal shares to the holders
    at the tier nearest it."""
    view_of = {id(s): next(n for n, v in old_views.items() if v == s.view)
               for s in state.values()}
    sent: dict[int, list[float]] = {}
    for s in state.values():
        rows(s, Sharding(way.views[view_of[id(s)]], s.placements, s.shape), failed, topology,
             itemsize, False, sent)
    return {q: row for q, row in sent.items() if any(row)}


def brute(way: Way, old_views: dict[str, MeshView], state: dict[str, Sharding],
          failed: set[int], topology: Topology | None, costs: Costs, itemsize: int
          ) -> dict[str, Any]:
    """Bytes per tier, seconds, communicators and cost of ``way``, from first principles."""
    view_of = {id(s): next(n for n, v in old_views.items() if v == s.view)
               for s in state.values()}
    per: dict[int, list[int]] = {}
    sent: dict[int, list[float]] = {}
    total = dict.fromkeys(("kept", "host", "domain", "across", "storage"), 0)
    restart = way.kind.value == "restart"
    for s in state.values():
        new = Sharding(way.views[view_of[id(s)]], s.placements, s.shape)
        got, kept = rows(s, new, failed, topology, itemsize, restart, sent)
        total["kept"] += kept
        for r, row in got.items():
            mine = per.setdefault(r, [0, 0, 0, 0, 0])
            for i in range(5):
                mine[i] += row[i]
    for row in per.values():
        for t, b in zip(("host", "domain", "across", "storage"), row[:4]):
            total[t] += b
    if restart:  # the law: every rank reads its block; the first rank's is the largest
        first = max(per.values(), key=lambda row: row[3], default=[0, 0, 0, 0, 0])
        per = {0: first}
    gbps = {1: costs.host_gbps, 2: costs.domain_gbps, 3: costs.across_gbps}
    lat = {1: costs.host_latency_us, 2: costs.domain_latency_us, 3: costs.across_latency_us}
    move = max((sum(8 * row[t - 1] / (gbps[t] * 1e9) + lat[t] * 1e-6 * (row[t - 1] > 0)
                    for t in (1, 2, 3)) + 8 * row[3] / (costs.storage_gbps * 1e9)
                + 8 * row[4] / (costs.copy_gbps * 1e9)
                for row in per.values()), default=0.0)
    slowest_sender = max((sum(8 * out[t - 1] / (gbps[t] * 1e9) + lat[t] * 1e-6
                              for t in (1, 2, 3) if out[t - 1] > 0)
                          for out in sent.values()), default=0.0)
    if slowest_sender:  # the receivers wait for it, then read and rebuild
        after = max(8 * row[3] / (costs.storage_gbps * 1e9) + 8 * row[4] / (costs.copy_gbps * 1e9)
                    for row in per.values() if any(row[:3]))
        move = max(move, slowest_sender + after)
    if costs.shared_gbps is not None and not restart:  # all moved bytes share one resource
        move = max(move, 8 * (total["host"] + total["domain"] + total["across"])
                   / (costs.shared_gbps * 1e9))
    groups = brute_groups(way, old_views, failed)
    reconf_pairs, create_pairs, counts = groups
    fixed = {"restart": costs.restart_s, "wait": costs.repair_s}.get(way.kind.value, 0.0)
    rebind = 0.0 if way.kind.value == "restart" else costs.rebind_s  # the survivors meet
    seconds = fixed + rebind + move + reconf_pairs * costs.reconfigure_s \
        + create_pairs * costs.create_s
    old_n = next(iter(old_views.values())).ranks.size
    working = next(iter(way.views.values())).ranks.size
    throughput = working / old_n
    return {"bytes": total, "seconds": seconds, "communicators": counts,
            "throughput": throughput, "cost": seconds + (1 - throughput) * costs.horizon_s}


def brute_groups(way: Way, old_views: dict[str, MeshView], failed: set[int]
                 ) -> tuple[int, int, dict[str, int]]:
    """(pairs reconfigured, pairs created, counts): groups listed before and after, a group
    kept when it is an old one with no failed rank (a repaired rank rejoins its groups); a
    way that drops ranks (a drop, an eviction with a drop) reconfigures its new groups
    (each an old one's survivors in order); one that brings a rank into groups it was not
    in (spares, a repair) or regroups (a re-factor, a restart) creates them."""
    kept = new = pairs = total = 0
    for name, v in way.views.items():
        for d in v.names:
            before = set(old_views[name].groups(d))
            after = v.groups(d)
            same = sum(g in before and not failed & set(g) for g in after)
            kept, new, pairs = kept + same, new + len(after) - same, pairs + (same < len(after))
            total += len(after)
    kind = way.kind.value
    if kind == "restart":
        return 0, sum(v.ndim for v in way.views.values()), {
            "kept": 0, "reconfigured": 0, "created": total}
    if kind == "drop" or (kind.startswith("evict") and "onto spares" not in way.label):
        return pairs, 0, {"kept": kept, "reconfigured": new, "created": 0}
    return 0, pairs, {"kept": kept, "reconfigured": 0, "created": new}


def ranked(r: Recovery, old: dict[str, MeshView], state: dict[str, Sharding],
           failed: set[int], topology: Topology | None, costs: Costs, itemsize: int
           ) -> list[tuple[str, str]]:
    """The ways of ``r`` as (kind, label), cheapest first by the oracle's own cost (ties by
    kind, then label)."""
    cost = {(w.kind.value, w.label): brute(w, old, state, failed, topology, costs,
                                           itemsize)["cost"] for w in r.ways}
    return sorted(cost, key=lambda k: (cost[k], KINDS.index(k[0]), k[1]))
