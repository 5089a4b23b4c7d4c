"""A worker of the recovery tests: train, lose ranks to SIGKILL, rebind the survivors, check.

Run by ``gloo_launch.launch_with_agent`` (the store lives in the launcher, which writes the
ranks that died under ``agent/failed``, as torchrun's agent would).  Configured by the
environment: ``PLAN`` (``2d``: (dp=4, tp=2); ``3d``: (dp=2, cp=2, tp=2) with the flattened
``dp_cp``; ``spare``: (dp=3, tp=2) over ranks 0..5, ranks 6 and 7 spare), ``VICTIMS`` (ranks
that kill themselves, e.g. ``5`` or ``4,5``), ``KILL_STEP`` and ``KILL_AT`` (``0``: before the
step's first collective, ``1``: between its first and second), and ``WAY`` (``drop`` along
dp, or ``substitute`` with the spares).

Every survivor: a collective fails or the agent's report appears, it reads the lost ranks,
computes the surviving view with the mesh layer, ``rebind``s, and all-reduces its rank on
every dim of the new plan; the expected sums come from a NumPy rank tensor with the lost
slices removed (or spares put in), not from the code under test.  It reports the sums,
which groups were kept (the same communicator objects, same members), reconfigured in place
(the same objects, new members) and how many were created, each new group's ranks, group
rank and this rank's coordinate, and what the backend says became of each broken group.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

import numpy as np
from gloo_launch import AGENT_FAILED, write_report

TIMEOUT = timedelta(seconds=float(os.environ.get("RECOVER_TIMEOUT_S", "4")))
START = timedelta(seconds=60)  # the world's start: 8 processes on 2 cores may be slow
STEPS = 6


def _plans(kind: str) -> tuple[Any, list[str], Any]:
    """(rank tensor, dim names, plan: world view -> named views) of a plan kind."""
    if kind == "2d":
        return np.arange(8).reshape(4, 2), ["dp", "tp"], lambda w: {"world": w}
    if kind == "3d":
        return (np.arange(8).reshape(2, 2, 2), ["dp", "cp", "tp"],
                lambda w: {"world": w, "dp_cp": w.flatten(("dp", "cp"), "dp_cp")})
    return np.arange(6).reshape(3, 2), ["dp", "tp"], lambda w: {"world": w}


def _expected(tensor: Any, names: list[str], rank: int) -> dict[str, int]:
    """Sum of each dim's group holding ``rank`` (and of the flattened dp_cp), from NumPy."""
    where = tuple(int(i) for i in np.argwhere(tensor == rank)[0])
    out = {}
    for k, name in enumerate(names):
        index = list(where)
        index[k] = slice(None)
        out[name] = int(tensor[tuple(index)].sum())
    if "cp" in names:
        out["dp_cp"] = int(tensor[:, :, where[2]].sum())
    return out


def _survivors(tensor: Any, lost: list[int], way: str) -> Any:
    """The rank tensor that goes on: dp slices holding a lost rank removed, or each lost rank
    replaced by the next spare (6, 7)."""
    if way == "drop":
        keep = [i for i in range(tensor.shape[0]) if not set(tensor[i].flat) & set(lost)]
        return tensor[keep]
    out = tensor.copy()
    for spare, gone in zip((6, 7), sorted(lost)):
        out[out == gone] = spare
    return out


def _all_reduce(group: Any, rank: int) -> int:
    import torch
    import torch.distributed as dist

    device = "cuda" if os.environ.get("BACKEND") == "nccl" else "cpu"
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t, group=group)
    return int(t.item())


def _step(backend: Any, world: Any, names: list[str], kill: bool, kill_at: int) -> bool:
    """One training step (an all-reduce per dim); False, after ``diagnose`` of the group,
    when a collective fails."""
    for i, name in enumerate(names):
        if kill and i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        group = world.get_group(name)
        try:
            _all_reduce(group, backend.rank)
        except Exception as e:
            backend.diagnose(e, group)  # this group is out of step: a rebind ends it
            return False
    return True


def _lost(store: Any) -> list[int]:
    store.wait([AGENT_FAILED], timedelta(seconds=30))
    return sorted(int(r) for r in store.get(AGENT_FAILED).decode().split(","))


def _train(backend: Any, meshes: dict[str, Any], names: list[str], store: Any) -> str:
    """Steps until a failure: ``"collective"`` (one raised) or ``"agent"`` (its report)."""
    rank = backend.rank
    victims = [int(r) for r in os.environ["VICTIMS"].split(",")]
    kill_step, kill_at = int(os.environ["KILL_STEP"]), int(os.environ["KILL_AT"])
    for step in range(STEPS):
        if store.check([AGENT_FAILED]):
            return "agent"
        if meshes["world"].get_coordinate() is None:  # a spare: wait for the call
            time.sleep(0.05)
            continue
        if not _step(backend, meshes["world"], names, step == kill_step and rank in victims,
                     kill_at):
            return "collective"
    return "agent" if store.check([AGENT_FAILED]) else "none"


def main(out: str) -> None:
    import faulthandler

    import torch.distributed as dist

    # a worker still running at the launcher's bound tells where it was (stderr, its log)
    faulthandler.dump_traceback_later(float(os.environ.get("RECOVER_DUMP_S", "45")))

    from backend import GlooBackend, NcclBackend, bind
    from mesh import MeshView, SurvivalError, survive

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=timedelta(seconds=60))
    if os.environ.get("BACKEND") == "nccl":  # one GPU per rank, device-bound (shrinkable)
        import torch

        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world,
                                timeout=START, device_id=torch.device("cuda", rank))
        backend: Any = NcclBackend(timeout=TIMEOUT)
    else:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=START)
        backend = GlooBackend(timeout=TIMEOUT)
    tensor, names, plan = _plans(os.environ["PLAN"])
    world_view = MeshView.from_ranks(tensor.tolist(), names)
    old = {k: bind(v, backend) for k, v in plan(world_view).items()}
    # every process here together (the default group's timeout is the generous START): the
    # short TIMEOUT is about the failure, not a loaded machine's start-up skew (a rank 5 s late
    # to the first group made its creation fail in CI)
    dist.barrier()
    if old["world"].get_coordinate() is not None:
        old["world"].materialize()
        if "dp_cp" in old:
            old["dp_cp"].materialize()
    before = {n: id(old["world"].get_group(n)) for n in names
              if old["world"].get_coordinate() is not None}
    seen = _train(backend, old, names, store)
    lost = _lost(store)
    made_before = {id(r.group) for r in backend.created}
    way = os.environ["WAY"]
    try:
        after = survive(plan, world_view, lost, **({"drop": "dp"} if way == "drop" else
                                                   {"spares": [6, 7]}))
    except SurvivalError as e:  # no way to go on: a typed error saying why
        write_report(out, rank, {"seen": seen, "lost": lost, "refused": str(e)})
        return
    new_tensor = _survivors(tensor, lost, way)
    world_mesh = old["world"].rebind(after.world)
    new = {k: world_mesh if k == "world" else bind(v, backend)
           for k, v in after.views.items()}
    report: dict[str, Any] = {"seen": seen, "lost": lost, "in_new": False}
    if world_mesh.get_coordinate() is not None:
        got = {n: _all_reduce(world_mesh.get_group(n), rank) for n in names}
        if "dp_cp" in new:
            got["dp_cp"] = _all_reduce(new["dp_cp"].get_group("dp_cp"), rank)
        groups = {n: world_mesh.get_group(n) for n in names}
        moved = {n for n in names if dist.get_process_group_ranks(groups[n]) !=
                 list(world_view.group(rank, n))} if world_view.ranks.offset_of(rank) is not None \
            else set(names)
        same = {n for n in names if id(groups[n]) == before.get(n)}
        report.update(
            in_new=True, sums=got, expected=_expected(new_tensor, names, rank),
            kept=sorted(same - moved), reconfigured=sorted(same & moved),
            created=sum(id(r.group) not in made_before for r in backend.created),
            ranks={n: dist.get_process_group_ranks(g) for n, g in groups.items()},
            group_rank={n: g.rank() for n, g in groups.items()},
            coordinate={n: world_mesh.get_local_rank(n) for n in names},
            wanted={n: list(after.world.group(rank, n)) for n in names})
    report["reformed"] = [r.to_dict() for r in backend.reformed]
    write_report(out, rank, report)
    backend.shutdown()


if __name__ == "__main__":
    main(sys.argv[2])
