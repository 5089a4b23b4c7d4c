"""The planted hangs of ``tests/test_hang_gloo.py``: one two-step training loop over a
(dp=2, tp=2) mesh of 4 ranks (per step an all_reduce on tp, then one on dp), each with one
fault planted.  The same function runs on real Gloo processes (with torch's flight recorder
on) and under ``check_spmd(4, program, torch=True)``, so the two verdicts can be compared.

``EXPECT`` says, per program, what both must name: ``(kind, dim, group members, ranks at
fault)`` per finding, and the ranks merely stuck behind them.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

TIMEOUT = timedelta(seconds=3)
DIMS = ("dp", "tp")
SHAPE = (2, 2)


def _step(backend: Any, skip: set[str], tp_shape: tuple[int, int] = (4, 8)) -> None:
    import torch
    import torch.distributed as dist

    from backend import init_device_mesh

    mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=DIMS, backend=backend)
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    for step in (1, 2):
        if not (step == 2 and "tp" in skip):
            dist.all_reduce(torch.ones(tp_shape if step == 2 else (4, 8)), group=tp)
        if not (step == 2 and "dp" in skip):
            dist.all_reduce(torch.ones(16), group=dp)


def skip_tp(backend: Any) -> None:
    """Rank 1 skips its second tp all_reduce (a data-dependent early exit on one dim)."""
    _step(backend, {"tp"} if backend.rank == 1 else set())


def shape_desync(backend: Any) -> None:
    """Rank 3 issues its second tp all_reduce as (8, 4) instead of (4, 8): the same bytes,
    so Gloo completes it with scrambled data (the records still show the desync)."""
    _step(backend, set(), tp_shape=(8, 4) if backend.rank == 3 else (4, 8))


def size_desync(backend: Any) -> None:
    """Rank 3 issues its second tp all_reduce as (6, 8) instead of (4, 8): on Gloo the
    member with the smaller buffer aborts (SIGABRT inside gloo), so it leaves no dump."""
    _step(backend, set(), tp_shape=(6, 8) if backend.rank == 3 else (4, 8))


def dies(backend: Any) -> None:
    """Rank 2 dies after the first step (on real Gloo: the process exits at once)."""
    import torch
    import torch.distributed as dist

    from backend import init_device_mesh

    mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=DIMS, backend=backend)
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    for step in (1, 2):
        if step == 2 and backend.rank == 2:
            if os.environ.get("MESHLAYOUT_HANG_REAL"):
                os._exit(9)
            raise RuntimeError("rank 2 dies")
        dist.all_reduce(torch.ones(4, 8), group=tp)
        dist.all_reduce(torch.ones(16), group=dp)


def two_dims(backend: Any) -> None:
    """Rank 1 skips its second tp all_reduce and rank 3 its second dp all_reduce."""
    _step(backend, {1: {"tp"}, 3: {"dp"}}.get(backend.rank, set()))


PROGRAMS = {"skip_tp": skip_tp, "shape_desync": shape_desync, "size_desync": size_desync,
            "dies": dies, "two_dims": two_dims}

EXPECT: dict[str, tuple[set[tuple[str, str, tuple[int, ...], tuple[int, ...]]], set[int]]] = {
    "skip_tp": ({("unmatched", "tp", (0, 1), (1,))}, {2}),
    "shape_desync": ({("desync", "tp", (2, 3), (3,))}, set()),  # the odd one of a tie: the
    # call the other tp group did not make (before: the lower rank, 2)
    "size_desync": ({("unmatched", "tp", (2, 3), (2,)), ("unmatched", "dp", (0, 2), (2,))},
                    {1}),
    "dies": ({("unmatched", "tp", (2, 3), (2,)), ("unmatched", "dp", (0, 2), (2,))}, {1}),
    "two_dims": ({("unmatched", "tp", (0, 1), (1,)), ("unmatched", "dp", (1, 3), (3,))}, {2}),
}
