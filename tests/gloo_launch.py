"""Launching a world of worker processes on loopback for the Gloo tests.

One process per rank with torchrun's environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``, a ``MASTER_PORT`` picked free at run time),
every process killed at a hard bound so a failure can never hang CI.  A worker
script is run as ``python WORKER MODE OUT_DIR`` and writes ``OUT_DIR/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

__all__ = ["free_port", "launch", "write_report"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def write_report(out_dir: str, rank: int, result: dict[str, Any]) -> None:
    """A worker's report, ``OUT_DIR/rank<r>.json``, written whole (renamed into place)."""
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def launch(worker: Path, world: int, mode: str, out: Path, bound_s: float,
           env: dict[str, str] | None = None
           ) -> tuple[list[int | None], dict[int, dict[str, Any]], str]:
    """Run ``world`` processes of ``worker`` in ``mode`` (with ``env`` added to torchrun's
    variables); return their exit codes, JSON reports and log tails.

    Every process is killed at ``bound_s``, and the test fails saying which were stuck.
    Retries once with a new port if rank 0 could not bind the one it was given.
    """
    for attempt in range(2):
        run = out / f"attempt{attempt}"
        run.mkdir(parents=True)
        port = free_port()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(world):
                penv = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                            LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port), OMP_NUM_THREADS="1", **(env or {}))
                with open(run / f"log{rank}.txt", "w") as log:
                    procs.append(subprocess.Popen(
                        [sys.executable, str(worker), mode, str(run)], env=penv, stdout=log,
                        stderr=subprocess.STDOUT, cwd=str(worker.parent)))
            deadline = time.monotonic() + bound_s
            stuck = []
            for rank, p in enumerate(procs):
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    stuck.append(rank)
        finally:  # also when pytest-timeout interrupts the wait: leave no worker behind
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        logs = "\n".join(f"--- rank {r} ---\n{_tail(run / f'log{r}.txt')}" for r in range(world))
        if stuck:
            pytest.fail(f"{mode} world of {world}: ranks {stuck} still running after {bound_s} s "
                        f"(killed)\n{logs}")
        if attempt == 0 and "Address already in use" in _tail(run / "log0.txt", 100_000):
            continue
        reports = {}
        for rank in range(world):
            path = run / f"rank{rank}.json"
            if path.exists():
                reports[rank] = json.loads(path.read_text())
        return [p.returncode for p in procs], reports, logs
    raise AssertionError("unreachable")
