"""One process of a 4-rank Gloo world for ``tests/test_torch_interop_gloo.py``.

Run as ``python tests/interop_gloo_worker.py train OUT_DIR`` with torchrun's environment.
The mesh is (dp, tp) = (2, 2) from ``backend.init_device_mesh``; its two slices are
converted to torch *separately* (``mesh["tp"].to_torch()``, ``mesh["dp"].to_torch()``),
then a small MLP gets tensor parallelism on the tp slice and FSDP2 on the dp slice
(which makes FSDP2 ``_concatenate`` the two torch meshes), and trains 4 SGD steps on
one batch that the dp ranks split.  Every rank also trains the same model in one process
on the whole batch (the reference) and reports the largest difference between the
parameters (``full_tensor()``) and the reference's, plus what ``with mesh:`` and
torch's ``_concatenate`` of the two converted slices gave.  The worker asserts nothing.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from gloo_launch import write_report

STEPS, BATCH, WIDTH = 4, 8, 16


def _train(out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from backend import GlooBackend, init_device_mesh

    backend = GlooBackend.from_env(timeout=timedelta(seconds=30))
    rank = backend.rank
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    tp, dp = mesh["tp"].to_torch(), mesh["dp"].to_torch()  # converted separately
    result: dict[str, Any] = {"rank": rank}

    concatenated = TorchDeviceMesh._concatenate([dp, tp])
    result["concat_mesh"] = concatenated.mesh.tolist()
    result["same_root"] = dp._get_root_mesh() is tp._get_root_mesh()
    result["converted_twice_is_same"] = mesh["tp"].to_torch() is tp

    with mesh["tp"]:  # DTensor finds the current mesh: no mesh argument
        dt = distribute_tensor(torch.arange(8.0).reshape(4, 2), placements=[Shard(0)])
        result["with_mesh_local"] = dt.to_local().tolist()
        result["with_mesh_mesh"] = dt.device_mesh.mesh.tolist()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    reference = copy.deepcopy(model)
    parallelize_module(model, tp, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=dp)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    dp_rank, half = mesh.get_local_rank("dp"), BATCH // 2
    losses = []
    x = torch.randn(BATCH, WIDTH, generator=data)
    y = torch.randn(BATCH, WIDTH, generator=data)
    for _ in range(STEPS):  # the same batch each step: the loss must go down
        mine = slice(dp_rank * half, (dp_rank + 1) * half)
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        losses.append(float(ref_loss.item()))
    diffs = {}
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        full = p.full_tensor() if isinstance(p, DTensor) else p
        diffs[name] = float((full.detach() - q.detach()).abs().max().item())
        result.setdefault("meshes", {})[name] = (
            p.device_mesh.mesh_dim_names if isinstance(p, DTensor) else None)
    result["max_diff"] = diffs
    result["ref_losses"] = losses
    result["groups_created"] = len(backend.created)
    dist.barrier()
    backend.shutdown()
    write_report(out_dir, rank, result)


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "train":
        _train(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
