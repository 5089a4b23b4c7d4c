"""Per-step calls of the DeviceMesh facade vs torch's DeviceMesh, warm, in one process.

Both sides run on torch's fake process group (rank 5 of a world of 64, initialized once):
torch's ``init_device_mesh`` and ours (``backend.init_device_mesh``, which binds to the
initialized default group through ``TorchFakeBackend``) build the same (pp, dp, cp, tp) =
(2, 4, 2, 4) mesh.  Every call is made once first (warm caches: groups exist, slices are
built).  Then, in each round and for each call, ours and torch's are timed alternately,
ten times each (``timeit``, about 0.5 ms of calls per timing, the side that goes first
alternating by round); a round keeps each side's fastest timing (load on a shared machine
only ever adds time) and gives one ratio ours / torch's, both measured within the same few
milliseconds.  The table gives each side's median ns per call over the rounds and the
median of the per-round ratios, with their spread (first to third quartile).  Every timing
includes the lambda that makes the call, on both sides.

Targets (issue 34, item 10), judged on the median ratio:

- ``get_group("tp")`` <= 0.10x torch: a memo hit, with nothing added for the compiler;
- a *parity* call, where both sides do the same work (``get_coordinate()``: one attribute read
  in both), <= 1 + TOLERANCE (1.10x): "not slower than torch" up to the noise of a shared
  machine, so the verdict does not flip on noise (the control row, torch's own
  ``get_coordinate()`` against itself, shows that noise in the same run);
- every other call <= 1.0x torch (each is at least 5x faster: a memo hit against torch's
  rebuilding of a sub-mesh or look-up through its root).

The script exits 1 on a miss (never with ``--smoke``).

The rounds are shared among 3 fresh processes (7 each), and the medians are taken over all
of them: a process whose interpreter happens to run one side's lambda slower throughout
(seen once: torch's call against itself read 0.74x for a whole process) moves a third of the
rounds, not the verdict.  Each lambda has its own code object (the interpreter's inline
caches live there).

Run:  python bench/hot_path.py           (full: 21 rounds in 3 processes)
      python bench/hot_path.py --smoke   (3 short rounds, 1 process; never fails on targets)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

import backend

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import run_child, verdict

WORLD, RANK = 64, 5
SHAPE, NAMES = (2, 4, 2, 4), ("pp", "dp", "cp", "tp")
TOLERANCE = 0.10
"""A parity call passes at a median ratio <= 1 + TOLERANCE."""
PARITY = ("get_coordinate()",)
"""Calls where both sides do the same work (one attribute read)."""
TARGETS = {'get_group("tp")': 0.10}
"""Calls with a target below parity (issue 34: as before the compile work)."""
CONTROL = "control: torch vs torch"
Pair = tuple[Callable[[], Any], Callable[[], Any]]


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


def target(name: str) -> float:
    """The largest median ratio ours / torch's that meets ``name``'s target."""
    if name in PARITY:
        return 1.0 + TOLERANCE
    return TARGETS.get(name, 1.0)


def numbers(pairs: dict[str, Pair], seconds: float) -> dict[str, tuple[int, int]]:
    """Calls per timing for each side of each pair: about ``seconds`` each (20 .. 200,000)."""
    def one(fn: Callable[[], Any]) -> int:
        return max(20, min(200_000, int(seconds / (timeit.timeit(fn, number=200) / 200))))

    return {name: (one(ours), one(theirs)) for name, (ours, theirs) in pairs.items()}


def rounds_of(pairs: dict[str, Pair], number: dict[str, tuple[int, int]], rounds: int,
              chunks: int) -> dict[str, list[tuple[float, float]]]:
    """Per pair, per round, (ours ns, torch's ns) per call: ``chunks`` timings of each side,
    alternating (the side that goes first alternating by round), each side's least disturbed
    one kept (a burst of load on the shared machine only ever adds time)."""
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in pairs}
    for r in range(rounds):
        for name, fns in pairs.items():
            best = [float("inf"), float("inf")]
            for i in [*((0, 1) if r % 2 == 0 else (1, 0))] * chunks:
                n = number[name][i]
                best[i] = min(best[i], timeit.timeit(fns[i], number=n) / n * 1e9)
            found[name].append((best[0], best[1]))
    return found


def report(samples: dict[str, list[tuple[float, float]]]) -> list[str]:
    """Print the table; the missed targets."""
    head = (f"{'call':<26} {'ours ns':>9} {'torch ns':>9} {'ours/torch':>11} "
            f"{'quartiles':>12} {'target':>8}")
    print(head)
    print("-" * len(head))
    misses = []
    for name, pairs in samples.items():
        ratios = [o / t for o, t in pairs]
        ratio = statistics.median(ratios)
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio] * 3
        o, t = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        goal = "" if name == CONTROL else f"<={target(name):.2f}x"
        missed = name != CONTROL and ratio > target(name)
        print(f"{name:<26} {o:>9.1f} {t:>9.1f} {ratio:>10.3f}x {q1:>5.2f}-{q3:<5.2f} "
              f"{goal:>8}{'  <-- missed' if missed else ''}")
        if missed:
            misses.append(f"{name}: ours {ratio:.3f}x torch (target {goal})")
    return misses


def own_code(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with a code object of its own: the interpreter's inline caches live in the code
    object, so ours and torch's lambdas (made by one ``calls``) would share them."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def measure(rounds: int, chunks: int, seconds: float) -> dict[str, Any]:
    """Both meshes on torch's fake process group: the per-round timings of each pair and a
    line saying whether the two tp groups agree (empty if they do not)."""
    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=WORLD)
    try:
        theirs = torch_init_device_mesh("cpu", SHAPE, mesh_dim_names=NAMES)
        ours = backend.init_device_mesh("cpu", SHAPE, mesh_dim_names=NAMES)
        mine, torchs = calls(ours), calls(theirs)
        pairs: dict[str, Pair] = {n: (own_code(mine[n]), own_code(torchs[n])) for n in mine}
        pairs[CONTROL] = (own_code(torchs["get_coordinate()"]),
                          own_code(torchs["get_coordinate()"]))
        for fns in pairs.values():  # warm: groups created, slices built, adaptive interpreter
            for fn in fns:
                fn()
        tp = (ours.get_group("tp"), theirs.get_group("tp"))
        same = dist.get_process_group_ranks(tp[0]) == dist.get_process_group_ranks(tp[1])
        line = f"tp group ranks agree: {same} (ours {tp[0].group_name!r}, torch's " \
            f"{tp[1].group_name!r})" if same else ""
        return {"agree": line,
                "samples": rounds_of(pairs, numbers(pairs, seconds), rounds, chunks)}
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 21)")
    p.add_argument("--processes", type=int, default=None, help="fresh processes (default 3)")
    p.add_argument("--smoke", action="store_true", help="3 short rounds; never fails on targets")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    rounds, chunks = a.rounds or (3 if a.smoke else 21), 3 if a.smoke else 10
    if a.child:
        print(json.dumps(measure(rounds, chunks, 0.0002 if a.smoke else 0.0005)))
        return 0
    procs = a.processes or (1 if a.smoke else 3)
    args = [*(["--smoke"] if a.smoke else []), "--rounds"]
    runs = [run_child(__file__, [*args, str(len(range(i, rounds, procs)))], timeout=600)
            for i in range(procs)]
    print(f"torch {torch.__version__}, fake process group, rank {RANK} of {WORLD}; mesh "
          f"{dict(zip(NAMES, SHAPE))}; {rounds} rounds in {procs} processes, ours and "
          f"torch's alternating; parity tolerance {TOLERANCE:.0%}")
    if not all(run["agree"] for run in runs):
        print("FAIL: the tp groups differ")
        return 2
    print(runs[0]["agree"])
    samples = {name: [pair for run in runs for pair in run["samples"][name]]
               for name in runs[0]["samples"]}
    return verdict(report(samples), smoke=a.smoke)


if __name__ == "__main__":
    sys.exit(main())
