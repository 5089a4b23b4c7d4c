"""Choosing the rank order (``mesh.place`` / ``Placement.find``) at scale: time and memory.

A 5-D plan (pp, dp, fsdp, cp, tp) with traffic on every dim, placed on machines of W ranks:

- ``NVL72 racks``: hosts of 4 in racks of 18 hosts (the last partial): regular;
- ``hosts of 8``: H100-like hosts of 8, each its own domain: regular;
- ``partial racks``: hosts of 4 in racks of 18 and 10 hosts in turn: explicit domains,
  ranks numbered rack by rack (a layout over the world, but counting a group's racks lists);
- ``ranks dealt round-robin``: hosts of 4, rank r on host r mod W/4: an explicit universe.

Ours: ``Placement.find`` (the choice, the chosen view, the runner-up, the order as given,
each dim's hosts and domains per group), cold (a fresh topology value each time; NumPy
imported by a first, untimed run), the best of ``--repeat`` runs, and the most memory one
more run held (``tracemalloc``).  Anchor: ``mesh.compare``
of the order as given on the same machine (what judging one order costs, without choosing),
and how many layouts a search over every assignment of dim factors to host, domain and
across levels would judge.

Targets (exit 1 on a miss; ``--smoke`` checks memory only): on the regular machines at
131,072 ranks the placement takes < 1 s and holds < 2 MB (a list of the world would hold
about 5 MB); it is never worse than the order as given.

Run:  python bench/placement_scale.py           (W = 2**17; about 30 s)
      python bench/placement_scale.py --smoke   (W = 2**12)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import tracemalloc
from collections.abc import Callable

from _common import verdict

from mesh import MeshView, Placement, Topology, compare

TARGET_S = 1.0
TARGET_HELD = 2 << 20
GiB = 1 << 30
NAMES = ("pp", "dp", "fsdp", "cp", "tp")
TRAFFIC = {"pp": GiB // 64, "dp": GiB // 16, "fsdp": GiB // 4, "cp": GiB // 2, "tp": GiB}


def shape_for(w: int) -> tuple[int, ...]:
    """pp = 8, cp = 2, tp = 4 (dp and fsdp share the rest)."""
    rest = w // (8 * 2 * 4)
    dp = 2 ** (int(math.log2(rest)) // 2)
    return (8, dp, rest // dp, 2, 4)


def partial_racks(w: int) -> Topology:
    hosts, racks = [], []
    rack, left = 0, 18
    for h in range(w // 4):
        hosts += [h] * 4
        racks += [rack] * 4
        left -= 1
        if not left:
            rack += 1
            left = 10 if rack % 2 else 18
    return Topology.from_hosts(hosts, domains=racks)


MACHINES: dict[str, tuple[Callable[[int], Topology], bool]] = {
    "NVL72 racks": (lambda w: Topology(w, 4, hosts_per_domain=18), True),
    "hosts of 8": (lambda w: Topology(w, 8), True),
    "partial racks": (partial_racks, False),
    "ranks dealt round-robin": (lambda w: Topology.from_hosts(
        [r % (w // 4) for r in range(w)]), False),
}


def _layouts(shape: tuple[int, ...]) -> int:
    """Assignments of every dim's factors to (across, domain, host): ordered triples."""
    total = 1
    for s in shape:
        divs = [d for d in range(1, s + 1) if s % d == 0]
        total *= sum(1 for a in divs for d in divs if (s // a) % d == 0)
    return total


def measure(make: Callable[[int], Topology], w: int, repeat: int) -> dict[str, float]:
    shape = shape_for(w)
    best, found = math.inf, None
    for _ in range(repeat):
        topo = make(w)  # a fresh value: nothing cached from the last run
        t = time.perf_counter()
        found = Placement.find(shape, NAMES, topo, traffic=TRAFFIC)
        best = min(best, time.perf_counter() - t)
    assert found is not None
    topo = make(w)
    tracemalloc.start()  # once more, for the memory (tracemalloc slows what it watches)
    Placement.find(shape, NAMES, topo, traffic=TRAFFIC)
    held = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    topo = make(w)
    t = time.perf_counter()
    given = compare({"given": MeshView.from_shape(shape, NAMES)}, topo, traffic=TRAFFIC)
    anchor = time.perf_counter() - t
    given_s = given.to_dict()["rows"][-1]["values"][0]
    data = found.to_dict()
    return {"ours": best, "held": held, "anchor": anchor, "choices": data["choices"],
            "seconds": found.seconds, "given": given_s, "layouts": _layouts(shape),
            "levels": "".join(d["level"][0] for d in data["chosen"]["dims"]),
            "explicit": data["chosen"]["universe_explicit"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="W = 2**12; checks memory only")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    w = 1 << (12 if args.smoke else 17)
    Placement.find((2, 2), ("a", "b"), Topology.from_hosts([0, 0, 1, 2]))  # imports NumPy
    print(f"placing {dict(zip(NAMES, shape_for(w)))} ({w:,} ranks); levels per dim: h(ost), "
          "d(omain), a(cross)")
    head = (f"{'machine':<24} {'ours ms':>9} {'held MB':>8} {'compare ms':>10} "
            f"{'ours/compare':>12} {'choices':>7} {'factor layouts':>14} {'levels':>6} "
            f"{'est. ms':>8} {'as given ms':>11} {'universe':>9}")
    print(head)
    print("-" * len(head))
    failures = []
    for name, (make, regular) in MACHINES.items():
        r = measure(make, w, 1 if args.smoke else args.repeat)
        print(f"{name:<24} {r['ours'] * 1e3:>9.1f} {r['held'] / 2**20:>8.2f} "
              f"{r['anchor'] * 1e3:>10.1f} {r['ours'] / r['anchor']:>11.2f}x "
              f"{r['choices']:>7} {r['layouts']:>14,} {r['levels']:>6} "
              f"{r['seconds'] * 1e3:>8.2f} {r['given'] * 1e3:>11.2f} "
              f"{'explicit' if r['explicit'] else 'identity':>9}", flush=True)
        if r["seconds"] > r["given"] * (1 + 1e-9):
            failures.append(f"{name}: the placement's estimate {r['seconds']:.6f} s is worse "
                            f"than the order as given ({r['given']:.6f} s)")
        if regular and r["held"] > TARGET_HELD:
            failures.append(f"{name}: placing held {r['held']:,} bytes (target < "
                            f"{TARGET_HELD:,}: no list of the world)")
        if regular and not args.smoke and r["ours"] > TARGET_S:
            failures.append(f"{name}: placing {w:,} ranks took {r['ours']:.3f} s (target < "
                            f"{TARGET_S} s)")
    print(f"targets: on the regular machines < {TARGET_S} s (not checked in --smoke) and < "
          f"{TARGET_HELD >> 20} MB held; never worse than the order as given")
    return verdict(failures, smoke=False)  # what --smoke measures, it checks


if __name__ == "__main__":
    sys.exit(main())
