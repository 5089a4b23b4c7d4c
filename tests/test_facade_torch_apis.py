"""Torch's own parallel APIs take the facade mesh as it is (TorchFakeBackend, one process):
the facade mesh is torch's ``DeviceMesh`` too, and what torch reads from it is right."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from backend import DeviceMesh, FakeBackend, TorchFakeBackend, init_device_mesh


@pytest.fixture
def mesh() -> Iterator[Any]:
    backend = TorchFakeBackend(world_size=8, rank=3)
    yield init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    backend.shutdown()


def test_a_facade_mesh_is_torchs_device_mesh_and_reads_as_torchs(mesh: Any) -> None:
    theirs = torch_init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    assert isinstance(mesh, DeviceMesh) and isinstance(mesh, TorchDeviceMesh)
    for dim in ("dp", "tp"):
        ours, torchs = mesh[dim], theirs[dim]
        assert ours._layout == torchs._layout and ours._is_current_rank_part_of_mesh()
        assert ours._get_root_mesh() is not ours  # the universe's shared torch root
        assert ours.mesh.tolist() == torchs.mesh.tolist()
        assert [dist.get_process_group_ranks(dist.distributed_c10d._resolve_process_group(n))
                for n in ours._dim_group_names] == \
            [dist.get_process_group_ranks(torchs.get_group())]
    assert mesh == mesh.to_torch() and hash(mesh) == hash(mesh.to_torch())


def test_tp_with_sequence_parallel_loss_parallel_funcol_and_redistribute(mesh: Any) -> None:
    tp = mesh["tp"]
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    parallelize_module(model, tp, {"0": SequenceParallel(), "1": ColwiseParallel(),
                                   "3": RowwiseParallel(output_layouts=Shard(1))})
    assert model[1].weight.device_mesh is tp and model[1].weight.placements == (Shard(0),)
    out = funcol.wait_tensor(model(torch.randn(2, 4, 8)))  # no collective left in flight
    assert out.shape == (2, 4, 8)
    logits = distribute_tensor(torch.randn(4, 16, requires_grad=True), tp, [Shard(1)])
    with loss_parallel():
        nn.functional.cross_entropy(logits, torch.zeros(4, dtype=torch.long)).backward()
    assert funcol.wait_tensor(funcol.all_reduce(torch.ones(2), "sum", (mesh, 1))).shape == (2,)
    local = DTensor.from_local(torch.ones(2, 2), tp, [Shard(0)])
    assert local.redistribute(tp, [Replicate()]).to_local().shape == (8, 2)


def test_fsdp2_over_tp_takes_the_facade_slices(mesh: Any) -> None:
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    assert model[0].weight.device_mesh.mesh_dim_names == ("dp", "tp")
    model(torch.randn(2, 4)).sum().backward()


def test_a_fake_backend_mesh_stays_torch_free() -> None:
    fb = FakeBackend(8, 3)
    plain = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
    assert type(plain) is DeviceMesh and not isinstance(plain, TorchDeviceMesh)
