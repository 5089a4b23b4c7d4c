"""A worker of ``tests/test_apply_recovery_gloo.py``: hold a sharded state, save a checkpoint,
lose a rank to SIGKILL mid-training, decide with ``mesh.recover`` and act with
``backend.apply_recovery``, then check every element and train on.

Run by ``gloo_launch.launch_with_agent`` on 8 processes (the store lives in the launcher,
which writes the ranks that died under ``agent/failed``, as torchrun's agent would).  The
plan is (dp=3, tp=2) over ranks 0..5; ranks 6 and 7 are spares.  The state, over the world
view: ``w`` (6 x 4, ``(Replicate, Shard(0))``: every block has a replica), ``e`` (6 x 4,
``(Shard(0), Shard(1))``: every block on one rank only, so a failed rank's block is lost),
``b`` (8, float64, ``(Shard(0), Replicate)``).  Step ``s`` adds ``s`` to every element
(each rank to its own block); the checkpoint (DCP, saved by the 6 ranks of the world at step
0) holds the values of step 0.  ``VICTIM`` kills itself at step :data:`KILL_STEP`; ``WAY``
names the kind of way to take (``spare``, ``drop``): the first such way ``recover`` ranks.

Each rank reports, for every tensor it holds after, the largest difference from the expected
block (elements some rank still up held: their value at the failure's step; elements no rank
up held: the checkpoint's), computed from the full tensors and ``Sharding.local`` on NumPy
(checked against torch elsewhere), never from the code under test; then the ranks of its
new groups against the new view's, and one more step's all-reduce over the new world.
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

TIMEOUT = timedelta(seconds=4)
START = timedelta(seconds=60)
KILL_STEP = 2
STEPS = 5
RANKS = [[0, 1], [2, 3], [4, 5]]
SPARES = [6, 7]


def _state(world: Any) -> dict[str, Any]:
    from mesh import Replicate, Shard, Sharding

    return {"w": Sharding(world, (Replicate(), Shard(0)), (6, 4)),
            "e": Sharding(world, (Shard(0), Shard(1)), (6, 4)),
            "b": Sharding(world, (Shard(0), Replicate()), (8,))}


DTYPES = {"w": "float32", "e": "float32", "b": "float64"}


def _full(name: str, shape: tuple[int, ...], step: int) -> Any:
    base = {"w": 0.0, "e": 1000.0, "b": 5000.0}[name]
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) + base + step


def _plan(world: Any) -> dict[str, Any]:
    return {"world": world}


def main(out: str) -> None:
    import faulthandler

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor

    faulthandler.dump_traceback_later(90)

    from backend import GlooBackend, Recovered, apply_recovery, bind, to_torch_placements
    from mesh import MeshView, recover

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    at = -1
    victim, kind = int(os.environ["VICTIM"]), os.environ["WAY"]
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, is_master=False,
                          timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=START)
    backend = GlooBackend(timeout=TIMEOUT)
    world_view = MeshView.from_ranks(RANKS, ["dp", "tp"])
    job = bind(world_view, backend)
    state = _state(world_view)
    inside = job.get_coordinate() is not None
    ckpt = os.path.join(out, "ckpt")
    local: dict[str, Any] = {}
    dist.barrier()  # together first (generous START): TIMEOUT is about the failure, not start-up
    if inside:
        job.materialize()
        local = {n: torch.from_numpy(s.local(_full(n, s.shape, 0), rank)).to(
            getattr(torch, DTYPES[n])) for n, s in state.items()}
        everyone = job._flatten("all")  # the 6 ranks of the world, for DCP's collectives
        saved = {n: DTensor.from_local(local[n], job.to_torch(), to_torch_placements(s),
                                       shape=torch.Size(s.shape),
                                       stride=torch.empty(s.shape).stride())
                 for n, s in state.items()}
        dcp.save(saved, checkpoint_id=ckpt, process_group=everyone.get_group())
        at = 0
        for step in range(1, STEPS):
            if rank == victim and step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            if store.check([AGENT_FAILED]):
                break
            for n in local:
                local[n] += 1.0  # the step's update of this rank's block
            at = step
            try:  # the step's collective over the whole world: every survivor fails here
                dist.all_reduce(torch.tensor([float(rank)]), group=everyone.get_group())
            except Exception as e:
                backend.diagnose(e, everyone.get_group())
                break
            time.sleep(0.05)
    store.wait([AGENT_FAILED], timedelta(seconds=60))
    lost = sorted(int(r) for r in store.get(AGENT_FAILED).decode().split(","))
    decided = recover(_plan, world_view, lost, state=state, spares=SPARES)
    way = next(w for w in decided.ways if w.kind == kind)
    store.set(f"step/{rank}", str(at))
    steps = {int(store.get(f"step/{r}").decode()) for r in range(size)
             if r not in lost and r < 6}
    t0 = time.monotonic()
    done: Recovered = apply_recovery(way, local, device_mesh=job, checkpoint=ckpt,
                          dtypes={n: getattr(torch, d) for n, d in DTYPES.items()})
    seconds = time.monotonic() - t0
    report: dict[str, Any] = {"lost": lost, "way": way.kind.value, "label": way.label,
                              "steps": sorted(steps), "seconds": seconds,
                              "predicted": way.seconds, "storage": done.storage_elements,
                              "in_new": done.mesh is not None, "diff": {},
                              "reformed": [g.to_dict() for g in done.groups]}
    (step,) = steps  # every survivor failed at the same step (the victim's)
    for name, block in done.state.items():
        dst = way.moves[name].dst
        now, then = _full(name, dst.shape, step), _full(name, dst.shape, 0)
        held = np.zeros(dst.shape, dtype=bool)  # elements a rank still up held before
        marks = np.arange(int(np.prod(dst.shape))).reshape(dst.shape)
        for r in range(6):
            if r not in lost:
                held.flat[state[name].local(marks, r).reshape(-1)] = True
        want = dst.local(np.where(held, now, then), rank)
        report["diff"][name] = float(np.abs(block.double().numpy() - want).max()) \
            if block.numel() else 0.0
        report.setdefault("dtypes", {})[name] = str(block.dtype)
    if done.mesh is not None:
        new = done.mesh
        report["groups"] = {d: [list(dist.get_process_group_ranks(new.get_group(d))),
                                list(new.view.group(rank, d))] for d in ("dp", "tp")}
        report["group_rank"] = {d: [new.get_group(d).rank(), new.get_local_rank(d)]
                                for d in ("dp", "tp")}
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=new.get_group("tp"))
        report["tp_sum"] = int(t.item())
        report["tp_want"] = sum(new.view.group(rank, "tp"))
    write_report(out, rank, report)
    backend.shutdown()


if __name__ == "__main__":
    main(sys.argv[2])
