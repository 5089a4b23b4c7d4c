"""``check_spmd`` (issue 27) on a torchtitan-like step: how its cost grows with the ranks and
with the calls per rank, what the ``classes=`` reduction saves, and (``--valid N``) the run of
N random valid programs that must give 0 false positives.

Workload: ``titan_step`` of ``tests/spmd_programs.py`` on the torch-free recorder: torchtitan's
meshes (pp, dp_replicate, dp_shard, cp, tp) = (4, 2, N/64, 2, 4) with ``fsdp`` and ``loss``
flattened, then per microbatch and layer an FSDP all-gather, a TP all-reduce and a CP
all-gather forward, the reverse backward with an FSDP reduce-scatter, the pipeline's p2p
chain, a dp_replicate and a loss all-reduce: 56 calls per rank at 4 layers (12 per layer).
Each check runs in this process, timed once (``time.perf_counter``), the whole
``check_spmd`` call: the program run once per rank and the replay of every model.

Anchors and targets:

- at 1,024 ranks the full check takes <= 30 s (the issue's target, 2 cores);
- the cost per rank-call (seconds / (ranks * calls per rank)) at the largest world is within
  3x of the smallest (the check grows linearly with ranks), and likewise from the fewest
  layers to the most (linearly with calls);
- ``classes=`` (one class per pipeline stage) against the full check at the same world: the
  same report, on fewer ranks run; its speedup is printed (measured, no target: the replay
  still covers every rank);
- the planted desync (the ranks at tp coordinate 1 all-reduce a wrong shape once) is found:
  one desync per tp group, by the full check and by the reduced one (which must fall back);
- ``--valid N``: N random valid programs (``tests/spmd_programs.py``, worlds of 8 to 128,
  a tenth at the torch level) give 0 false positives, and N/10 of them with a planted
  desync are all flagged (0 false negatives).

Automatic classes (issue 37; each check in a fresh process, ``torch=True``, the titan step
through ``torch.distributed`` with one rank planted to all-reduce another shape on its tp
group): the classes found, the ranks run, seconds, peak memory and the planted rank found;
the target at 131,072 ranks is 60 s and 4 GiB on 2 cores (``--large``).  Cost: one run per
class (again on plain ints) and its group neighbours' runs (about 12 + log2 of the largest
group each; past the first two classes of one shape of reads, one neighbour's), plus array
work of O(world x distinct reads) per class to place the ranks; then the derivation and the
replay of every rank, O(world x calls), which dominate at scale.  With ``spread`` the step
makes 4 x spread classes; the worst case, a program that branches on every rank, runs every
rank (the brute force's cost, plus the representatives run before the bound stops them: 16
for one class per rank).  ``--sample N``: N random programs at 2,048 ranks and up, half planted
(seeds from ``--first``, 20000; worlds drawn from 2,048 to ``--max-world``).

Run:  python bench/check_spmd.py                (64 .. 1,024 ranks; exits 1 on a miss)
      python bench/check_spmd.py --large        (automatic classes up to 131,072 ranks)
      python bench/check_spmd.py --sample 6 --max-world 8192
      python bench/check_spmd.py --valid 10000  (the 10^4 random programs; about an hour)
      python bench/check_spmd.py --planted 1000 (1,000 planted programs only)
      python bench/check_spmd.py --smoke        (64 and 128 ranks, 20 programs; never fails
                                                 on targets)
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _common import verdict
from spmd_programs import TITAN, main, program, titan_step

from backend import check_spmd

TARGET_1024 = 30.0
GROWTH = 3.0


def _timed(world: int, prog: Any, **kw: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    report = check_spmd(world, prog, **kw)
    return time.perf_counter() - t, report


def _stage(world: int) -> Any:
    per_stage = world // TITAN["pp"]
    return lambda rank: rank // per_stage


def ranks_growth(worlds: list[int], failures: list[str]) -> None:
    print("growth with ranks (4 layers, 2 microbatches)")
    print(f"{'ranks':>7} {'calls/rank':>10} {'groups':>7} {'ours s':>8} {'µs per rank-call':>17}")
    per: list[float] = []
    for world in worlds:
        seconds, report = _timed(world, titan_step)
        if not report.ok:
            failures.append(f"titan_step at {world} ranks is not ok:\n{report}")
        calls = report.calls // world
        per.append(seconds / report.calls)
        print(f"{world:>7} {calls:>10} {report.groups:>7} {seconds:>8.3f} "
              f"{per[-1] * 1e6:>17.2f}", flush=True)
        if world == 1024 and seconds > TARGET_1024:
            failures.append(f"check_spmd at 1,024 ranks took {seconds:.1f} s > {TARGET_1024} s")
    if per[-1] > GROWTH * per[0]:
        failures.append(f"cost per rank-call grew {per[-1] / per[0]:.1f}x from {worlds[0]} to "
                        f"{worlds[-1]} ranks (> {GROWTH}x: not linear)")


def calls_growth(world: int, layers: list[int], failures: list[str]) -> None:
    print(f"\ngrowth with calls ({world} ranks)")
    print(f"{'layers':>7} {'calls/rank':>10} {'ours s':>8} {'µs per rank-call':>17}")
    per: list[float] = []
    for n in layers:
        seconds, report = _timed(world, functools.partial(titan_step, layers=n))
        per.append(seconds / report.calls)
        print(f"{n:>7} {report.calls // world:>10} {seconds:>8.3f} {per[-1] * 1e6:>17.2f}",
              flush=True)
    if per[-1] > GROWTH * per[0]:
        failures.append(f"cost per rank-call grew {per[-1] / per[0]:.1f}x from {layers[0]} to "
                        f"{layers[-1]} layers (> {GROWTH}x: not linear)")


def reduction(world: int, failures: list[str]) -> None:
    print(f"\nclasses= (one class per pipeline stage) vs every rank, {world} ranks")
    print(f"{'program':>8} {'side':>6} {'ran':>6} {'ours s':>8} {'findings':>8} {'speedup':>8}")
    for name, prog in (("valid", titan_step), ("planted", functools.partial(titan_step, bug=1))):
        full_s, full = _timed(world, prog)
        red_s, red = _timed(world, prog, classes=_stage(world))
        for side, seconds, report in (("all", full_s, full), ("ours", red_s, red)):
            speed = f"{full_s / red_s:.2f}x" if side == "ours" else ""
            print(f"{name:>8} {side:>6} {report.ran:>6} {seconds:>8.3f} "
                  f"{len(report.findings):>8} {speed:>8}", flush=True)
        if (red.ok, red.findings, red.never_created) != (full.ok, full.findings,
                                                         full.never_created):
            failures.append(f"classes= gave another report than the full check ({name})")
        if name == "valid" and not red.ran < world // 2:
            failures.append(f"classes= ran {red.ran} of {world} ranks on the valid step")
        if name == "planted":
            tp_groups = world // TITAN["tp"]
            for side, report in (("full", full), ("classes=", red)):
                kinds = [f.kind for f in report.findings]
                if kinds != ["desync"] * tp_groups:
                    failures.append(f"the planted desync: the {side} check found {kinds[:3]}"
                                    f"... ({len(kinds)}), not {tp_groups} desyncs")


AUTO_TARGET_S = 60.0
AUTO_TARGET_GIB = 4.0


def _one(world: int, odd: int | None, spread: int, mode: str) -> dict[str, Any]:
    """One ``check_spmd(torch=True)`` of the titan step in a fresh process: its time, peak
    memory and report, as a dict (the child prints it as JSON)."""
    import json
    import os
    import subprocess

    cmd = [sys.executable, __file__, "--one", str(world), "--spread", str(spread),
           "--mode", mode] + (["--odd", str(odd)] if odd is not None else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def one(args: argparse.Namespace) -> int:
    import json
    import resource

    warnings.filterwarnings("ignore")
    prog = functools.partial(titan_step, odd_rank=args.odd, spread=args.spread)
    t = time.perf_counter()
    report = check_spmd(args.one, prog, torch=True, classes=args.mode)
    seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "gib": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 2**20, "ran": report.ran, "notes": report.notes,
        "kinds": [f.kind for f in report.findings], "ranks": [f.ranks for f in report.findings],
        "texts": [f.text for f in report.findings], "calls": report.calls}))
    return 0


def _classes(notes: list[str]) -> str:
    """How many classes a report's note counts ("automatic classes: 5 by ...")."""
    head = "automatic classes: "
    return notes[0][len(head):].split(" ")[0] if notes and notes[0].startswith(head) else "all"


def automatic_classes(worlds: list[int], spreads: list[int], failures: list[str]) -> None:
    """Automatic classes on the titan step through torch.distributed (``torch=True``), one
    rank planted to all-reduce another shape on its tp group (rank 77,777 where the world
    has it, else the rank at 0.6 of the world), each check in a fresh process."""
    print("\nautomatic classes, torch=True, one planted rank (fresh process per row)")
    print(f"{'ranks':>7} {'planted':>7} {'classes':>7} {'ran':>5} {'s':>7} {'GiB':>5} "
          f"{'µs/rank':>8} {'found':>6}")
    first: float | None = None
    for world in worlds:
        odd = 77777 if world > 77777 else int(world * 0.6)
        got = _one(world, odd, 1, "auto")
        if "error" in got:
            failures.append(f"automatic classes at {world} ranks failed: {got['error']}")
            continue
        found = got["ranks"] == [[odd]] and got["kinds"] == ["desync"]
        classes = _classes(got["notes"])
        per = got["seconds"] / world * 1e6
        first = first or per
        print(f"{world:>7} {odd:>7} {classes:>7} {got['ran']:>5} {got['seconds']:>7.1f} "
              f"{got['gib']:>5.2f} {per:>8.1f} {'yes' if found else 'MISSED':>6}", flush=True)
        if not found:
            failures.append(f"the planted desync at rank {odd} of {world} was missed: "
                            f"{got['kinds']} {got['ranks']}")
        if world == 1 << 17 and (got["seconds"] > AUTO_TARGET_S or got["gib"] > AUTO_TARGET_GIB):
            failures.append(f"automatic classes at 131,072 ranks took {got['seconds']:.0f} s and "
                            f"{got['gib']:.1f} GiB (targets {AUTO_TARGET_S:.0f} s, "
                            f"{AUTO_TARGET_GIB:.0f} GiB)")
    if first is not None:
        print(f"  cost per rank at the largest world / at the smallest: {per / first:.2f}x")
    world = worlds[min(1, len(worlds) - 1)]
    print(f"\ngrowth with classes ({world} ranks, valid step, spread = dp_shard classes)")
    print(f"{'spread':>7} {'classes':>7} {'ran':>5} {'s':>7}")
    for spread in spreads:
        got = _one(world, None, spread, "auto")
        if "error" in got:
            failures.append(f"spread {spread} failed: {got['error']}")
            continue
        print(f"{spread:>7} {_classes(got['notes']):>7} "
              f"{got['ran']:>5} {got['seconds']:>7.1f}", flush=True)
    every = _one(world, None, 1, "every")
    if "error" not in every:
        print(f"{'every':>7} {'-':>7} {every['ran']:>5} {every['seconds']:>7.1f}  (the brute "
              "force, and a program that branches on every rank)")


def large_sample(count: int, max_world: int, failures: list[str], first: int = 20000) -> None:
    """``count`` random programs at worlds of 2,048 to ``max_world`` ranks under automatic
    classes (the default there), half valid (0 findings), half with a desync planted on a
    rank drawn from the seed anywhere in the world (found)."""
    import random

    print(f"\n{count} random programs at 2,048 .. {max_world} ranks, automatic classes")
    print(f"{'seed':>7} {'ranks':>7} {'planted':>8} {'ran':>6} {'s':>7}  verdict")
    worlds = [w for w in (2048, 4096, 8192, 16384, 32768, 65536, 1 << 17) if w <= max_world]
    for seed in range(first, first + count):
        plant = seed % 2 == 1
        world = random.Random(seed).choice(worlds)
        g = program(seed, plant=plant, world=world)
        t = time.perf_counter()
        report = check_spmd(g.world, g.program, **g.check)
        seconds = time.perf_counter() - t
        if plant:
            right = not g.planted or "desync" in report.kinds()
        else:
            right = report.ok
        planted = ("yes" if g.planted else "no") if plant else "-"
        print(f"{seed:>7} {world:>7} {planted:>8} {report.ran:>6} "
              f"{seconds:>7.1f}  {'right' if right else 'WRONG'}", flush=True)
        if not right:
            failures.append(f"{'missed' if plant else 'false positive'}: {g.words}\n{report}")


def random_programs(count: int, failures: list[str]) -> None:
    print(f"\n{count} random valid programs (tests/spmd_programs.py, worlds of 8 to 128)")
    if main(count) != 0:
        failures.append(f"false positives among {count} random valid programs")
    planted_programs(max(1, count // 10), count, failures)


def planted_programs(planted_count: int, start: int, failures: list[str]) -> None:
    t0, missed, planted = time.perf_counter(), 0, 0
    for seed in range(start, start + planted_count):
        g = program(seed, max_world=128, plant=True)
        report = check_spmd(g.world, g.program, **g.check)
        planted += bool(g.planted)
        if g.planted and "desync" not in report.kinds():
            missed += 1
            print(f"FALSE NEGATIVE {g.words}\n{report}", flush=True)
    print(f"{planted_count} programs with a planted desync ({planted} where it could be planted: "
          f"a call on a group of 2 or more): {missed} missed in {time.perf_counter() - t0:.0f} s")
    if missed:
        failures.append(f"{missed} planted desyncs missed")


def run(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore")
    failures: list[str] = []
    if args.one:
        return one(args)
    if args.sample:
        large_sample(args.sample, args.max_world, failures, args.first)
        return verdict(failures, smoke=False)
    if args.large:
        automatic_classes([1024, 4096, 16384, 1 << 17], [1, 4, 16], failures)
        return verdict(failures, smoke=False)
    if args.valid or args.planted:
        if args.valid:
            random_programs(args.valid, failures)
        else:
            planted_programs(args.planted, 10**6, failures)
        return verdict(failures, smoke=False)
    worlds = [64, 128] if args.smoke else [64, 128, 256, 512, 1024]
    ranks_growth(worlds, failures)
    calls_growth(64 if args.smoke else 256, [1, 2] if args.smoke else [1, 2, 4, 8, 16], failures)
    reduction(128 if args.smoke else 1024, failures)
    automatic_classes([256, 1024] if args.smoke else [1024, 4096, 16384],
                      [1, 4] if args.smoke else [1, 4, 16], failures)
    if args.smoke:
        random_programs(20, failures)
    return verdict(failures, smoke=args.smoke)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="smallest sizes; never fails")
    parser.add_argument("--valid", type=int, default=0, metavar="N",
                        help="check N random valid programs (and N/10 planted ones) only")
    parser.add_argument("--planted", type=int, default=0, metavar="N",
                        help="check N random programs with a planted desync only")
    parser.add_argument("--large", action="store_true",
                        help="automatic classes only, up to 131,072 ranks (targets: 60 s, 4 GiB)")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="N random programs (half planted) at 2,048 .. --max-world ranks")
    parser.add_argument("--max-world", type=int, default=1 << 17, metavar="W")
    parser.add_argument("--first", type=int, default=20000, metavar="SEED",
                        help="--sample: the first seed (20000)")
    parser.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--odd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--spread", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="auto", help=argparse.SUPPRESS)
    sys.exit(run(parser.parse_args()))
