"""The planted hangs of ``tests/test_hang_gloo.py``: one two-step training loop over a
(dp=2, tp=2) mesh of 4 ranks (per step an all_reduce on tp, then one on dp), each with one
fault planted; ``skips_world`` adds an all_reduce on torch's default group to each step, and
``skips_send`` is a two-stage pipeline over (pp=2, tp=2).  The same function runs on real
Gloo processes (with torch's flight recorder on) and under ``check_spmd(4, program,
torch=True)``, so the two verdicts can be compared.

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


def _stall(rank: int) -> None:
    """Rank ``rank`` stalls: on real Gloo it sleeps past its peers' timeout and dumps with
    no further call (as a rank stuck in compute or I/O is dumped); elsewhere it stops."""
    import time

    if os.environ.get("MESHLAYOUT_HANG_REAL"):
        time.sleep(TIMEOUT.total_seconds() * 2)
    raise RuntimeError(f"rank {rank} stalled")


def stalls(backend: Any) -> None:
    """Rank 2 stalls before its second step (compute, I/O, a lock)."""
    _stalling(backend, {2})


def host_stalls(backend: Any) -> None:
    """Ranks 2 and 3, one host of two, stall after their second tp all_reduce."""
    _stalling(backend, {2, 3}, after_tp=True)


def _stalling(backend: Any, ranks: set[int], after_tp: bool = False) -> None:
    import torch
    import torch.distributed as dist

    from backend import init_device_mesh

    mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=DIMS, backend=backend)
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    for step in (1, 2):
        if step == 2 and backend.rank in ranks and not after_tp:
            _stall(backend.rank)
        dist.all_reduce(torch.ones(4, 8), group=tp)
        if step == 2 and backend.rank in ranks:
            _stall(backend.rank)
        dist.all_reduce(torch.ones(16), group=dp)


def skips_world(backend: Any) -> None:
    """Rank 3 skips its second all_reduce on torch's default group (a step of tp, world, dp
    all_reduces); on real Gloo the default group gets the mesh's short timeout."""
    import torch
    import torch.distributed as dist

    from backend import init_device_mesh

    if os.environ.get("MESHLAYOUT_HANG_REAL"):
        dist.distributed_c10d._set_pg_timeout(TIMEOUT)
    mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=DIMS, backend=backend)
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    for step in (1, 2):
        dist.all_reduce(torch.ones(4, 8), group=tp)
        if not (step == 2 and backend.rank == 3):
            dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(16), group=dp)


PIPELINE = ("pp", "tp")


def skips_send(backend: Any) -> None:
    """A (pp=2, tp=2) pipeline: stage 0 all_reduces on tp and sends to its stage-1 peer,
    which receives and all_reduces on tp; rank 0 skips its second send.  Gloo records no
    point-to-point call: rank 2, blocked in its receive, looks stalled."""
    import torch
    import torch.distributed as dist

    from backend import init_device_mesh

    mesh = init_device_mesh("cpu", SHAPE, mesh_dim_names=PIPELINE, backend=backend)
    tp, pp = mesh.get_group("tp"), mesh.get_group("pp")
    rank = backend.rank
    for step in (1, 2):
        if rank < 2:
            dist.all_reduce(torch.ones(4, 8), group=tp)
            if not (step == 2 and rank == 0):
                dist.send(torch.ones(8), rank + 2, group=pp)
        else:
            dist.recv(torch.ones(8), rank - 2, group=pp)
            dist.all_reduce(torch.ones(4, 8), group=tp)


PROGRAMS = {"skip_tp": skip_tp, "shape_desync": shape_desync, "size_desync": size_desync,
            "dies": dies, "two_dims": two_dims, "stalls": stalls, "host_stalls": host_stalls,
            "skips_world": skips_world, "skips_send": skips_send}

DIMS_OF = {"skips_send": PIPELINE}
"""The mesh dims of a program whose plan is not (dp, tp)."""

EXPECT: dict[str, tuple[set[tuple[str, str, tuple[int, ...], tuple[int, ...]]], set[int]]] = {
    "skip_tp": ({("unmatched", "tp", (0, 1), (1,))}, {2}),
    "shape_desync": ({("desync", "tp", (2, 3), (3,))}, set()),  # the odd one of a tie: the
    # call the other tp group did not make (before: the lower rank, 2)
    "size_desync": ({("desync", "tp", (2, 3), (3,)), ("unmatched", "tp", (2, 3), (2,)),
                     ("unmatched", "dp", (0, 2), (2,))}, {1}),  # 3's call against tp (0, 1)'s
    "dies": ({("unmatched", "tp", (2, 3), (2,)), ("unmatched", "dp", (0, 2), (2,))}, {1}),
    "two_dims": ({("unmatched", "tp", (0, 1), (1,)), ("unmatched", "dp", (1, 3), (3,))}, {2}),
    "stalls": ({("unmatched", "tp", (2, 3), (2,)), ("unmatched", "dp", (0, 2), (2,))}, {1}),
    "host_stalls": ({("unmatched", "dp", (0, 2), (2,)), ("unmatched", "dp", (1, 3), (3,))},
                    set()),
    "skips_world": ({("unmatched", "world", (0, 1, 2, 3), (3,))}, {3}),  # 3 then waits at dp
    "skips_send": ({("unmatched", "tp", (2, 3), (2,))}, set()),
}

CAUSES = {"skip_tp": {1: "went on"}, "two_dims": {1: "went past", 3: "stopped"},
          "stalls": {2: "stopped"}, "host_stalls": {2: "stopped", 3: "stopped"},
          "skips_world": {3: "went past"}, "skips_send": {2: "stopped"}, "dies": {2: "no dump"}}
"""The cause the records give each rank at fault (where the program fixes it)."""

MAYBE = {"skips_send": (0,)}
"""The ranks named as possible causes (Gloo does not record rank 0's missing send)."""
