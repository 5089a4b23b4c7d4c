"""Worker for ``tests/test_discover_stop_gloo.py``: one rank of a 4-process Gloo world
discovering the machine (two hosts of two, pretended), rank 3 stopping right after it
published (issue 44, item 2).

``python discover_stop_worker.py MODE OUT_DIR`` (rank and world from torchrun's environment,
as :mod:`gloo_launch` sets them); writes ``OUT_DIR/rank<r>.json``: the outcome and the
seconds from the call's start to it, and when it ended (and rank 3 resumed) by the host's
clock (one host: the ranks' times compare).

- ``freeze``: rank 3 stops itself (``SIGSTOP``, every thread); rank 0, once ranks 0-2 have
  their outcome, wakes it (``SIGCONT``) and waits for its report (the store lives in rank
  0's process);
- ``kill``: rank 3 kills itself (``SIGKILL``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from gloo_launch import STARTUP_S, start_together, write_report

T_S = 4.0  # the discovery's timeout, as in the issue
STOPPED = 3


def _wait_for(paths: list[Path], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not all(p.exists() for p in paths) and time.monotonic() < end:
        time.sleep(0.05)


def _discover(rank: int, mode: str, out: str) -> dict[str, Any]:
    import torch.distributed as dist

    from backend import DiscoveryError, DiscoveryRecord
    from backend._c10d._discover import _CALLS, gather

    store = dist.distributed_c10d._get_default_store()
    record = DiscoveryRecord.of(f"n{rank // 2}", local_rank=rank % 2)
    start = time.monotonic()
    part = gather(store, rank, 4, record, T_S, _CALLS.take())
    part.publish()
    report: dict[str, Any] = {}
    if rank == STOPPED:
        os.kill(os.getpid(), signal.SIGSTOP if mode == "freeze" else signal.SIGKILL)
        report["resumed_at"] = time.time()
    try:
        part.check()
        report["outcome"] = f"Topology: {part.adopt().to_dict()}"
    except DiscoveryError as e:
        report["outcome"] = f"DiscoveryError: {e}"
    report["took_s"] = time.monotonic() - start
    report["ended_at"] = time.time()
    return report


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    assert mode in ("freeze", "kill"), mode
    rank = int(os.environ["RANK"])
    Path(out, f"pid{rank}").write_text(str(os.getpid()))
    start_together(out, rank, 4)
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=STARTUP_S))  # not what is tested
    dist.barrier()  # every rank is past its start-up before the short timeout counts
    write_report(out, rank, _discover(rank, mode, out))
    if rank == 0:  # the store's server: kept until rank 3 is done
        _wait_for([Path(out, f"rank{r}.json") for r in (1, 2)], STARTUP_S)
        if mode == "freeze":
            os.kill(int(Path(out, f"pid{STOPPED}").read_text()), signal.SIGCONT)
            _wait_for([Path(out, f"rank{STOPPED}.json")], STARTUP_S)
    sys.stdout.flush()
    os._exit(0)  # no teardown of a group whose rank 3 is dead or late


if __name__ == "__main__":
    main()
