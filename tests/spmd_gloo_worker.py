"""A worker of ``tests/test_check_spmd_gloo.py``: runs one corpus program (``tests/
spmd_corpus.py``, by its name) for real on Gloo, as ``python spmd_gloo_worker.py NAME OUT``
under the launcher's environment, and writes what happened to ``OUT/rank<r>.json``:
``outcome`` ("ok" or "error"), ``error`` and ``seconds``.

A program predicted to hang stays alive for a while after it returns, so that its peers
run into their timeout as in a real job (rather than into a closed connection when it
exits); after a program predicted to pass, the ranks meet at a barrier before they leave
(rank 0 holds the store).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gloo_launch import start_together, wait_for_reports, write_report
from spmd_corpus import CASES, TIMEOUT

from backend import GlooBackend


def main() -> None:
    name, out = sys.argv[1], sys.argv[2]
    case = next(c for c in CASES if c.name == name)
    start_together(out, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    backend = GlooBackend.from_env(timeout=TIMEOUT)
    start = time.monotonic()
    try:
        case.program(backend)
        result = {"outcome": "ok", "error": None}
    except Exception as e:  # what the real run says
        result = {"outcome": "error", "error": f"{type(e).__name__}: {e}"[:400]}
    result["seconds"] = round(time.monotonic() - start, 2)
    write_report(out, backend.rank, result)
    if case.gloo == "hang":  # stay up until every peer's hang has ended (it has reported)
        wait_for_reports(out, int(os.environ["WORLD_SIZE"]), TIMEOUT.total_seconds() + 1.0)
    elif case.gloo == "ok":  # leave together: rank 0 holds the store the others may still use
        import torch.distributed as dist

        dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # no teardown: groups may be broken, and destroying them may wait


if __name__ == "__main__":
    main()
