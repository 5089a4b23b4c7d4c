"""One process of a Gloo world on loopback, for ``tests/test_backend_gloo.py``.

Run as ``python tests/backend_gloo_worker.py MODE OUT_DIR`` with torchrun's environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).  The worker
writes what it observed to ``OUT_DIR/rank<r>.json``; the test process compares that with
brute-force expectations, so the worker asserts nothing itself.

- ``check``: for every case of :func:`cases` (same order on every rank: the SPMD
  contract), every dim: the group's torch ranks, size and rank, an ``all_reduce`` and an
  ``all_gather`` of the global rank; then a DTensor round trip per :data:`DTENSOR` case;
  then ``backend.shutdown()``.
- ``exit`` and ``stall`` (faults, world 4): every rank builds groups and runs one
  collective; then rank :data:`VICTIM` leaves: ``exit`` calls ``os._exit`` (its sockets
  close), ``stall`` stops taking part (it waits, alive, until the others have reported).
  Every other rank times its next collective over a whole-world group created with the
  short per-dim timeout :data:`FAULT_TIMEOUT_S` (the default group's is much longer).

Importing this module only defines the cases (no torch import), so the test can share them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from gloo_launch import write_report

Case = tuple[str, tuple[Any, ...], list[tuple[Any, ...]], dict[str, dict[str, Any]]]

#: The rank that leaves in the fault modes, and the exit code it leaves with.
VICTIM, VICTIM_EXIT = 3, 17
#: The collective timeout of the group the survivors use after the fault (GroupOptions).
FAULT_TIMEOUT_S = 5.0
#: The default group's timeout in the fault modes: much longer, so an error within
#: FAULT_TIMEOUT_S shows that the per-dim option reached the group.
FAULT_DEFAULT_TIMEOUT_S = 60.0


def cases(world: int) -> list[Case]:
    """``(label, start, ops, overrides)``; ``overrides`` maps dim names to GroupOptions kwargs
    (``timeout`` in seconds).  ``after_sub`` creates new whole-world groups after a view over
    part of the world (see ``test_backend_gloo.py``: torch's group naming must stay in step)."""
    base: tuple[Any, ...]
    if world == 4:
        base = ("shape", (2, 2), ("dp", "tp"))
        return [
            ("base", base, [], {}),
            ("transposed", base, [("transpose", ("tp", "dp"))], {}),
            ("flat_tp_dp", base, [("flatten", ("tp", "dp"), "tp_dp")], {}),
            ("world", ("shape", (4,), ("world",)), [], {}),
            ("world_timeout", ("shape", (4,), ("world",)), [], {"world": {"timeout": 30}}),
            ("unflat", ("shape", (4,), ("world",)), [("unflatten", "world", (2, 2), ("a", "b"))],
             {}),
            ("tagged", base, [], {"tp": {"tag": "separate"}}),
            ("explicit", ("ranks", [[3, 0], [1, 2]], ("x", "y")), [], {}),
            ("explicit_t", ("ranks", [[3, 0], [1, 2]], ("x", "y")), [("transpose", ("y", "x"))],
             {}),
            ("sub", ("ranks", [2, 0], ("s",)), [], {}),
            ("after_sub", base, [], {"dp": {"tag": "after_sub"}, "tp": {"tag": "after_sub"}}),
        ]
    base = ("shape", (2, 2, 2), ("dp", "cp", "tp"))
    return [
        ("base", base, [], {}),
        ("transposed", base, [("transpose", ("tp", "dp", "cp"))], {}),
        ("flat_dp_tp", base, [("flatten", ("dp", "tp"), "dp_tp")], {}),
        ("flat_tp_dp", base, [("flatten", ("tp", "dp"), "tp_dp")], {}),
        ("world", ("shape", (8,), ("world",)), [], {}),
        ("unflat", ("shape", (8,), ("world",)), [("unflatten", "world", (4, 2), ("a", "b"))], {}),
        ("unflat_moe", ("shape", (8,), ("world",)),
         [("unflatten", "world", (2, 2, 2), ("dp", "ep", "ep_tp"))], {}),
        ("tagged", base, [], {"tp": {"tag": "separate"}, "dp": {"timeout": 30}}),
        ("explicit", ("ranks", [[5, 2, 7, 0], [3, 6, 1, 4]], ("x", "y")), [], {}),
        ("explicit_t", ("ranks", [[5, 2, 7, 0], [3, 6, 1, 4]], ("x", "y")),
         [("transpose", ("y", "x"))], {}),
        ("sub", ("ranks", [[6, 1], [3, 4]], ("p", "q")), [], {}),
        ("after_sub", base, [], {"dp": {"tag": "after_sub"}, "cp": {"tag": "after_sub"}}),
    ]


#: Cases whose ``to_torch()`` mesh runs a DTensor round trip (placements: Shard(0) on the
#: first dim, Shard(1) on the last, Replicate between).
DTENSOR = ("base", "transposed", "flat_tp_dp", "world", "explicit_t")


def _options(spec: dict[str, Any]) -> Any:
    from datetime import timedelta

    from backend import GroupOptions

    kw = dict(spec)
    if "timeout" in kw:
        kw["timeout"] = timedelta(seconds=kw["timeout"])
    return GroupOptions(**kw)


def _observe(dist: Any, torch: Any, group: Any, rank: int) -> dict[str, Any]:
    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t, group=group)
    n = group.size()
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(gathered, torch.tensor([rank], dtype=torch.int64), group=group)
    return {"pg": dist.get_process_group_ranks(group), "size": n, "rank": group.rank(),
            "all_reduce": int(t.item()), "all_gather": [int(x.item()) for x in gathered],
            "is_world": group is dist.group.WORLD, "name": group.group_name}


def _refusal(mesh: Any, dim: str) -> str:
    """The name of the error ``mesh.get_group(dim)`` raises (or ``"none"``)."""
    try:
        mesh.get_group(dim)
    except Exception as e:
        return type(e).__name__
    return "none"


def _check(out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from backend_oracle import build
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from backend import GlooBackend, bind

    backend = GlooBackend.from_env(timeout=timedelta(seconds=30))
    rank, world = backend.rank, backend.world_size
    result: dict[str, Any] = {"rank": rank, "cases": {}, "created": {}, "dtensor": {},
                              "outside": {}}
    meshes = {}
    for label, start, ops, overrides in cases(world):
        view, _ = build(start, ops)
        mesh = bind(view, backend, backend_override={d: _options(o) for d, o in overrides.items()})
        meshes[label] = mesh
        if mesh.get_coordinate() is None:
            # Not in this view's universe: still asks, as the SPMD contract says.
            result["cases"][label] = None
            result["outside"][label] = [_refusal(mesh, dim) for dim in view.names]
        else:
            result["cases"][label] = {dim: _observe(dist, torch, mesh.get_group(dim), rank)
                                      for dim in view.names}
        result["created"][label] = len(backend.created)
    for label in DTENSOR:
        mesh = meshes[label]
        x = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
        placements = [Shard(0), *[Replicate()] * (mesh.ndim - 2), *[Shard(1)][:mesh.ndim - 1]]
        try:
            dt = distribute_tensor(x, mesh.to_torch(), placements)
            result["dtensor"][label] = {"equal": bool(torch.equal(dt.full_tensor(), x)),
                                        "local": list(dt.to_local().shape)}
        except Exception as e:  # reported, so that the other checks still run
            result["dtensor"][label] = {"error": f"{type(e).__name__}: {e}"[:500]}
    t0 = time.monotonic()
    backend.shutdown()
    result["shutdown_s"] = time.monotonic() - t0
    result["initialized_after_shutdown"] = dist.is_initialized()
    write_report(out_dir, rank, result)


def _fault(out_dir: str, how: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from backend import GlooBackend, GroupOptions, init_device_mesh

    backend = GlooBackend.from_env(timeout=timedelta(seconds=FAULT_DEFAULT_TIMEOUT_S))
    rank = backend.rank
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    short = GroupOptions(timeout=timedelta(seconds=FAULT_TIMEOUT_S))
    everyone = mesh.flatten("everyone", backend_override=short)  # whole world, own group
    mesh.materialize()
    group = everyone.materialize().get_group()
    t = torch.ones(1)
    dist.all_reduce(t, group=group)  # everyone is alive and connected
    result: dict[str, Any] = {"rank": rank, "before": float(t.item()),
                              "groups": len(backend.created)}
    if rank == VICTIM:
        time.sleep(0.5)  # let the others return from the collective above
        if how == "stall":  # alive but silent until every survivor has reported
            others = [os.path.join(out_dir, f"rank{r}.json") for r in range(4) if r != rank]
            deadline = time.monotonic() + 4 * FAULT_TIMEOUT_S + 10
            while time.monotonic() < deadline and not all(map(os.path.exists, others)):
                time.sleep(0.1)
        os._exit(VICTIM_EXIT)
    time.sleep(1.0)  # the victim has left now
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1), group=group)
        result["error"] = None
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"[:500]
    result["elapsed_s"] = time.monotonic() - t0
    write_report(out_dir, rank, result)  # before shutdown: the test needs this even if that hangs
    done = threading.Event()

    def shut() -> None:
        try:
            backend.shutdown()
        finally:
            done.set()

    threading.Thread(target=shut, daemon=True).start()
    result["shutdown_done"] = done.wait(timeout=10)
    write_report(out_dir, rank, result)
    os._exit(0)  # skip interpreter teardown, which may wait on the broken groups


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "check":
        _check(out)
    else:
        _fault(out, mode)
