"""A worker of ``tests/test_hang_gloo.py``: runs one planted program of ``tests/
hang_programs.py`` on Gloo with torch's flight recorder on (``TORCH_FR_BUFFER_SIZE`` set by the
launcher), as ``python hang_gloo_worker.py NAME OUT``.  A rank whose program raises (its
group's short timeout, or a peer that closed its connection) or ends dumps its records to
``OUT/fr_trace_rank_<r>`` (torch's pickle, as torch's analyzer reads them) and
``OUT/fr_json_<r>.json``; a rank whose program ended first stays a while, so that its peers
run into their timeout as in a real job.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gloo_launch import start_together, write_report
from hang_programs import PROGRAMS, TIMEOUT

from backend import GlooBackend

STARTUP = timedelta(seconds=120)


def _dump(out: str, rank: int) -> None:
    """Dump this rank's records.  A rank whose program ended without error dumps at once, as
    a real job's watchdog does not (it dumps at its timeout): under load, the records of
    its calls may not be in the buffer yet (CI saw four empty dumps of a program that made
    four calls), so it waits up to 10 s for them."""
    import torch

    c10d = torch._C._distributed_c10d
    end = time.monotonic() + 10
    while b'"entries"' not in c10d._dump_fr_trace_json() and time.monotonic() < end:
        time.sleep(0.1)
    for name, data in ((f"fr_trace_rank_{rank}", c10d._dump_fr_trace()),
                       (f"fr_json_{rank}.json", c10d._dump_fr_trace_json())):
        with open(os.path.join(out, name + ".tmp"), "wb") as f:
            f.write(data)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def main() -> None:
    name, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    os.environ["MESHLAYOUT_HANG_REAL"] = "1"
    start_together(out, rank, int(os.environ["WORLD_SIZE"]))
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=STARTUP)  # start-up is not what is tested
    backend = GlooBackend.from_env(timeout=TIMEOUT, heartbeat=None)
    try:
        PROGRAMS[name](backend)
        result = {"outcome": "ok", "error": None}
    except Exception as e:  # the hang, ended by the group's timeout
        result = {"outcome": "error", "error": f"{type(e).__name__}: {e}"[:300]}
    _dump(out, rank)
    write_report(out, rank, result)
    if result["outcome"] == "ok":
        time.sleep(TIMEOUT.total_seconds() * 3)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
