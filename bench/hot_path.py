"""Per-step calls of the DeviceMesh facade vs torch 2.13's DeviceMesh, warm, in one process.

Both sides run on torch's fake process group (rank 5 of a world of 64, initialized once):
torch's ``init_device_mesh`` and ours (``backend.init_device_mesh``, which binds to the
initialized default group through ``TorchFakeBackend``) build the same (pp, dp, cp, tp) =
(2, 4, 2, 4) mesh.  Every call is made once first (warm caches: groups exist, slices are
built), then timed with ``timeit`` over many iterations, in rounds alternating the two
sides; the table gives the median ns per call and our time / torch's.  The target
(issue 10) is ours <= 1.0x torch on every call; the script exits 1 on a miss.

Run:  python bench/hot_path.py           (full: 21 rounds)
      python bench/hot_path.py --smoke   (3 short rounds; never fails on ratios)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

import backend

WORLD, RANK = 64, 5
SHAPE, NAMES = (2, 4, 2, 4), ("pp", "dp", "cp", "tp")


def calls(mesh: Any) -> dict[str, Callable[[], Any]]:
    """The per-step calls a training loop makes, on one mesh."""
    return {
        'get_group("tp")': lambda: mesh.get_group("tp"),
        'get_group(1)': lambda: mesh.get_group(1),
        'get_local_rank("dp")': lambda: mesh.get_local_rank("dp"),
        "get_coordinate()": lambda: mesh.get_coordinate(),
        'mesh["tp"]': lambda: mesh["tp"],
        'mesh["tp"].get_group()': lambda: mesh["tp"].get_group(),
        'mesh["dp", "cp"]': lambda: mesh["dp", "cp"],
        "get_rank()": lambda: mesh.get_rank(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 21)")
    p.add_argument("--smoke", action="store_true", help="3 short rounds; never fails on ratios")
    a = p.parse_args(argv)
    rounds = a.rounds or (3 if a.smoke else 21)
    number = 2_000 if a.smoke else 20_000

    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=WORLD)
    try:
        theirs = torch_init_device_mesh("cpu", SHAPE, mesh_dim_names=NAMES)
        ours = backend.init_device_mesh("cpu", SHAPE, mesh_dim_names=NAMES)
        sides = {"ours": calls(ours), "torch": calls(theirs)}
        for fns in sides.values():  # warm: groups created, slices built, adaptive interpreter
            for fn in fns.values():
                fn()
        check = [g.group_name for g in (ours.get_group("tp"), theirs.get_group("tp"))]
        same = dist.get_process_group_ranks(ours.get_group("tp")) == \
            dist.get_process_group_ranks(theirs.get_group("tp"))
        samples: dict[str, dict[str, list[float]]] = {s: {k: [] for k in sides[s]} for s in sides}
        for r in range(rounds):
            for side in (("ours", "torch") if r % 2 == 0 else ("torch", "ours")):
                for name, fn in sides[side].items():
                    samples[side][name].append(timeit.timeit(fn, number=number) / number * 1e9)
    finally:
        dist.destroy_process_group()

    print(f"torch {torch.__version__}, fake process group, rank {RANK} of {WORLD}; mesh "
          f"{dict(zip(NAMES, SHAPE))}; median of {rounds} rounds x {number} calls")
    print(f"tp group ranks agree: {same} (ours {check[0]!r}, torch's {check[1]!r})")
    head = f"{'call':<26} {'ours ns':>9} {'torch ns':>9} {'ours/torch':>11}"
    print(head)
    print("-" * len(head))
    misses = []
    for name in sides["ours"]:
        o, t = (statistics.median(samples[s][name]) for s in ("ours", "torch"))
        flag = "  <-- slower" if o > t else ""
        print(f"{name:<26} {o:>9.1f} {t:>9.1f} {o / t:>10.2f}x{flag}")
        if o > t:
            misses.append(f"{name} ({o / t:.2f}x)")
    if not same:
        print("FAIL: the tp groups differ")
        return 2
    if misses:
        verdict = "ignored (--smoke)" if a.smoke else "FAIL"
        print(f"\n{verdict}: ours slower than torch on: {', '.join(misses)}")
        return 0 if a.smoke else 1
    print("\nOK: ours (warm) <= 1.0x torch on every per-step call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
