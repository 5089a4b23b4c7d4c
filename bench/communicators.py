"""Groups actually created by a torchtitan-like plan: meshlayout vs torch DeviceMesh.

Plan: a 1-D world of N ranks unflattened into (pp, dp_replicate, dp_shard, cp, tp) and into
(pp, dp_replicate, efsdp, ep), plus flatten(("dp_shard", "cp")); the training step uses the groups
of tp, cp, ep, efsdp, dp_replicate and the flattened dim only.

1. Fake process groups, one rank (rank 5), N = 64 and N = 4096: groups created by each side.
2. Real Gloo, 8 processes on loopback: groups created per rank, and wall time from the start of
   the plan to the first completed all_reduce on every used dim.

Run:  python bench/communicators.py           (both parts)
      python bench/communicators.py --smoke   (N = 64 and Gloo with 8 ranks; never fails targets)
Exits non-zero when ours creates more groups than torch, or is slower to the first collectives.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from _common import run_child

RANK = 5
PLANS = {  # N: (pp, dp_replicate, dp_shard, cp, tp), (efsdp, ep)
    8: ((1, 2, 1, 2, 2), (2, 2)),
    64: ((2, 2, 4, 2, 2), (4, 4)),
    4096: ((4, 4, 32, 2, 4), (32, 8)),
}
DENSE = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
MOE = ("pp", "dp_replicate", "efsdp", "ep")


def _plan_ours(n: int, backend: Any) -> list[Any]:
    from backend import init_device_mesh

    dense_sizes, (efsdp, ep) = PLANS[n]
    world = init_device_mesh("cpu", (n,), mesh_dim_names=("world",), backend=backend)
    dense = world.unflatten("world", dense_sizes, DENSE)
    moe = world.unflatten("world", (dense_sizes[0], dense_sizes[1], efsdp, ep), MOE)
    fsdp = dense.flatten("dp_shard_cp", dims=("dp_shard", "cp"))
    return [dense.get_group("tp"), dense.get_group("cp"), moe.get_group("ep"),
            moe.get_group("efsdp"), dense.get_group("dp_replicate"), fsdp.get_group("dp_shard_cp")]


def _plan_torch(n: int) -> list[Any]:
    from torch.distributed.device_mesh import init_device_mesh

    dense_sizes, (efsdp, ep) = PLANS[n]
    world = init_device_mesh("cpu", (n,), mesh_dim_names=("world",))
    dense = world._unflatten(0, dense_sizes, DENSE)
    moe = world._unflatten(0, (dense_sizes[0], dense_sizes[1], efsdp, ep), MOE)
    fsdp = dense["dp_shard", "cp"]._flatten("dp_shard_cp")
    return [dense.get_group("tp"), dense.get_group("cp"), moe.get_group("ep"),
            moe.get_group("efsdp"), dense.get_group("dp_replicate"), fsdp.get_group("dp_shard_cp")]


def _torch_group_count() -> int:
    import torch.distributed as dist

    return len(dist.distributed_c10d._world.pg_map) - 1  # minus the default group


def _child_fake(side: str, n: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if side == "ours":
        from backend import FakeBackend

        fb = FakeBackend(n, RANK)
        _plan_ours(n, fb)
        return {"groups": len(fb.created)}
    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=n)
    _plan_torch(n)
    return {"groups": _torch_group_count()}


def _child_gloo(side: str, n: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.distributed.device_mesh

    from backend import GlooBackend

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dist.barrier()
    t0 = time.perf_counter()
    if side == "ours":
        groups = _plan_ours(n, GlooBackend())
    else:
        groups = _plan_torch(n)
    for g in groups:
        dist.all_reduce(torch.ones(1), group=g)
    elapsed = time.perf_counter() - t0
    count = _torch_group_count()
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "groups": count, "seconds": elapsed}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gloo(side: str, n: int, timeout: float) -> list[dict[str, Any]]:
    port = _free_port()
    procs = []
    for r in range(n):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--child", "gloo", side, str(n)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"{side} Gloo worker failed:\n{err[-2000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    return results


def _fake(side: str, n: int) -> dict[str, Any]:
    return run_child(__file__, ["fake", side, str(n)], 600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="N = 64 only; never fail targets")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, side, n = args.child[0], args.child[1], int(args.child[2])
        print(json.dumps((_child_fake if kind == "fake" else _child_gloo)(side, n)))
        return 0
    failures = []
    print("1. process groups created on rank 5 (fake process groups)")
    print(f"{'N':>6} {'ours':>6} {'torch':>6}")
    for n in ([64] if args.smoke else [64, 4096]):
        ours, theirs = _fake("ours", n)["groups"], _fake("torch", n)["groups"]
        print(f"{n:>6} {ours:>6} {theirs:>6}", flush=True)
        if ours > theirs:
            failures.append(f"ours creates {ours} groups at N={n}, torch {theirs}")
    print("\n2. Gloo, 8 processes on loopback: groups per rank and seconds to the first "
          "collective on every used dim")
    res = {side: _gloo(side, 8, 300) for side in ("ours", "torch")}
    print(f"{'side':>6} {'groups/rank (min-max)':>22} {'max seconds':>12} {'mean seconds':>13}")
    for side, rs in res.items():
        g = [r["groups"] for r in rs]
        s = [r["seconds"] for r in rs]
        print(f"{side:>6} {f'{min(g)}-{max(g)}':>22} {max(s):>12.3f} {sum(s) / len(s):>13.3f}")
    ours_t = max(r["seconds"] for r in res["ours"])
    torch_t = max(r["seconds"] for r in res["torch"])
    print(f"time ratio ours/torch: {ours_t / torch_t:.2f}")
    if max(r["groups"] for r in res["ours"]) > min(r["groups"] for r in res["torch"]):
        failures.append("ours creates more Gloo groups per rank than torch")
    if ours_t > torch_t:
        failures.append(f"ours takes {ours_t:.3f}s to the first collectives, torch {torch_t:.3f}s")
    for f in failures:
        print("MISSED:", f)
    return 1 if failures and not args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
