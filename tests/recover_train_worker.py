"""A worker of ``tests/test_recover_train_gloo.py``: torch's own TP (``parallelize_module``)
and FSDP2 (``fully_shard``, or torch's HSDP: ``fully_shard`` over two dims) training on a
facade mesh loses a rank or a whole host to SIGKILL and goes on, without a restart, through
``mesh.recover`` and ``backend.apply_recovery``.

Modes (``python recover_train_worker.py MODE OUT_DIR``), ``JOB`` naming the job (:data:`JOBS`):

- ``train`` (by ``gloo_launch.launch_with_agent``): the plan is the job's shape over ranks
  0.. in order, and the ranks past it are spares.  A 2-layer MLP, column- then row-parallel
  over tp and fully sharded over the job's data-parallel dims (so ``_StridedShard``
  parameters), trains with Adam; its parameters and Adam's two moments are the state (12
  tensors).  After step :data:`CKPT_STEP` the state is saved with DCP; after every step
  rank 0 writes the full tensors (``full_tensor()``, torch's all-gather) to
  ``OUT/full<step>.pt``, and at the start every rank writes which elements it holds
  (torch's local of an ``arange``) to ``OUT/held<rank>.pt``.  The ``VICTIMS`` (one rank, or
  a host's ranks) die together at the start of :data:`KILL_STEP`: that step fails on every
  survivor.  Every process still up then decides (``mesh.recover`` on the job's hosts, the
  way it ranks best) and acts (``apply_recovery``); each rank that goes on checks each
  recovered block against torch's own ``distribute_tensor`` of the expected full tensor
  (the last completed step's values, the checkpoint's where only the victims held them),
  rebuilds the model on the new mesh from the recovered blocks and trains :data:`MORE`
  more steps; the new mesh's lowest rank writes the final full parameters to
  ``OUT/final.pt``.
- ``reference`` (``gloo_launch.launch``; ``FROM`` names the ``train`` run's folder, ``SHAPE``
  the new mesh's shape): a job started on that mesh from the same expected state, trained
  the same :data:`MORE` steps; rank 0 writes ``OUT/final.pt``.

Inputs depend on the step and the data-parallel coordinate only, so a spare in a victim's
coordinate computes what the victim would have.  The worker asserts nothing; it reports.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gloo_launch import AGENT_FAILED, start_together, write_report
from reshard_gloo_worker import _torch_placement as _placement

TIMEOUT = timedelta(seconds=15)
"""The groups' timeout.  A survivor talking to a victim sees it die at once (its sockets
close); one waiting on survivors that already left the step waits this out (ranks 0 and 4
when rank 3 dies).  Not shorter: a step of 12 processes on 2 loaded cores took 7 s, and a
peer later than the timeout would fail a step before the kill."""
START = timedelta(seconds=120)
WIDTH = 12
CKPT_STEP = 1
KILL_STEP = 4
MORE = 3


@dataclass(frozen=True)
class Job:
    """One training job: its mesh's dims and shape (ranks 0.. in row-major order), the ranks
    per host (the spares' hosts too), the dims ``fully_shard`` gets (two: torch's HSDP,
    replicated over the first, sharded over the second), and what TP (Colwise "0", Rowwise
    "2") then FSDP2 give each parameter: its shape and one placement per dim."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    host: int
    fsdp: tuple[str, ...]
    layout: dict[str, tuple[tuple[int, ...], tuple[str, ...]]]


JOBS = {
    "fsdp_tp": Job(("dp", "tp"), (3, 2), 2, ("dp",), {
        "0.weight": ((2 * WIDTH, WIDTH), ("SS0/2", "S0")),
        "0.bias": ((2 * WIDTH,), ("SS0/2", "S0")),
        "2.weight": ((WIDTH, 2 * WIDTH), ("S0", "S1")),
        "2.bias": ((WIDTH,), ("S0", "R"))}),
    "hsdp_tp": Job(("dp_replicate", "dp_shard", "tp"), (2, 2, 2), 4, ("dp_replicate", "dp_shard"), {
        "0.weight": ((2 * WIDTH, WIDTH), ("R", "SS0/2", "S0")),
        "0.bias": ((2 * WIDTH,), ("R", "SS0/2", "S0")),
        "2.weight": ((WIDTH, 2 * WIDTH), ("R", "S0", "S1")),
        "2.bias": ((WIDTH,), ("R", "S0", "R"))}),
}
"""The jobs, by the name ``JOB`` gives."""


def _job() -> Job:
    return JOBS[os.environ["JOB"]]


def _names(job: Job) -> list[str]:
    """The state: each parameter, and Adam's two moments of it."""
    return [f"{kind}{p}" for p in job.layout for kind in ("param:", "exp_avg:", "exp_avg_sq:")]


def _layout(job: Job, name: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return job.layout[name.split(":", 1)[1]]


def _model(device_mesh: Any, job: Job) -> Any:
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    parallelize_module(model, device_mesh["tp"], {"0": ColwiseParallel(),
                                                  "2": RowwiseParallel()})
    dims = job.fsdp if len(job.fsdp) > 1 else job.fsdp[0]  # two dims: torch's HSDP
    fully_shard(model, mesh=device_mesh[dims])
    return model


def _data_index(device_mesh: Any, job: Job) -> int:
    """Which batch this rank trains on: its coordinate over the dims ``fully_shard`` gets,
    flattened (so a rank taking a coordinate computes what its owner would have)."""
    sizes = dict(zip(device_mesh.mesh_dim_names, device_mesh.shape, strict=True))
    index = 0
    for dim in job.fsdp:
        index = index * sizes[dim] + device_mesh.get_local_rank(dim)
    return index


def _optimizer(model: Any) -> Any:
    import torch

    return torch.optim.Adam(model.parameters(), lr=0.01, foreach=False)


def _step(model: Any, opt: Any, step: int, dp: int) -> None:
    import torch

    g = torch.Generator().manual_seed(1000 * step + dp)
    x = torch.randn(4, WIDTH, generator=g)
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


def _state(model: Any, opt: Any) -> dict[str, Any]:
    """The state as DTensors by name (parameters, Adam's moments)."""
    params = dict(model.named_parameters())
    out = {}
    for p, param in params.items():
        out[f"param:{p}"] = param
        for kind in ("exp_avg", "exp_avg_sq"):
            out[f"{kind}:{p}"] = opt.state[param][kind]
    return out


def _shardings(world: Any, job: Job) -> dict[str, Any]:
    """Every state tensor's sharding over the world view, from the job's layout (checked
    against torch's own on the ranks that hold the tensors)."""
    from backend import from_torch_placements
    from mesh import Sharding

    return {n: Sharding(world, from_torch_placements([_placement(c) for c in
                                                      _layout(job, n)[1]]),
                        _layout(job, n)[0]) for n in _names(job)}


def _victims() -> list[int]:
    return sorted(int(r) for r in os.environ["VICTIMS"].split(","))


def _expected(run: str, job: Job, victims: list[int]) -> dict[str, Any]:
    """The full tensors a recovery must give: the last completed step's values, with the
    elements only the victims held taken from the checkpoint's step."""
    import torch

    last = torch.load(os.path.join(run, f"full{KILL_STEP - 1}.pt"))
    saved = torch.load(os.path.join(run, f"full{CKPT_STEP}.pt"))
    held = [torch.load(os.path.join(run, f"held{r}.pt")) for r in range(math.prod(job.shape))]
    out = {}
    for n in _names(job):
        only = {int(i) for v in victims for i in held[v][n].reshape(-1).tolist()}
        for r, h in enumerate(held):
            if r not in victims:
                only -= {int(i) for i in h[n].reshape(-1).tolist()}
        value = last[n].clone().reshape(-1)
        if only:
            index = torch.tensor(sorted(only), dtype=torch.long)
            value[index] = saved[n].reshape(-1)[index]
        out[n] = value.reshape(last[n].shape)
    return out


def _load(model: Any, opt: Any, blocks: dict[str, Any], step: int) -> None:
    """Put each state tensor's local block into the model and a fresh Adam state."""
    import torch
    from torch.distributed.tensor import DTensor

    for p, param in model.named_parameters():
        with torch.no_grad():
            param.to_local().copy_(blocks[f"param:{p}"])
        opt.state[param] = {"step": torch.tensor(float(step))}
        for kind in ("exp_avg", "exp_avg_sq"):
            opt.state[param][kind] = DTensor.from_local(
                blocks[f"{kind}:{p}"].clone(), param.device_mesh, param.placements,
                shape=param.shape, stride=param.stride())


def _save_full(state: dict[str, Any], path: str, rank: int) -> None:
    import torch

    full = {n: t.full_tensor().detach().clone() for n, t in state.items()}  # collective
    if rank == 0:
        torch.save(full, path + ".tmp")
        os.replace(path + ".tmp", path)


def _die_together(out: str, rank: int, victims: list[int]) -> None:
    """The victims die at once, as a host does: each, at the start of :data:`KILL_STEP`
    (past every collective of the steps before), writes its pid; the lowest, once all have,
    SIGKILLs them all, itself last.  A victim never killed exits 4 (the test sees it)."""
    path = os.path.join(out, f"dying{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    deadline = time.monotonic() + START.total_seconds()
    if rank == victims[0]:
        pids = {}
        while len(pids) < len(victims) and time.monotonic() < deadline:
            pids = {v: int(Path(out, f"dying{v}").read_text()) for v in victims
                    if Path(out, f"dying{v}").exists()}
            time.sleep(0.01)
        for v in victims[1:]:
            os.kill(pids[v], signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    while time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(4)


def _train_until_killed(job: Any, spec: Job, out: str, rank: int) -> tuple[dict[str, Any],
                                                                          dict[str, Any]]:
    """Train on the job's mesh until the victims die; this rank's blocks of the state (as
    the last step left them) and what to report (the shardings' check, the failing step)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import distribute_tensor

    from backend import sharding_of

    job.materialize()
    model, dp = _model(job, spec), _data_index(job, spec)
    opt = _optimizer(model)
    _step(model, opt, 0, dp)  # Adam's moments exist from the first step on
    state = _state(model, opt)
    shardings = _shardings(job.view, spec)
    report: dict[str, Any] = {
        "shardings_match": all(sharding_of(t) == shardings[n] for n, t in state.items())}
    held = {n: distribute_tensor(torch.arange(float(t.numel())).reshape(t.shape),
                                 t.device_mesh, t.placements).to_local()
            for n, t in state.items()}
    torch.save(held, os.path.join(out, f"held{rank}.pt"))
    _save_full(state, os.path.join(out, "full0.pt"), rank)
    everyone = job._flatten("all")
    for step in range(1, KILL_STEP + 1):
        if step == KILL_STEP and rank in _victims():
            _die_together(out, rank, _victims())
        try:
            _step(model, opt, step, dp)
            _save_full(state, os.path.join(out, f"full{step}.pt"), rank)
            if step == CKPT_STEP:
                dcp.save(state, checkpoint_id=os.path.join(out, "ckpt"),
                         process_group=everyone.get_group())
        except Exception as e:  # FSDP2 and TP ran on every dim: all are out of step
            report.update(failed_at=step, error=f"{type(e).__name__}: {str(e)[:300]}")
            for dim in spec.names:
                job.backend.diagnose(e, job.get_group(dim))
            break
    return {n: t.to_local().detach().clone() for n, t in state.items()}, report


def _mismatched(model: Any, spec: Job, state: dict[str, Any], expected: dict[str, Any]
                ) -> list[str]:
    """The tensors whose recovered block differs from torch's ``distribute_tensor`` of the
    expected full tensor on the new mesh."""
    import torch
    from torch.distributed.tensor import distribute_tensor

    params = dict(model.named_parameters())
    out = []
    for n in _names(spec):
        p = params[n.split(":", 1)[1]]
        want = distribute_tensor(expected[n], p.device_mesh, p.placements).to_local()
        if not torch.equal(state[n], want):
            out.append(n)
    return out


def _go_on(new: Any, spec: Job, out: str, rank: int, state: dict[str, Any]) -> dict[str, Any]:
    """On the recovered mesh: check the recovered blocks and the new groups, train
    :data:`MORE` steps, and write the final parameters; what to report."""
    import torch.distributed as dist

    model = _model(new, spec)
    opt = _optimizer(model)
    report: dict[str, Any] = {
        "mismatched": _mismatched(model, spec, state, _expected(out, spec, _victims())),
        "mesh": new.mesh.tolist()}
    _load(model, opt, state, KILL_STEP)  # steps 0..KILL_STEP-1 were taken
    report["group_rank_is_coordinate"] = all(
        list(dist.get_process_group_ranks(new.get_group(d))) == list(new.view.group(rank, d))
        for d in spec.names)
    _train_more(model, opt, new, spec, out, rank)
    report["trained_on"] = True
    return report


def _train_more(model: Any, opt: Any, device_mesh: Any, spec: Job, out: str, rank: int
                ) -> None:
    """Train :data:`MORE` steps from :data:`KILL_STEP`; the mesh's lowest rank writes
    ``OUT/final.pt``."""
    import torch

    dp = _data_index(device_mesh, spec)
    for step in range(KILL_STEP, KILL_STEP + MORE):
        _step(model, opt, step, dp)
    final = {p: t.full_tensor().detach().clone() for p, t in model.named_parameters()}
    if rank == int(device_mesh.mesh.min()):
        torch.save(final, os.path.join(out, "final.pt"))


def _train(out: str) -> None:
    import torch
    import torch.distributed as dist

    from backend import GlooBackend, Recovered, apply_recovery, bind
    from mesh import MeshView, Topology, recover

    spec = _job()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, is_master=False,
                          timeout=START)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=START)
    world = MeshView.from_shape(spec.shape, spec.names)
    job = bind(world, GlooBackend(timeout=TIMEOUT))
    blocks: dict[str, Any] = {}
    report: dict[str, Any] = {"rank": rank, "failed_at": -1}
    if job.get_coordinate() is not None:
        blocks, trained = _train_until_killed(job, spec, out, rank)
        report.update(trained)
    store.wait([AGENT_FAILED], timedelta(seconds=120))
    lost = sorted(int(r) for r in store.get(AGENT_FAILED).decode().split(","))
    decided = recover(lambda w: {"world": w}, world, lost, state=_shardings(world, spec),
                      spares=range(world.ranks.size, size), topology=Topology(size, spec.host))
    way = decided.best
    report.update(lost=lost, way=way.label, predicted_s=way.seconds)
    t0 = time.monotonic()
    done: Recovered = apply_recovery(way, blocks, device_mesh=job,
                                     checkpoint=os.path.join(out, "ckpt"),
                                     dtypes=dict.fromkeys(_names(spec), torch.float32))
    report.update(measured_s=time.monotonic() - t0, storage=done.storage_elements,
                  steps=dict(done.seconds), goes_on=done.mesh is not None)
    if done.mesh is not None:
        report.update(_go_on(done.mesh, spec, out, rank, dict(done.state)))
    write_report(out, rank, report)


def _reference(out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor

    from backend import GlooBackend, bind
    from mesh import MeshView

    spec = _job()
    rank = int(os.environ["RANK"])
    start_together(out, rank, int(os.environ["WORLD_SIZE"]))
    backend = GlooBackend.from_env(timeout=START)
    shape = tuple(int(n) for n in os.environ["SHAPE"].split(","))
    job = bind(MeshView.from_shape(shape, spec.names), backend)
    expected = _expected(os.environ["FROM"], spec, _victims())
    model = _model(job, spec)
    opt = _optimizer(model)
    params = dict(model.named_parameters())
    blocks = {}
    for n in _names(spec):
        p = params[n.split(":", 1)[1]]
        blocks[n] = distribute_tensor(expected[n], p.device_mesh, p.placements).to_local()
    _load(model, opt, blocks, KILL_STEP)
    _train_more(model, opt, job, spec, out, rank)
    write_report(out, rank, {"rank": rank})
    dist.barrier()
    backend.shutdown()


def main() -> None:
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(240)
    torch.set_num_threads(1)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "train":
        _train(out)
    elif mode == "reference":
        _reference(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
