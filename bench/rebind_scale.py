"""``DeviceMesh.rebind`` as the world grows: its cost must follow the changed ranks and the
kept groups, not the universe (issue 30).

Workload, per world size N (a fresh ``FakeBackend(N, rank=5)`` each time): a (dp, tp) =
(N/8, 8) mesh asks for both its groups, then rebinds to the (N/8 - 1, 8) view that lost the
last dp slice (8 ranks): identity universes, the regular case.  ``rebind`` is timed (median of
5 fresh meshes) and its peak memory traced; the anchor is what listing the universe once costs
(``sorted(range(N))``, the least the old rebind did: it looked every rank up).  The ways to
continue of ``mesh.survive`` produce explicit universes, read once by design (O(their size)):
not measured here.

Targets: at the largest N, rebind takes <= 0.1x the anchor, and from the smallest N to the
largest its time grows <= 3x (flat; the anchor grows with N).

Run:  python bench/rebind_scale.py           (N = 2**14 .. 2**22; exits 1 on a miss)
      python bench/rebind_scale.py --smoke   (N = 2**10 and 2**12; never fails on targets)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc

from _common import verdict

from backend import FakeBackend, init_device_mesh
from mesh import MeshView

REPEAT = 5


def _rebind_seconds(n: int) -> tuple[float, int]:
    """(median seconds, peak bytes) of one rebind after losing the last dp slice of N."""
    seconds, peak = [], 0
    after = MeshView.from_shape((n // 8 - 1, 8), ("dp", "tp"))
    for _ in range(REPEAT):
        mesh = init_device_mesh("cpu", (n // 8, 8), mesh_dim_names=("dp", "tp"),
                                backend=FakeBackend(n, rank=5))
        mesh.get_all_groups()
        tracemalloc.start()
        t = time.perf_counter()
        mesh.rebind(after)
        seconds.append(time.perf_counter() - t)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(seconds), peak


def _anchor_seconds(n: int) -> float:
    seconds = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        sorted(range(n))
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="N = 2**10, 2**12; never fail targets")
    args = ap.parse_args()
    sizes = [1 << 10, 1 << 12] if args.smoke else [1 << k for k in range(14, 23, 2)]
    print(f"{'N':>9} {'ours rebind s':>14} {'peak KiB':>9} {'list universe s':>16} {'ratio':>8}")
    rows = []
    for n in sizes:
        ours, peak = _rebind_seconds(n)
        anchor = _anchor_seconds(n)
        rows.append((n, ours, anchor))
        print(f"{n:>9} {ours:>14.5f} {peak >> 10:>9} {anchor:>16.5f} {ours / anchor:>7.3f}x",
              flush=True)
    failures = []
    n, ours, anchor = rows[-1]
    if ours > 0.1 * anchor:
        failures.append(f"at N={n:,} rebind takes {ours:.4f} s, more than 0.1x listing the "
                        f"universe ({anchor:.4f} s)")
    growth = ours / rows[0][1]
    print(f"growth of rebind from N={rows[0][0]:,} to N={n:,}: {growth:.2f}x (target <= 3x)")
    if growth > 3:
        failures.append(f"rebind grows {growth:.2f}x from N={rows[0][0]:,} to N={n:,}")
    return verdict(failures, smoke=args.smoke)


if __name__ == "__main__":
    sys.exit(main())
