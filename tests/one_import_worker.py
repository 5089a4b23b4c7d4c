"""One process of a 4-rank Gloo world for ``tests/test_one_import.py``: a torchtitan-style
2-D training script in which only the ``init_device_mesh`` import differs.

Run as ``python tests/one_import_worker.py torch|ours OUT_DIR`` with torchrun's
environment.  The script: a (dp, tp) = (2, 2) mesh with no backend named; tensor
parallelism on ``mesh["tp"]`` (``parallelize_module``), FSDP2 on ``mesh["dp"]``
(``fully_shard``), 3 SGD steps, then a DCP save, a perturbation of the weights and a DCP
load.  Each rank writes its losses and its full parameters (as ``float.hex``), before the
checkpoint and after loading it back.  The worker asserts nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from gloo_launch import write_report

STEPS, BATCH, WIDTH = 3, 8, 16


def main(which: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    if which == "torch":
        from torch.distributed.device_mesh import init_device_mesh
    else:
        from backend import init_device_mesh  # type: ignore[assignment]

    # ---- the user's script: identical for both ------------------------------------------
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, WIDTH, generator=data), torch.randn(BATCH, WIDTH, generator=data)
    half, dp = BATCH // 2, mesh.get_local_rank("dp")
    losses = []
    for _ in range(STEPS):
        loss = nn.functional.mse_loss(model(x[dp * half:(dp + 1) * half]),
                                      y[dp * half:(dp + 1) * half])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item().hex())
    trained = _params(model)
    dcp.save({"model": model.state_dict()}, checkpoint_id=f"{out_dir}/ckpt")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=f"{out_dir}/ckpt")
    model.load_state_dict(state["model"])
    # ---- end of the user's script ---------------------------------------------------------
    result: dict[str, Any] = {"rank": dist.get_rank(), "losses": losses, "trained": trained,
                              "loaded": _params(model), "mesh_type": type(mesh).__module__}
    dist.barrier()
    write_report(out_dir, dist.get_rank(), result)
    dist.destroy_process_group()


def _params(model: Any) -> dict[str, list[str]]:
    return {name: [v.hex() for v in p.full_tensor().detach().flatten().tolist()]
            for name, p in model.named_parameters()}


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
