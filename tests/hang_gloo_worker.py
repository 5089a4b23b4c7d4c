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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gloo_launch import start_together, wait_for_reports, write_report
from hang_programs import PROGRAMS, TIMEOUT

from backend import GlooBackend

STARTUP = timedelta(seconds=120)


def _dump(out: str, rank: int) -> None:
    import torch

    c10d = torch._C._distributed_c10d
    for name, data in ((f"fr_trace_rank_{rank}", c10d._dump_fr_trace()),
                       (f"fr_json_{rank}.json", c10d._dump_fr_trace_json())):
        with open(os.path.join(out, name + ".tmp"), "wb") as f:
            f.write(data)
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))


def _ready(store: Any, world: int) -> None:
    """Wait until every rank is past its imports and its start-up, in the store (no
    collective: it would be in the records): the program's first group has the short
    timeout, and in CI 12 workers importing torch on 2 cores came to it up to 5 s apart
    (every group failed, no call was made, the dumps were empty)."""
    store.add("hang/ready", 1)
    end = time.monotonic() + STARTUP.total_seconds()
    while int(store.add("hang/ready", 0)) < world and time.monotonic() < end:
        time.sleep(0.01)


def main() -> None:
    name, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    os.environ["MESHLAYOUT_HANG_REAL"] = "1"
    start_together(out, rank, int(os.environ["WORLD_SIZE"]))
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=STARTUP)  # start-up is not what is tested:
    _ready(dist.distributed_c10d._get_default_store(), int(os.environ["WORLD_SIZE"]))
    backend = GlooBackend.from_env(timeout=TIMEOUT, heartbeat=None)
    try:
        PROGRAMS[name](backend)
        result = {"outcome": "ok", "error": None}
    except Exception as e:  # the hang, ended by the group's timeout
        result = {"outcome": "error", "error": f"{type(e).__name__}: {e}"[:300]}
    _dump(out, rank)
    write_report(out, rank, result)
    if result["outcome"] == "ok":  # stay up while a peer still hangs (its dump comes before
        # its report), at most the three timeouts this used to sleep
        wait_for_reports(out, int(os.environ["WORLD_SIZE"]), TIMEOUT.total_seconds() * 3)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
