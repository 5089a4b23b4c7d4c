"""Discovering the machine (``backend.discover_topology``) at scale: store calls and bytes per rank.

W ranks are simulated in one process, each with its own ``CountingStore``
(tests/counting_store.py) over one shared in-process torch ``HashStore``, running the real
protocol (``backend._c10d._gather``): first every rank's ``publish`` in rank order (a rank
waits for its neighbour's record, which is then already there), then ``check`` of the
answer and ``adopt`` of the verdict.  Every rank's ``check`` and ``adopt`` are the same code
reading the same keys, so they run for a sample of ranks (the first and last 8, 16 spread
between, and the last to arrive; the others' checks are counted at once); calls and bytes
of the others are those of the sample.
Machines at each W:

- ``NVL72 racks``: hosts of 4 named ``gb[00000-...]``, racks of 18 hosts (the last partial),
  one NVLink domain per rack: a regular machine;
- ``partial racks``: racks of 18 and of 10 hosts in turn (a rack shared with another job):
  explicit domains;
- ``8- and 4-GPU hosts``: hosts of 8 and 4 devices in turn: explicit hosts;
- ``ranks dealt round-robin``: hosts of 4, rank r on host r mod W/4 (no host's ranks are
  consecutive): the worst case, one run per rank.

Anchor: gathering every rank's full record through the store (each rank ``set``-s its record
and ``multi_get``-s all W of them), measured for 4 ranks: its bytes per rank grow with W.

Targets (exit 1 on a miss; counted, so checked in ``--smoke`` too): every rank makes at most
15 store calls, each touching one key, at every W; on the regular machine a rank (but the
last to arrive) reads at most 512 bytes at every W, growing only by the digits of the
numbers it holds (at most 16 bytes from the smallest W to the largest), under 1/1000 of the
anchor's at 131,072 ranks; on every machine it reads at most 512 bytes plus 24 per run of
the topology's data (O(hosts + domains); O(ranks) only round-robin).

Run:  python bench/discover_scale.py           (W = 1,024, 16,384 and 131,072; about 2 minutes)
      python bench/discover_scale.py --smoke   (W = 1,024 and 4,096; seconds)
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import verdict
from torch._C._distributed_c10d import HashStore

from backend import DiscoveryRecord
from backend._c10d._discover import gather
from backend._c10d._discovery_record import Answer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
CountingStore: Any = importlib.import_module("counting_store").CountingStore

MOST_CALLS = 15
REGULAR_BYTES = 512
DIGITS = 16
PER_RUN_BYTES = 24
ANCHOR_RATIO = 1e-3
BIG = 131072


def nvl72(w: int) -> Callable[[int], DiscoveryRecord]:
    return lambda r: DiscoveryRecord.of(f"gb{r // 4:05d}", local_rank=r % 4,
                                        nvlink_domain=f"{r // 72:032x}/0")


def partial_racks(w: int) -> Callable[[int], DiscoveryRecord]:
    rack_of = []
    rack, left = 0, 18
    for _ in range(w // 4):
        rack_of.append(rack)
        left -= 1
        if not left:
            rack += 1
            left = 10 if rack % 2 else 18
    return lambda r: DiscoveryRecord.of(f"gb{r // 4:05d}", local_rank=r % 4,
                                        nvlink_domain=f"{rack_of[r // 4]:032x}/0")


def mixed_hosts(w: int) -> Callable[[int], DiscoveryRecord]:
    host_of, device_of = [], []
    h = 0
    while len(host_of) < w:
        size = 8 if h % 2 == 0 else 4
        host_of += [h] * size
        device_of += list(range(size))
        h += 1
    return lambda r: DiscoveryRecord.of(f"h{host_of[r]:05d}", local_rank=device_of[r])


def round_robin(w: int) -> Callable[[int], DiscoveryRecord]:
    hosts = w // 4
    return lambda r: DiscoveryRecord.of(f"n{r % hosts:05d}", local_rank=r // hosts)


MACHINES = {"NVL72 racks": nvl72, "partial racks": partial_racks,
            "8- and 4-GPU hosts": mixed_hosts, "ranks dealt round-robin": round_robin}


def simulate(w: int, record: Callable[[int], DiscoveryRecord]) -> dict[str, Any]:
    """One discovery of a world of ``w`` (see the module's docs)."""
    shared = HashStore()
    stores = [CountingStore(shared) for _ in range(w)]
    t = time.perf_counter()
    parts = [gather(stores[r], r, w, record(r), 60.0, 0) for r in range(w)]
    for part in parts:
        part.publish()
    publish_s = time.perf_counter() - t
    publish_calls = [s.total() for s in stores]
    last = max(range(w), key=lambda r: stores[r].bytes_read)  # read the runs
    sample = sorted({*range(8), *range(w - 8, w), *range(0, w, max(1, w // 16)), last})
    # every rank's check is the same code reading the same answer: run for the sample, the
    # others counted at once (as their add of 1 each would)
    nonce = Answer.read(shared.get(parts[0].key("answer")), "answer", parts[0].ns, w).nonce
    shared.add(parts[0].key(f"checked/{nonce}"), w - len(sample))
    t = time.perf_counter()
    for r in sample:
        parts[r].check()
    found = None
    for r in sample:
        found = parts[r].adopt()
    collect_s = (time.perf_counter() - t) / len(sample)
    assert found is not None
    data = found.to_dict()
    later = max(stores[r].total() - publish_calls[r] for r in sample)
    runs = len(data["ranks"] or ()) + len(data["domains"] or ())
    sampled = [r for r in sample if r != last]
    reads = [stores[r].bytes_read for r in sampled]
    widest = max(s.widest for s in stores)
    return {"W": w, "topology": found, "runs": runs, "data_bytes": len(json.dumps(data)),
            "calls_max": max(publish_calls) + later, "calls": statistics.median_low(
                [stores[r].total() for r in sampled]), "widest": widest,
            "read": max(reads), "read_min": min(reads), "last_read": stores[last].bytes_read,
            "written": max(s.bytes_written for s in stores), "publish_s": publish_s,
            "collect_ms": collect_s * 1e3}


def anchor(w: int, record: Callable[[int], DiscoveryRecord]) -> int:
    """Bytes one rank reads gathering every rank's full record (set, then multi_get)."""
    shared = HashStore()
    line = [record(r).run_line(r).encode() for r in range(w)]
    for r in range(w):
        shared.set(f"all/{r}", line[r])
    probe = CountingStore(shared)
    keys = [f"all/{r}" for r in range(w)]
    probe.multi_get(keys)
    return int(probe.bytes_read)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="W = 1,024 and 4,096")
    args = ap.parse_args()
    worlds = [1024, 4096] if args.smoke else [1024, 16384, BIG]
    print("discovering the machine: store calls and bytes per rank (simulated ranks, counted)")
    head = (f"{'machine':<24} {'W':>7} {'hosts':>6} {'runs':>6} {'calls/rank':>10} "
            f"{'max calls':>9} {'ours B read/rank':>16} {'last rank B':>11} "
            f"{'anchor B/rank':>13} {'ours/anchor':>11} {'publish s':>9} {'collect ms':>10}")
    print(head)
    print("-" * len(head))
    failures: list[str] = []
    regular_reads: list[int] = []
    for name, make in MACHINES.items():
        for w in worlds:
            row = simulate(w, make(w))
            theirs = anchor(w, make(w))
            topo = row["topology"]
            print(f"{name:<24} {w:>7,} {topo.num_hosts:>6,} {row['runs']:>6,} "
                  f"{row['calls']:>10} {row['calls_max']:>9} {row['read']:>16,} "
                  f"{row['last_read']:>11,} {theirs:>13,} {row['read'] / theirs:>11.2e} "
                  f"{row['publish_s']:>9.2f} {row['collect_ms']:>10.3f}", flush=True)
            if row["calls_max"] > MOST_CALLS or row["widest"] > 1:
                failures.append(f"{name} at {w:,}: a rank made {row['calls_max']} store calls "
                                f"(target <= {MOST_CALLS}), the widest touched {row['widest']} "
                                "keys")
            if row["read"] > REGULAR_BYTES + PER_RUN_BYTES * row["runs"]:
                failures.append(f"{name} at {w:,}: a rank read {row['read']:,} bytes, more than "
                                f"{REGULAR_BYTES} + {PER_RUN_BYTES} x {row['runs']:,} runs")
            if name == "NVL72 racks":
                regular_reads.append(row["read"])
                if w == BIG and row["read"] > ANCHOR_RATIO * theirs:
                    failures.append(f"at {w:,} ranks a rank reads {row['read']:,} bytes, more "
                                    f"than 1/1000 of the anchor's {theirs:,}")
    print(f"bytes read per rank on the regular machine at W = {worlds}: {regular_reads} (target: "
          f"<= {REGULAR_BYTES} at every W, growing by at most {DIGITS} bytes: digits)")
    if max(regular_reads) > REGULAR_BYTES or regular_reads[-1] - regular_reads[0] > DIGITS:
        failures.append(f"on the regular machine the bytes read per rank grow with W: "
                        f"{regular_reads}")
    return verdict(failures, smoke=False)  # what --smoke measures, it checks


if __name__ == "__main__":
    sys.exit(main())
