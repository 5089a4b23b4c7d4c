"""What torch 2.15 changed under the facade, on every supported torch (one process,
``TorchFakeBackend``: torch's fake process groups):

- ``DeviceMesh(..., preserve_rank_order=)`` (pytorch#193224) is part of torch 2.15's hash,
  equality and compile guards, so the facade mesh defines ``_preserve_rank_order``.  Its
  groups always keep the mesh's order, so the value says whether that differs from torch's
  default (sorted) groups: False where every group is ascending (then the mesh equals torch's
  default mesh), True where one is not (then it equals torch's ``preserve_rank_order=True``
  mesh, and not the default one, whose groups differ).  Checked eager, compiled and under
  FSDP2, and ``to_torch()`` carries the same value.
- ``DeviceMesh.abort()`` (new in 2.15) is the facade's own on every release: it ends the
  groups that exist, creates none, and ``shutdown()`` after it ends nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from backend import BackendConfigError, DeviceMesh, TorchFakeBackend, init_device_mesh

TORCH_215 = "preserve_rank_order" in TorchDeviceMesh.__init__.__code__.co_varnames
PERMUTED = [[0, 2], [1, 3]]  # the dp groups (0, 1) and (2, 3) ascend; tp's (0, 2), (1, 3) too
SWAPPED = [[0, 1], [3, 2]]  # the second tp group (3, 2) does not ascend


@pytest.fixture
def world() -> Iterator[TorchFakeBackend]:
    backend = TorchFakeBackend(world_size=4, rank=3)
    torch._dynamo.reset()
    yield backend
    torch._dynamo.reset()
    backend.shutdown()


def _group_ranks(mesh: Any, dim: str) -> list[int]:
    return list(dist.get_process_group_ranks(mesh.get_group(dim)))


def test_a_mesh_whose_groups_ascend_says_false_and_equals_torchs_default_mesh(
        world: TorchFakeBackend) -> None:
    ours = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    theirs = torch_init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert ours._preserve_rank_order is False
    assert ours["tp"]._preserve_rank_order is False
    assert ours == theirs and theirs == ours and hash(ours) == hash(theirs)
    assert ours["tp"] == theirs["tp"]


def test_a_mesh_with_an_unsorted_group_says_true_and_keeps_that_order(
        world: TorchFakeBackend) -> None:
    ours = DeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))
    assert ours._preserve_rank_order is True
    assert _group_ranks(ours, "tp") == [3, 2]  # coordinate order: group rank = coordinate
    assert ours.get_local_rank("tp") == 0
    if TORCH_215:
        kept = TorchDeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"),
                               preserve_rank_order=True)
        sorted_ = TorchDeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))
        assert _group_ranks(kept, "tp") == [3, 2] and _group_ranks(sorted_, "tp") == [2, 3]
        assert ours == kept and hash(ours) == hash(kept)
        assert ours != sorted_ and sorted_ != ours  # torch's default made other groups


def test_a_permuted_rank_map_whose_groups_ascend_says_false(world: TorchFakeBackend) -> None:
    ours = DeviceMesh("cpu", PERMUTED, mesh_dim_names=("dp", "tp"))
    assert ours._preserve_rank_order is False
    theirs = TorchDeviceMesh("cpu", PERMUTED, mesh_dim_names=("dp", "tp"))
    assert ours == theirs and _group_ranks(ours, "tp") == _group_ranks(theirs, "tp") == [1, 3]


@pytest.mark.parametrize("shape", [SWAPPED, PERMUTED])
def test_to_torch_carries_the_same_value_and_stays_equal(world: TorchFakeBackend,
                                                       shape: list[list[int]]) -> None:
    ours = DeviceMesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    converted = ours.to_torch()
    if TORCH_215:
        assert converted._preserve_rank_order is ours._preserve_rank_order
    assert converted == ours and ours == converted and hash(converted) == hash(ours)
    for dim in ("dp", "tp"):
        assert ours[dim].to_torch() == ours[dim]


def test_a_compiled_step_over_an_unsorted_mesh_runs_and_guards_on_the_flag(
        world: TorchFakeBackend) -> None:
    """A compiled DTensor step over the mesh (torch 2.15 guards ``_preserve_rank_order``):
    it runs in one graph, gives the eager result, and the same mesh does not recompile."""
    mesh = DeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))

    def step(x: torch.Tensor, m: Any) -> torch.Tensor:
        d = DTensor.from_local(x, m, [Shard(0), Shard(0)])
        return d.redistribute(m, [Replicate(), Replicate()]).to_local() * m.size(1)

    x = torch.ones(4)
    explained = torch._dynamo.explain(step)(x, mesh)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x, mesh), step(x, mesh))
    assert torch.equal(compiled(x, mesh), step(x, mesh))


def test_fsdp2_over_an_unsorted_mesh_keeps_the_facade_mesh(world: TorchFakeBackend) -> None:
    from torch.distributed.fsdp import fully_shard

    mesh = DeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    fully_shard(model, mesh=mesh["tp"])
    assert model[0].weight.device_mesh == mesh["tp"]
    model(torch.randn(2, 4)).sum().backward()
    assert model[0].weight.grad is not None


def test_abort_on_a_lazy_mesh_creates_no_group(world: TorchFakeBackend) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    mesh.abort()
    assert world.created == ()
    world.shutdown()  # nothing to end twice


def test_abort_ends_the_created_groups_and_the_flattened_ones_then_shutdown_is_clean(
        world: TorchFakeBackend) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp = mesh.get_group("tp")
    flat = mesh["dp", "tp"]._flatten("dp_tp")
    flat.get_group()
    assert [r.dim for r in world.created] == ["tp", "dp_tp"]
    mesh.abort()
    assert world.created == ()
    assert "_dim_group_names" not in vars(mesh)  # torch's reads forget the ended groups
    again = mesh.get_group("tp")  # a later request creates a fresh group
    assert again is not tp and len(world.created) == 1
    world.shutdown()


def test_abort_on_a_submesh_is_refused_naming_the_root(world: TorchFakeBackend) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    with pytest.raises(BackendConfigError, match="root mesh"):
        mesh["tp"].abort()


def test_a_class_check_after_the_import_switch_is_torchs_class_as_documented(
        world: TorchFakeBackend) -> None:
    """docs/backends.md: a mesh torch built is not a ``backend.DeviceMesh``; checking torch's
    class accepts both, and ``from_group`` adopts torch's mesh as a facade mesh."""
    theirs = torch_init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    ours = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert not isinstance(theirs, DeviceMesh)
    assert isinstance(ours, TorchDeviceMesh) and isinstance(theirs, TorchDeviceMesh)
    adopted = DeviceMesh.from_group(theirs.get_group("tp"), "cpu", mesh_dim_names=("tp",))
    assert isinstance(adopted, DeviceMesh) and adopted.get_group() is theirs.get_group("tp")
    assert adopted.mesh.tolist() == theirs["tp"].mesh.tolist() == [2, 3]


def test_a_slice_carries_the_roots_flag_as_torchs_slicing_does(world: TorchFakeBackend) -> None:
    """torch 2.15 propagates the root's ``preserve_rank_order`` to every slice: a facade slice
    equals torch's slice of the converted root, and a DTensor on one adds to one on the other."""
    from torch.distributed.tensor import distribute_tensor

    ours = DeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))
    converted = ours.to_torch()
    for dim in ("dp", "tp"):
        assert ours[dim] == converted[dim] and ours[dim].to_torch() == converted[dim]
        if TORCH_215:
            assert ours[dim]._preserve_rank_order is converted[dim]._preserve_rank_order is True
    a = distribute_tensor(torch.ones(4), ours["dp"], [Replicate()])
    b = distribute_tensor(torch.ones(4), converted["dp"], [Replicate()])
    assert torch.equal((a + b).to_local(), torch.full((4,), 2.0))


def test_abort_after_a_rebind_ends_the_kept_groups_and_the_next_request_is_fresh() -> None:
    from backend import FakeBackend
    from mesh import drop

    fb = FakeBackend(4, 0)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=fb)
    tp = mesh.get_group("tp")
    after = mesh.rebind(drop(mesh.view, [3], "dp"))
    assert after.get_group("tp") is tp and len(fb.created) == 1  # kept by the rebind
    after.abort()
    assert fb.created == ()
    fresh = after.get_group("tp")
    assert fresh is not tp and fresh.ranks == (0, 1)


def test_dcp_saves_and_loads_a_dtensor_on_an_unsorted_mesh(world: TorchFakeBackend,
                                                          tmp_path: Any) -> None:
    """DCP over a facade mesh whose group keeps an unsorted order (one process: this rank's
    shard, ``no_dist``): the block saved is the block loaded, at its offsets."""
    import warnings

    import torch.distributed.checkpoint as dcp

    mesh = DeviceMesh("cpu", SWAPPED, mesh_dim_names=("dp", "tp"))
    block = torch.arange(4.0).reshape(2, 2) + 10 * world.rank
    saved = DTensor.from_local(block, mesh, [Shard(0), Shard(1)], shape=torch.Size((4, 4)),
                               stride=(4, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"t": saved}, checkpoint_id=tmp_path, no_dist=True)
        loaded = DTensor.from_local(torch.zeros(2, 2), mesh, [Shard(0), Shard(1)],
                                    shape=torch.Size((4, 4)), stride=(4, 1))
        dcp.load({"t": loaded}, checkpoint_id=tmp_path, no_dist=True)
    assert torch.equal(loaded.to_local(), block)
