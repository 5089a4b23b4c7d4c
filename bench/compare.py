"""Comparing two torchtitan plans offline: ``meshlayout compare`` vs its 1 s target.

Plans (``examples/torchtitan_plan.py``'s ``torchtitan_views``) at N ranks on hosts of 8:
``tp8`` (pp = 4, dp_replicate = 2, dp_shard = N / 128, cp = 2, tp = 8, ep = 8, etp = 1) and
``tp4`` (tp = 4, dp_shard twice as large), each dense, sparse and loss.  Ours: the whole
command, ``python -m mesh compare A B --traffic tp=1GiB,fsdp=256MiB,ep=512MiB --rank 5
--format json``, in a fresh process (interpreter start, imports, both explanations, the
rows, the output), the median of ``--repeat`` runs.  Anchor: what a user ran before
compare existed, ``python -m mesh explain`` of each plan, the two commands' medians
summed ("two explains"): compare should cost about that, not more.

Targets (issue 19): the command <= 1 s at 2**20 ranks; and compare <= 1.5x two explains
at every size (one interpreter instead of two, plus the rows).

Run:  python bench/compare.py            (2**10, 2**14, 2**17, 2**20)
      python bench/compare.py --smoke    (2**10 only; never fails on targets)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import verdict

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "examples" / "torchtitan_plan.py"
TARGET_S = 1.0
TARGET_RATIO = 1.5
TRAFFIC = "tp=1GiB,fsdp=256MiB,ep=512MiB"


def degrees(n: int, tp: int) -> dict[str, int]:
    return {"pp": 4, "dp_replicate": 2, "dp_shard": n // 16 // tp, "cp": 2, "tp": tp,
            "ep": 8, "etp": 1}


def _write(tmp: Path, n: int, tp: int) -> Path:
    plan = tmp / f"tp{tp}.py"
    plan.write_text(
        "import runpy\nfrom mesh import Topology\n"
        f"VIEWS = runpy.run_path({str(PLAN)!r})['torchtitan_views']({n}, "
        + ", ".join(f"{k}={v}" for k, v in degrees(n, tp).items()) + ")\n"
        f"TOPOLOGY = Topology({n}, 8)\n")
    return plan


def _median(args: list[str], repeat: int) -> tuple[float, str]:
    """Median wall seconds of ``python -m mesh *args`` in a fresh process, and its output."""
    times, out = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mesh", *args], capture_output=True,
                              text=True, timeout=120, check=False)
        times.append(time.perf_counter() - t)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        out = done.stdout
    return statistics.median(times), out


def measure(n: int, repeat: int) -> tuple[float, float]:
    """(compare's median seconds, the two explains' medians summed) at ``n`` ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = _write(Path(tmp), n, 8), _write(Path(tmp), n, 4)
        ours, out = _median(["compare", str(a), str(b), "--traffic", TRAFFIC, "--rank", "5",
                             "--format", "json"], repeat)
        data = json.loads(out)
        assert [p["world"] for p in data["plans"]] == [n, n] and data["ranking"], data["names"]
        anchor = sum(_median(["explain", str(p), "--rank", "5", "--format", "json"], repeat)[0]
                     for p in (a, b))
    return ours, anchor


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="2**10 only; never fail targets")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command per size")
    args = ap.parse_args()
    exps = [10] if args.smoke else [10, 14, 17, 20]
    print(f"{'N':>9} {'ours compare s':>15} {'two explains s':>15} {'ratio':>8} "
          f"{'vs 1 s target':>14}")
    failures = []
    for e in exps:
        n = 1 << e
        ours, anchor = measure(n, 1 if args.smoke else args.repeat)
        print(f"{n:>9} {ours:>15.3f} {anchor:>15.3f} {ours / anchor:>7.2f}x "
              f"{ours / TARGET_S:>13.2f}x", flush=True)
        if ours > TARGET_RATIO * anchor:
            failures.append(f"at {n:,} ranks compare takes {ours:.3f} s, two explains "
                            f"{anchor:.3f} s (target <= {TARGET_RATIO}x)")
        if e == 20 and ours > TARGET_S:
            failures.append(f"at 2**20 ranks compare takes {ours:.3f} s (target <= {TARGET_S} s)")
    return verdict(failures, smoke=args.smoke)


if __name__ == "__main__":
    sys.exit(main())
