"""A worker of ``tests/test_recover_train_gloo.py``: torch's own TP (``parallelize_module``)
and FSDP2 (``fully_shard``) training on a facade mesh loses a rank to SIGKILL and goes on,
without a restart, through ``mesh.recover`` and ``backend.apply_recovery``.

Modes (``python recover_train_worker.py MODE OUT_DIR``):

- ``train`` (8 processes, by ``gloo_launch.launch_with_agent``): the plan is (dp=3, tp=2)
  over ranks 0..5 and ranks 6 and 7 are a spare host.  A 2-layer MLP, column- then
  row-parallel over tp and fully sharded over dp (so ``_StridedShard`` parameters), trains
  with Adam; its parameters and Adam's two moments are the state (12 tensors).  After step
  :data:`CKPT_STEP` the state is saved with DCP; after every step rank 0 writes the full
  tensors (``full_tensor()``, torch's all-gather) to ``OUT/full<step>.pt``, and at the start
  every rank writes which elements it holds (torch's local of an ``arange``) to
  ``OUT/held<rank>.pt``.  ``VICTIM`` kills itself at the start of :data:`KILL_STEP`: that
  step fails on every survivor.  Every process still up then decides (``mesh.recover``,
  the spare way) and acts (``apply_recovery``), checks each recovered block against torch's
  own ``distribute_tensor`` of the expected full tensor (the last completed step's values,
  the checkpoint's where only the victim held them), rebuilds the model on the new mesh
  from the recovered blocks and trains :data:`MORE` more steps; rank 0 writes the final
  full parameters to ``OUT/final.pt``.
- ``reference`` (6 processes, ``gloo_launch.launch``; ``FROM`` names the ``train`` run's
  folder): a job started on (dp=3, tp=2) from the same expected state, trained the same
  :data:`MORE` steps; rank 0 writes ``OUT/final.pt``.

Inputs depend on the step and the dp coordinate only, so the spare in the victim's
coordinate computes what the victim would have.  The worker asserts nothing; it reports.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

from gloo_launch import AGENT_FAILED, start_together, write_report
from reshard_gloo_worker import _torch_placement as _placement

TIMEOUT = timedelta(seconds=5)
START = timedelta(seconds=120)
WIDTH = 12
CKPT_STEP = 1
KILL_STEP = 4
MORE = 3
RANKS = [[0, 1], [2, 3], [4, 5]]
SPARES = [6, 7]
LAYOUT = {  # what TP (Colwise "0", Rowwise "2") then FSDP2 over dp give each parameter
    "0.weight": ((2 * WIDTH, WIDTH), ("SS0/2", "S0")),
    "0.bias": ((2 * WIDTH,), ("SS0/2", "S0")),
    "2.weight": ((WIDTH, 2 * WIDTH), ("S0", "S1")),
    "2.bias": ((WIDTH,), ("S0", "R")),
}


def _names() -> list[str]:
    """The state: each parameter, and Adam's two moments of it."""
    return [f"{kind}{p}" for p in LAYOUT for kind in ("param:", "exp_avg:", "exp_avg_sq:")]


def _layout(name: str) -> tuple[tuple[int, ...], tuple[str, str]]:
    return LAYOUT[name.split(":", 1)[1]]


def _model(device_mesh: Any) -> Any:
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
    fully_shard(model, mesh=device_mesh["dp"])
    return model


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


def _shardings(world: Any) -> dict[str, Any]:
    """Every state tensor's sharding over the world view, from :data:`LAYOUT` (checked
    against torch's own on the ranks that hold the tensors)."""
    from backend import from_torch_placements
    from mesh import Sharding

    return {n: Sharding(world, from_torch_placements([_placement(c) for c in _layout(n)[1]]),
                        _layout(n)[0]) for n in _names()}


def _expected(run: str, victim: int) -> dict[str, Any]:
    """The full tensors a recovery must give: the last completed step's values, with the
    elements only the victim held taken from the checkpoint's step."""
    import torch

    last = torch.load(os.path.join(run, f"full{KILL_STEP - 1}.pt"))
    saved = torch.load(os.path.join(run, f"full{CKPT_STEP}.pt"))
    held = [torch.load(os.path.join(run, f"held{r}.pt")) for r in range(6)]
    out = {}
    for n in _names():
        only = set(held[victim][n].reshape(-1).tolist())
        for r in range(6):
            if r != victim:
                only -= set(held[r][n].reshape(-1).tolist())
        value = last[n].clone().reshape(-1)
        if only:
            index = torch.tensor(sorted(int(i) for i in only), dtype=torch.long)
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


def _train(out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import distribute_tensor

    from backend import GlooBackend, Recovered, apply_recovery, bind, sharding_of
    from mesh import MeshView, recover

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    victim = int(os.environ["VICTIM"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, is_master=False,
                          timeout=START)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=START)
    backend = GlooBackend(timeout=TIMEOUT)
    world = MeshView.from_ranks(RANKS, ("dp", "tp"))
    job = bind(world, backend)
    shardings = _shardings(world)
    report: dict[str, Any] = {"rank": rank}
    blocks: dict[str, Any] = {}
    failed_at = -1
    ckpt = os.path.join(out, "ckpt")
    if job.get_coordinate() is not None:
        job.materialize()
        model, dp = _model(job), job.get_local_rank("dp")
        opt = _optimizer(model)
        _step(model, opt, 0, dp)  # Adam's moments exist from the first step on
        state = _state(model, opt)
        report["shardings_match"] = all(sharding_of(t) == shardings[n] for n, t in state.items())
        held = {n: distribute_tensor(torch.arange(float(t.numel())).reshape(t.shape),
                                     t.device_mesh, t.placements).to_local()
                for n, t in state.items()}
        torch.save(held, os.path.join(out, f"held{rank}.pt"))
        _save_full(state, os.path.join(out, "full0.pt"), rank)
        everyone = job._flatten("all")
        for step in range(1, KILL_STEP + 1):
            if step == KILL_STEP and rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                _step(model, opt, step, dp)
                _save_full(state, os.path.join(out, f"full{step}.pt"), rank)
                if step == CKPT_STEP:
                    dcp.save(state, checkpoint_id=ckpt, process_group=everyone.get_group())
            except Exception as e:  # FSDP2 and TP ran on dp and tp: both are out of step
                failed_at = step
                for dim in ("dp", "tp"):
                    backend.diagnose(e, job.get_group(dim))
                break
        blocks = {n: t.to_local().detach().clone() for n, t in state.items()}
    store.wait([AGENT_FAILED], timedelta(seconds=120))
    lost = sorted(int(r) for r in store.get(AGENT_FAILED).decode().split(","))
    report.update(lost=lost, failed_at=failed_at)
    decided = recover(lambda w: {"world": w}, world, lost, state=shardings, spares=SPARES)
    way = next(w for w in decided.ways if w.kind == "spare")
    report.update(way=way.label, predicted_s=way.seconds,
                  ways=[w.kind.value for w in decided.ways])
    t0 = time.monotonic()
    done: Recovered = apply_recovery(way, blocks, device_mesh=job, checkpoint=ckpt,
                                     dtypes=dict.fromkeys(_names(), torch.float32))
    report.update(measured_s=time.monotonic() - t0, storage=done.storage_elements,
                  steps=dict(done.seconds))
    if done.mesh is None:
        write_report(out, rank, report)
        return
    new = done.mesh
    expected = _expected(out, victim)
    model = _model(new)
    opt = _optimizer(model)
    params = dict(model.named_parameters())
    mismatched = []
    for n in _names():
        p = params[n.split(":", 1)[1]]
        want = distribute_tensor(expected[n], p.device_mesh, p.placements).to_local()
        if not torch.equal(done.state[n], want):
            mismatched.append(n)
    report["mismatched"] = mismatched
    _load(model, opt, done.state, KILL_STEP)  # steps 0..KILL_STEP-1 were taken
    groups = {d: (list(dist.get_process_group_ranks(new.get_group(d))),
                  list(new.view.group(rank, d))) for d in ("dp", "tp")}
    report["group_rank_is_coordinate"] = all(a == b for a, b in groups.values())
    dp = new.get_local_rank("dp")
    for step in range(KILL_STEP, KILL_STEP + MORE):
        _step(model, opt, step, dp)
    final = {p: t.full_tensor().detach().clone() for p, t in model.named_parameters()}
    if rank == 0:
        torch.save(final, os.path.join(out, "final.pt"))
    report["trained_on"] = True
    write_report(out, rank, report)


def _reference(out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor

    from backend import GlooBackend, bind
    from mesh import MeshView

    rank = int(os.environ["RANK"])
    start_together(out, rank, int(os.environ["WORLD_SIZE"]))
    backend = GlooBackend.from_env(timeout=START)
    job = bind(MeshView.from_ranks(RANKS, ("dp", "tp")), backend)
    expected = _expected(os.environ["FROM"], int(os.environ["VICTIM"]))
    model = _model(job)
    opt = _optimizer(model)
    params = dict(model.named_parameters())
    blocks = {}
    for n in _names():
        p = params[n.split(":", 1)[1]]
        blocks[n] = distribute_tensor(expected[n], p.device_mesh, p.placements).to_local()
    _load(model, opt, blocks, KILL_STEP)
    dp = job.get_local_rank("dp")
    for step in range(KILL_STEP, KILL_STEP + MORE):
        _step(model, opt, step, dp)
    final = {p: t.full_tensor().detach().clone() for p, t in model.named_parameters()}
    if rank == 0:
        torch.save(final, os.path.join(out, "final.pt"))
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
