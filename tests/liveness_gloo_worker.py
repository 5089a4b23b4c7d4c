"""Worker for ``tests/test_liveness_gloo.py``: one rank of a 4-process Gloo world.

``python liveness_gloo_worker.py MODE OUT_DIR`` (rank and world from torchrun's
environment, as :mod:`gloo_launch` sets them); writes ``OUT_DIR/rank<r>.json``.

- ``healthy``: a (2, 2) mesh's groups created with ranks 1-3 asking 0.3 s after rank 0 (so
  rank 0 waits in the barrier past its grace period), an all-reduce on each, a clean
  shutdown.  The test reads the logs: c10d must warn about nothing the barrier did.
- ``frozen``: rank 3 stops itself (SIGSTOP) inside torch's creation of its ``tp`` group
  (ranks 2, 3; timeout :data:`T_S`); rank 0 wakes it (SIGCONT) after ``2 * T_S``.  Rank 2
  must fail naming rank 3 as silent within ``T_S`` plus the liveness check.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import gloo_launch

T_S = 3.0  # the tp group's timeout in the frozen mode
FROZEN = 3


def _healthy(rank: int, mesh: Any, dist: Any, torch: Any) -> dict[str, Any]:
    if rank != 0:
        time.sleep(0.3)
    sums = {}
    for dim in ("dp", "tp"):
        t = torch.ones(1) * rank
        dist.all_reduce(t, group=mesh.get_group(dim))
        sums[dim] = float(t.item())
    return {"sums": sums}


def _frozen(rank: int, mesh: Any, out_dir: str) -> dict[str, Any]:
    from backend._c10d import _torch_groups as tg

    Path(out_dir, f"pid{rank}").write_text(str(os.getpid()))
    if rank == 0:  # wakes the frozen rank after twice the timeout
        def wake() -> None:
            time.sleep(2 * T_S)
            pid = int(Path(out_dir, f"pid{FROZEN}").read_text())
            os.kill(pid, signal.SIGCONT)

        threading.Thread(target=wake, daemon=True).start()
    if rank == FROZEN:
        real = tg._create

        def stop_inside(spec: Any, name: str) -> Any:
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen, every thread, beats included
            return real(spec, name)

        tg._create = stop_inside
    start = time.monotonic()
    out: dict[str, Any] = {"start": start}
    if rank in (2, FROZEN):
        try:
            mesh.get_group("tp")
            out["ok"] = True
        except Exception as e:
            out.update(error=type(e).__name__, message=str(e),
                       missing=list(getattr(e, "missing", ())))
    out["end"] = time.monotonic()
    return out


def _main(mode: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from backend import GlooBackend, GroupOptions, init_device_mesh

    rank = int(os.environ["RANK"])
    gloo_launch.start_together(out_dir, rank, 4)
    backend = GlooBackend.from_env(timeout=timedelta(seconds=60))
    short = GroupOptions(timeout=timedelta(seconds=T_S))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend,
                            backend_override={"tp": short} if mode == "frozen" else None)
    dist.barrier()
    result: dict[str, Any] = {"rank": rank}
    if mode == "healthy":
        result.update(_healthy(rank, mesh, dist, torch))
    else:
        result.update(_frozen(rank, mesh, out_dir))
    gloo_launch.write_report(out_dir, rank, result)
    if mode == "healthy":
        backend.shutdown()
    # rank 0 hosts the store: every rank stays until all have reported (at most a minute)
    end = time.monotonic() + 60
    while time.monotonic() < end and not all(Path(out_dir, f"rank{r}.json").exists()
                                             for r in range(4)):
        time.sleep(0.05)
    sys.stdout.flush()
    os._exit(0)  # a frozen peer's group may still be connecting: do not wait for it


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
