"""One process of a 4-rank Gloo world for ``tests/test_production_import.py``: three
production scripts in which only the ``init_device_mesh`` import differs.

Run as ``python tests/production_worker.py torch|ours OUT_DIR`` with torchrun's
environment.  Each rank writes what the scripts computed (floats as ``float.hex``) and the
warnings torch logged; the worker asserts nothing.

1. **FSDP1 + TP** (torch's 2-D recipe): ``parallelize_module`` on ``mesh["tp"]``, then
   ``FullyShardedDataParallel(device_mesh=mesh["dp"])``; 3 steps (losses, gradient norms),
   then the sharded and the full state dict and ``get_model_state_dict``.
2. **Flattened dims and every redistribute**: a (dp, cp, tp) = (2, 2, 1) mesh,
   ``mesh["dp", "cp"]._flatten("dp_cp")``; a DTensor on ``mesh["dp", "cp"]`` is
   redistributed between Shard, Replicate and Partial, every pair, and reduced.
3. **Compiled blocks**: TP on ``mesh["tp"]`` + FSDP2 on ``mesh["dp"]``, each block
   ``torch.compile``\\ d (``aot_eager``, fullgraph) as torchtitan does, 3 steps; and the same
   model eager.  Where dynamo refuses a fullgraph block because FSDP2's hooks run inside it
   (torch 2.14: ``torch._dynamo.disable()`` called inside a compiled region), the worker
   records the refusal and trains the blocks compiled without fullgraph instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from gloo_launch import write_report

STEPS, BATCH, WIDTH = 3, 8, 16


class _Warnings(logging.Handler):
    """Every warning torch's loggers emit while a script runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"{record.name}: {record.getMessage()}")


def _hex(t: Any) -> list[str]:
    return [v.hex() for v in t.detach().flatten().tolist()]


def _local(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _full(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _model(seed: int = 0) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))


def _data(dp: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, WIDTH, generator=gen)
    half = BATCH // 2
    return x[dp * half:(dp + 1) * half], y[dp * half:(dp + 1) * half]


def fsdp1_tp(init_device_mesh: Any) -> dict[str, Any]:
    import torch
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = _model()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=True, device_id="cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data(mesh.get_local_rank("dp"))
    losses, norms = [], []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        norms.append(float(model.clip_grad_norm_(1e9)).hex())
        opt.step()
        opt.zero_grad()
        losses.append(loss.item().hex())
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        sharded = {k: _hex(_local(v)) for k, v in model.state_dict().items()}
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                              FullStateDictConfig(rank0_only=False)):
        full = {k: _hex(_full(v)) for k, v in model.state_dict().items()}
    got = {k: _hex(_local(v)) for k, v in get_model_state_dict(model).items()}
    return {"losses": losses, "norms": norms, "sharded": sharded, "full": full,
            "get_model_state_dict": got,
            "root_ndim": mesh["dp"]._get_root_mesh().ndim,
            "root_dim": mesh["dp"]._get_root_mesh_dim()}


def flattened_redistribute(init_device_mesh: Any) -> dict[str, Any]:
    import torch
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    mesh = init_device_mesh("cpu", (2, 2, 1), mesh_dim_names=("dp", "cp", "tp"))
    flat = mesh["dp", "cp"]._flatten("dp_cp")
    sub = mesh["dp", "cp"]
    rank = torch.distributed.get_rank()
    local = torch.arange(8, dtype=torch.float32).reshape(4, 2) / 7 + rank / 3
    kinds = {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial()}
    out: dict[str, Any] = {"flatten_mapping": sorted(mesh._flatten_mapping),
                           "flat_is_listed": mesh._flatten_mapping.get("dp_cp") is flat}
    for a in kinds:
        for b in kinds:
            for c in kinds:
                src = DTensor.from_local(local, sub, [kinds[a], kinds[a]], run_check=False)
                try:
                    got = _hex(src.redistribute(sub, [kinds[b], kinds[c]]).to_local())
                except Exception as e:  # the same refusal is expected of both imports
                    got = [type(e).__name__]
                out[f"{a}{a}->{b}{c}"] = got
    out["full"] = _hex(DTensor.from_local(local, sub, [Partial(), Partial()])
                       .redistribute(sub, [Replicate(), Replicate()]).to_local())
    return out


def _train_blocks(mesh: Any, x: Any, y: Any, compile_blocks: bool, fullgraph: bool
                  ) -> dict[str, Any]:
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch._dynamo.reset()
    blocks = torch.nn.Sequential(_model(0), torch.nn.ReLU(), _model(1))
    for name in ("0", "2"):
        parallelize_module(blocks.get_submodule(name), mesh["tp"],
                           {"0": ColwiseParallel(), "2": RowwiseParallel()})
        if compile_blocks:
            blocks.get_submodule(name).compile(backend="aot_eager", fullgraph=fullgraph)
        fully_shard(blocks.get_submodule(name), mesh=mesh["dp"])
    fully_shard(blocks, mesh=mesh["dp"])
    opt = torch.optim.SGD(blocks.parameters(), lr=0.05)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(blocks(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item().hex())
    return {"losses": losses,
            "params": {k: _hex(p.full_tensor()) for k, p in blocks.named_parameters()}}


def compiled_blocks(init_device_mesh: Any) -> dict[str, Any]:
    from torch._dynamo.exc import Unsupported

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    x, y = _data(mesh.get_local_rank("dp"))
    runs: dict[str, Any] = {"eager": _train_blocks(mesh, x, y, False, False),
                            "fullgraph_refused": None}
    try:
        runs["compiled"] = _train_blocks(mesh, x, y, True, fullgraph=True)
    except Unsupported as e:  # raised on every rank before the hooks' first collective
        runs["fullgraph_refused"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        runs["compiled"] = _train_blocks(mesh, x, y, True, fullgraph=False)
    from torch._dynamo.utils import counters

    runs["graphs"] = counters["stats"]["unique_graphs"]
    return runs


def main(which: str, out_dir: str) -> None:
    import torch.distributed as dist

    if which == "torch":
        from torch.distributed.device_mesh import init_device_mesh
    else:
        from backend import init_device_mesh  # type: ignore[assignment]

    warned = _Warnings()
    logging.getLogger("torch").addHandler(warned)
    result: dict[str, Any] = {"rank": int(__import__("os").environ["RANK"])}
    for script in (fsdp1_tp, flattened_redistribute, compiled_blocks):
        result[script.__name__] = script(init_device_mesh)
    result["warnings"] = warned.seen
    dist.barrier()
    write_report(out_dir, dist.get_rank(), result)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
