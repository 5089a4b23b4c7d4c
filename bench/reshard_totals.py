"""A finished reshard plan's reads, and its memory as ranks grow: what a weight sync pays
every step.

1. Reads, on ``bench/reshard.py``'s DeepSeek-V3 weight sync (1,025 tensors, 1,024 trainer
   ranks (dp 8, ep 16, tp 8), FSDP2-like placements, to 256 inference ranks (dp 32, tp 8),
   hosts of 8).  Per tensor, through ``mesh.reshard`` (whose cache gives the tensors of one
   pattern one plan), the totals (``elements_moved``, ``tier_bytes``, ``busiest``,
   ``rounds``) and the questions an executor asks of one rank (``sends``, ``receives``,
   ``keeps``, ``lost``), for a trainer rank and an inference rank.  Each is timed two ways:
   *computed* (the plan's private maker of the answer, with the plan's per-tile memo warm:
   what every read cost before plans kept their answers) and *read* (the public name, once
   the plan has answered it).  Summed over the 1,025 tensors: what reading them costs a
   sync.
2. Memory vs ranks: one plan per pattern (a column-parallel weight under HSDP: fan-in 1;
   a row-parallel one under FSDP: fan-in 16; the routed experts' w1 under FSDP over EP:
   fan-in that grows with dp until every expert is its own shard) for trainer ranks 1,024
   to 16,384 (inference a quarter of them), each built cold with the plans' memo emptied:
   ``tracemalloc``'s peak while its totals are made, and what the plan keeps once they are
   (the memo emptied again: it is the process's, bounded by ``MEMO_WEIGHT``).
   The pairs that move anything are printed too: on the experts they grow as ranks^2 up
   to 4,096 ranks, which is why a plan keeps its totals and not its pairs.

Targets (exit 1 on a miss; ``--smoke`` checks none): a read <= 5 us per tensor and question
(median); the whole sync's reads under 50 ms; peak and kept memory at most linear in ranks
(each doubling at most 2.5x: a dict's table doubles in steps; and ranks^1.1 from first
to last).

Run:  python bench/reshard_totals.py           (a few minutes on 2 cores)
      python bench/reshard_totals.py --smoke   (64 trainer ranks, 4 layers; 128 to 512)
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import reshard as workload
from _common import verdict

from mesh import MeshView, Reshard, Sharding, Topology, reshard
from mesh._tensor import _reshard, _totals

TARGET_READ_US = 5.0
TARGET_SYNC_MS = 50.0
TARGET_DOUBLING = 2.5
TARGET_EXPONENT = 1.1
TOTALS = ("elements_moved", "tier_bytes", "busiest", "rounds")
QUESTIONS = ("sends", "receives", "keeps", "lost")


def _timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _computed(plan: Reshard, name: str, rank: int) -> Callable[[], Any]:
    """The answer made afresh, as every read made it before plans kept their answers."""
    if name in TOTALS:
        way = plan.partial or "sum at destination"
        return lambda: _totals.tally(plan._walk(way), plan._tier)
    return lambda: getattr(plan, "_list_" + name)(rank)


def _read(plan: Reshard, name: str, rank: int) -> Callable[[], Any]:
    if name in TOTALS:
        return lambda: getattr(plan, name)
    return lambda: getattr(plan, name)(rank)


def reads(m: int, layers: int) -> tuple[list[str], list[str], float]:
    """Part 1's rows, missed targets, and the milliseconds of every read."""
    cfg = workload.make_config("fsdp, hosts of 8", m, "fsdp")
    weights = workload.deepseek_v3(layers)
    plans = [reshard(*workload.shardings(cfg, shape, kind), cfg.topo,
                     itemsize=workload.ITEMSIZE) for _, shape, kind in weights]
    rows, missed, total = [], [], 0.0
    for who, rank in (("totals", -1), ("trainer", cfg.trainer_rank), ("inference",
                                                                        cfg.infer_rank)):
        for name in TOTALS if who == "totals" else QUESTIONS:
            for p in plans:
                _read(p, name, rank)()  # answered once
            made: dict[int, float] = {}  # per plan: made once, counted per tensor
            for p in plans:
                if id(p) not in made:
                    made[id(p)] = _timed(_computed(p, name, rank), 1)
            per = [made[id(p)] for p in plans]
            read = [_timed(_read(p, name, rank)) for p in plans]
            med = statistics.median(read) * 1e6
            total += sum(read) * 1e3
            rows.append(f"{who:<10} {name:<15} {statistics.median(per) * 1e6:>12.1f} "
                        f"{sum(per) * 1e3:>12.1f} {med:>9.2f} {sum(read) * 1e3:>10.3f}")
            if med > TARGET_READ_US:
                missed.append(f"{who} {name}: a read takes {med:.2f} us per tensor (median; "
                              f"target <= {TARGET_READ_US} us)")
    return rows, missed, total


def _cfg(m: int, variant: str) -> tuple[MeshView, MeshView, Topology, dict[str, Any]]:
    tp, ep = 8, 16
    n = m // 4
    train = MeshView.from_shape((m // (ep * tp), ep, tp), ("dp", "ep", "tp"))
    infer = MeshView.from_ranks([[m + tp * d + t for t in range(tp)] for d in range(n // tp)],
                                ("dp", "tp"))
    return train, infer, Topology(m + n, 8), workload.trainer_placements(variant, ep, tp)


PATTERNS = (("hsdp col", "hsdp", "col", (24576, 1536)),
            ("fsdp row", "fsdp", "row", (7168, 16384)),
            ("fsdp experts w1", "fsdp", "ecol", (256, 2048, 7168)))


def _empty_memo() -> None:
    _reshard._MEMO.__init__()  # type: ignore[misc]  # the process's memo, emptied to measure
    gc.collect()


def plan_memory(m: int, variant: str, kind: str, shape: tuple[int, ...]
                ) -> tuple[int, int, float, int]:
    """(peak bytes, kept bytes, seconds, pairs) of one cold plan's totals."""
    train, infer, topo, pl = _cfg(m, variant)
    _empty_memo()
    tracemalloc.start()
    t = time.perf_counter()
    plan = Reshard(Sharding(train, pl[kind], shape), Sharding(infer, workload.INFERENCE[kind],
                                                               shape), topo, itemsize=2)
    _ = (plan.tier_bytes, plan.busiest, plan.rounds)
    secs = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    _empty_memo()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    pairs = 0 if infer.ranks.size > 1024 else len(plan.traffic())  # listed only where cheap
    return peak, kept, secs, pairs


def memory(sizes: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """Part 2's rows and missed targets."""
    rows, missed = [], []
    for label, variant, kind, shape in PATTERNS:
        got = []
        for m in sizes:
            peak, kept, secs, pairs = plan_memory(m, variant, kind, shape)
            got.append((peak, kept))
            grow = "" if len(got) == 1 else \
                f"{peak / got[-2][0]:>6.2f}x {kept / got[-2][1]:>6.2f}x"
            rows.append(f"{label:<16} {m:>7,} {m // 4:>6,} {secs:>7.2f} {peak / 2**20:>9.1f} "
                        f"{kept / 2**10:>9.1f} {pairs or '-':>9} {grow}")
            print(rows[-1], flush=True)
            if len(got) > 1 and max(peak / got[-2][0], kept / got[-2][1]) > TARGET_DOUBLING:
                missed.append(f"{label}: memory grew {peak / got[-2][0]:.2f}x (peak), "
                              f"{kept / got[-2][1]:.2f}x (kept) from {m // 2:,} to {m:,} "
                              f"ranks (target <= {TARGET_DOUBLING}x)")
        for what, i in (("peak", 0), ("kept", 1)):
            e = math.log(got[-1][i] / got[0][i]) / math.log(sizes[-1] / sizes[0])
            rows.append(f"{'':<16} {what} {sizes[0]:,} -> {sizes[-1]:,} ranks: ranks^{e:.3f}")
            print(rows[-1], flush=True)
            if e > TARGET_EXPONENT:
                missed.append(f"{label}: {what} memory grows as ranks^{e:.3f} (target <= "
                              f"ranks^{TARGET_EXPONENT})")
    return rows, missed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="64 trainer ranks, 4 layers; no targets")
    args = ap.parse_args()
    m, layers = (64, 4) if args.smoke else (1024, workload.LAYERS)
    print(f"1. reads on the DeepSeek-V3 sync ({len(workload.deepseek_v3(layers)):,} tensors, "
          f"{m:,} -> {m // 4:,} ranks, fsdp, hosts of 8), per tensor")
    head = (f"{'rank':<10} {'read':<15} {'computed us':>12} {'Σ computed ms':>12} "
            f"{'read us':>9} {'Σ read ms':>10}")
    print(head + "\n" + "-" * len(head))
    rows, failures, total = reads(m, layers)
    print("\n".join(rows))
    print(f"all of them, for every tensor: {total:.1f} ms read")
    if total > TARGET_SYNC_MS:
        failures.append(f"reading the sync's plans took {total:.1f} ms (target < "
                        f"{TARGET_SYNC_MS} ms)")
    sizes = (128, 256, 512) if args.smoke else (1024, 2048, 4096, 8192, 16384)
    print("\n2. one plan's memory vs ranks (cold; the plans' memo emptied)")
    head = (f"{'pattern':<16} {'trainer':>7} {'infer':>6} {'plan s':>7} {'peak MiB':>9} "
            f"{'kept KiB':>9} {'pairs':>9} {'x peak':>7} {'x kept':>6}")
    print(head + "\n" + "-" * len(head))
    failures += memory(sizes)[1]
    print(f"\ntargets: a read <= {TARGET_READ_US} us (median); the sync's reads < "
          f"{TARGET_SYNC_MS} ms; memory x{TARGET_DOUBLING} at most per doubling, ranks^"
          f"{TARGET_EXPONENT} at most overall")
    return verdict(failures, smoke=args.smoke)


if __name__ == "__main__":
    sys.exit(main())
