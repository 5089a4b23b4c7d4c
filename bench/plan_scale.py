"""A real plan at scale: meshlayout (FakeBackend) vs torch 2.13 DeviceMesh (fake process group).

Workload, identical for both sides, for world sizes N (each size and side in a fresh process):
build a (pp, dp, cp, tp) = (4, N/64, 2, 8) mesh; slice each dim; flatten (dp, cp); unflatten the
world into (pp, dp, ep, ep_tp) = (4, N/64, 8, 2); get rank 5's group on every dim of the three
meshes with its size and rank 5's rank in it, and rank 5's coordinate and local ranks (phase 1).
Phase 2 lists the members of each of those groups.

Run:  python bench/plan_scale.py            (2**10, 2**14, 2**17, 2**20)
      python bench/plan_scale.py --smoke    (2**10 only, never fails on targets)
      python bench/plan_scale.py --extra 22 (also 2**22)
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from _common import layout_caches, run_child

RANK = 5
TARGET_SPEEDUP = 1000.0
TARGET_PHASE1_GROWTH = 2.0
TARGET_NS_PER_MEMBER = 500.0
TARGET_RSS_GROWTH_MB = 10.0


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _ours(n: int, repeat: int) -> dict[str, float]:
    from backend import FakeBackend, init_device_mesh

    caches = layout_caches().values()
    p1: list[float] = []
    p2: list[float] = []
    created = members = 0
    for _ in range(repeat):
        for clear in caches:
            clear()  # every run is cold: no memoized layout work carried over
        t0 = time.perf_counter()
        fb = FakeBackend(n, RANK)
        m = init_device_mesh("cpu", (4, n // 64, 2, 8), mesh_dim_names=("pp", "dp", "cp", "tp"),
                             backend=fb)
        _slices = [m[d] for d in m.mesh_dim_names]
        f = m["dp", "cp"].flatten("dp_cp")
        u = m.flatten("world").unflatten("world", (4, n // 64, 8, 2), ("pp", "dp", "ep", "ep_tp"))
        groups = []
        for mm in (m, f, u):
            mm.get_coordinate()
            for d in mm.mesh_dim_names:
                g = mm.get_group(d)
                g.size()
                g.rank()
                mm.get_local_rank(d)
                groups.append(g)
        t1 = time.perf_counter()
        listed = [g.ranks for g in groups]
        t2 = time.perf_counter()
        p1.append(t1 - t0)
        p2.append(t2 - t1)
        created = len(fb.created)
        members = sum(map(len, listed))
    return {"phase1": sorted(p1)[len(p1) // 2], "phase2": sorted(p2)[len(p2) // 2],
            "first": p1[0] + p2[0], "groups": created, "members": members,
            "rss_mb": _peak_rss_mb()}


def _torch(n: int) -> dict[str, float]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=n)
    t0 = time.perf_counter()
    m = init_device_mesh("cpu", (4, n // 64, 2, 8), mesh_dim_names=("pp", "dp", "cp", "tp"))
    _slices = [m[d] for d in m.mesh_dim_names]
    f = m["dp", "cp"]._flatten("dp_cp")
    u = m._flatten("world")._unflatten(0, (4, n // 64, 8, 2), ("pp", "dp2", "ep", "ep_tp"))
    groups = []
    for mm in (m, f, u):
        mm.get_coordinate()
        for d in mm.mesh_dim_names:
            g = mm.get_group(d)
            g.size()
            dist.get_rank(g)
            mm.get_local_rank(d)
            groups.append(g)
    t1 = time.perf_counter()
    listed = [dist.get_process_group_ranks(g) for g in groups]
    t2 = time.perf_counter()
    created = len(dist.distributed_c10d._world.pg_map) - 1  # minus the default group
    return {"phase1": t1 - t0, "phase2": t2 - t1, "first": t2 - t0, "groups": created,
            "members": sum(map(len, listed)), "rss_mb": _peak_rss_mb()}


def _run(side: str, n: int, repeat: int, timeout: float) -> dict[str, float]:
    return run_child(__file__, [side, str(n), str(repeat)], timeout,
                     env={**os.environ, "PYTHONHASHSEED": "0"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="2**10 only; report, never fail targets")
    ap.add_argument("--extra", type=int, nargs="*", default=[], help="more exponents, e.g. 22")
    ap.add_argument("--repeat", type=int, default=7, help="runs of our workload per process")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, n, repeat = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps(_ours(n, repeat) if side == "ours" else _torch(n)))
        return 0
    exps = [10] if args.smoke else [10, 14, 17, 20, *args.extra]
    rows = []
    head = (f"{'N':>9} {'side':>5} {'phase1 ms':>10} {'phase2 ms':>10} {'total ms':>10} "
            f"{'groups':>7} {'members':>8} {'RSS MB':>7} {'speedup':>8}")
    print(head)
    print("-" * len(head))
    for e in exps:
        n = 2 ** e
        ours = _run("ours", n, args.repeat, 600)
        theirs = _run("torch", n, 1, 3000)
        speedup = (theirs["phase1"] + theirs["phase2"]) / (ours["phase1"] + ours["phase2"])
        for side, r in (("ours", ours), ("torch", theirs)):
            print(f"{n:>9} {side:>5} {r['phase1'] * 1e3:>10.3f} {r['phase2'] * 1e3:>10.3f} "
                  f"{(r['phase1'] + r['phase2']) * 1e3:>10.3f} {int(r['groups']):>7} "
                  f"{int(r['members']):>8} {r['rss_mb']:>7.1f} "
                  f"{(f'{speedup:.0f}x' if side == 'ours' else ''):>8}", flush=True)
        rows.append((n, ours, theirs, speedup))
    failures = _check(rows)
    for f in failures:
        print("MISSED:", f)
    if not failures:
        print("all targets met" if not args.smoke else "smoke run: targets not checked")
    return 1 if failures and not args.smoke else 0


def _check(rows: list[tuple[int, dict[str, float], dict[str, float], float]]) -> list[str]:
    by_n = {n: (o, t, s) for n, o, t, s in rows}
    failures = []
    small, large = by_n.get(2 ** 10), by_n.get(2 ** 20)
    if large is not None:
        o, _, s = large
        if s < TARGET_SPEEDUP:
            failures.append(f"speedup at 2**20 is {s:.0f}x, target >= {TARGET_SPEEDUP:.0f}x")
        ns = o["phase2"] * 1e9 / max(o["members"], 1)
        print(f"phase 2 at 2**20: {ns:.1f} ns per listed member (target <= {TARGET_NS_PER_MEMBER})")
        if ns > TARGET_NS_PER_MEMBER:
            failures.append(f"phase 2 costs {ns:.0f} ns per member at 2**20")
        if small is not None:
            growth = o["phase1"] / small[0]["phase1"]
            rss = o["rss_mb"] - small[0]["rss_mb"]
            print(f"phase 1 growth 2**10 -> 2**20: {growth:.2f}x (target <= {TARGET_PHASE1_GROWTH})"
                  f"; RSS growth: {rss:.1f} MB (target <= {TARGET_RSS_GROWTH_MB})")
            if growth > TARGET_PHASE1_GROWTH:
                failures.append(f"phase 1 at 2**20 is {growth:.2f}x its time at 2**10")
            if rss > TARGET_RSS_GROWTH_MB:
                failures.append(f"peak RSS grows by {rss:.1f} MB from 2**10 to 2**20")
    return failures


if __name__ == "__main__":
    sys.exit(main())
