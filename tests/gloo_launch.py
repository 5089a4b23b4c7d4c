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

__all__ = ["AGENT_FAILED", "STARTUP_S", "free_port", "launch", "launch_with_agent",
           "start_together", "wait_for_reports", "write_report"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


STARTUP_S = 240.0
"""How long a worker may wait in :func:`start_together` for its peers to start: generous (under
load a worker imports torch in 20 s) and bounded; never the timeout a test is about."""


def start_together(out_dir: str, rank: int, world: int) -> None:
    """Wait, up to :data:`STARTUP_S`, until every worker of the world has started (imported torch
    and the package), before any of them connects to the store.

    torch's start-up (``init_process_group``: the store's server waiting for its clients, Gloo
    meeting its peers) is bounded by the default group's timeout, and a test about a short
    timeout would otherwise fail when a busy machine starts one worker seconds after another.
    Start-up skew is absorbed here; the short timeout is left to what the test is about.
    Exits the worker (code 3) if a peer never starts.
    """
    Path(out_dir, f"started{rank}").touch()
    deadline = time.monotonic() + STARTUP_S
    while not all(Path(out_dir, f"started{r}").exists() for r in range(world)):
        if time.monotonic() > deadline:
            print(f"rank {rank}: peers not started after {STARTUP_S} s", flush=True)
            os._exit(3)
        time.sleep(0.05)


def write_report(out_dir: str, rank: int, result: dict[str, Any]) -> None:
    """A worker's report, ``OUT_DIR/rank<r>.json``, written whole (renamed into place)."""
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def wait_for_reports(out_dir: str, world: int, most_s: float) -> None:
    """Wait until every rank of the world has written its report, or ``most_s`` has passed:
    a worker whose program ended stays up (its connections, rank 0's store) while a peer may
    still be waiting on it, and no longer than that."""
    end = time.monotonic() + most_s
    while time.monotonic() < end and not all(
            os.path.exists(os.path.join(out_dir, f"rank{r}.json")) for r in range(world)):
        time.sleep(0.05)


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _reap(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill and wait for every worker still running (leave none behind)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _logs_or_fail(run: Path, world: int, mode: str, stuck: list[int], bound_s: float) -> str:
    """The workers' log tails; the test fails with them when some were still running."""
    logs = "\n".join(f"--- rank {r} ---\n{_tail(run / f'log{r}.txt')}" for r in range(world))
    if stuck:
        pytest.fail(f"{mode} world of {world}: ranks {stuck} still running after {bound_s} s "
                    f"(killed)\n{logs}")
    return logs


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
            _reap(procs)
        logs = _logs_or_fail(run, world, mode, stuck, bound_s)
        if attempt == 0 and "Address already in use" in _tail(run / "log0.txt", 100_000):
            continue
        reports = {}
        for rank in range(world):
            path = run / f"rank{rank}.json"
            if path.exists():
                reports[rank] = json.loads(path.read_text())
        return [p.returncode for p in procs], reports, logs
    raise AssertionError("unreachable")


AGENT_FAILED = "agent/failed"
"""The store key where :func:`launch_with_agent` writes the ranks that died (``"5,4"``)."""


def _watch(procs: list[subprocess.Popen[bytes]], store: Any, deadline: float,
           settle_s: float) -> list[int]:
    """Be torchrun's agent: when workers die (a signal or an error exit), write their ranks
    (once no other died for ``settle_s``) to the store; return the ranks of workers still
    running at ``deadline``."""
    dead: set[int] = set()
    told: set[int] = set()
    last = 0.0
    while time.monotonic() < deadline:
        running = [r for r, p in enumerate(procs) if p.poll() is None]
        for r, p in enumerate(procs):
            if r not in dead and p.returncode is not None and p.returncode != 0:
                dead.add(r)
                last = time.monotonic()
        if dead - told and time.monotonic() - last >= settle_s:
            store.set(AGENT_FAILED, ",".join(map(str, sorted(dead))))
            told = set(dead)
        if not running:
            return []
        time.sleep(0.02)
    return [r for r, p in enumerate(procs) if p.poll() is None]


def launch_with_agent(worker: Path, world: int, mode: str, out: Path, bound_s: float,
                      env: dict[str, str] | None = None, settle_s: float = 0.3
                      ) -> tuple[list[int | None], dict[int, dict[str, Any]], str]:
    """Like :func:`launch`, but the store lives here, in the launching process (as
    torchrun's agent store does), so it outlives any worker; workers connect to it at
    ``MASTER_PORT`` as clients (``MESHLAYOUT_AGENT_STORE=1``).  Workers that die (a signal, or
    an error exit) are reported under :data:`AGENT_FAILED`."""
    from datetime import timedelta

    import torch.distributed as dist

    run = out / "agent"
    run.mkdir(parents=True)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=bound_s))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world):
            penv = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                        MESHLAYOUT_AGENT_STORE="1", OMP_NUM_THREADS="1", **(env or {}))
            with open(run / f"log{rank}.txt", "w") as log:
                procs.append(subprocess.Popen([sys.executable, str(worker), mode, str(run)],
                                              env=penv, stdout=log, stderr=subprocess.STDOUT,
                                              cwd=str(worker.parent)))
        stuck = _watch(procs, store, time.monotonic() + bound_s, settle_s)
    finally:
        _reap(procs)
    logs = _logs_or_fail(run, world, mode, stuck, bound_s)
    reports = {r: json.loads((run / f"rank{r}.json").read_text())
               for r in range(world) if (run / f"rank{r}.json").exists()}
    return [p.returncode for p in procs], reports, logs


Reports = dict[int, dict[str, Any]]


def torch_then_ours(worker: Path, world: int, bound_s: float,
                    tmp_path_factory: pytest.TempPathFactory) -> tuple[Reports, Reports]:
    """Run ``worker`` on ``world`` processes twice, in mode ``torch`` (torch's
    ``init_device_mesh``) then ``ours`` (the facade's): each run must exit 0 on every rank
    and report from each; (torch's reports, ours)."""
    def run(which: str) -> Reports:
        codes, reports, logs = launch(worker, world, which, tmp_path_factory.mktemp(which),
                                      bound_s)
        assert codes == [0] * world, f"exit codes {codes}\n{logs}"
        assert sorted(reports) == list(range(world)), logs
        return reports

    return run("torch"), run("ours")
