"""One process of a Gloo world on loopback, for the class (b) cases of
``tests/test_torch_device_mesh_port.py`` (torch's ``test_device_mesh.py``, ported).

Run as ``python tests/torch_port_gloo_worker.py check OUT_DIR`` with torchrun's environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); the launcher is
``gloo_launch.launch``.  Every case of :data:`CASES` for this world size (``case_x``
ports torch's ``test_x``) runs in order on every rank (the SPMD contract), written as torch's
test body is, after changing one import (``from backend import DeviceMesh,
init_device_mesh``).  A case that raises is recorded, and the next case runs.  The worker
writes ``OUT_DIR/rank<r>.json``: ``{"cases": {name: "ok" or the error}}``, after every case;
``case <name>`` lines in its log show where a stuck rank was.

World 4: ``test_init_process_group`` (the ``DeviceMesh`` constructor initializes the default
group from the environment; it runs first, before anything else initializes it) and
``test_device_mesh_reuse_default_group``.  World 8: the default group is initialized as
torch's ``with_comms`` does (Gloo), then the backend-override case and the eight collective
cases of ``DeviceMeshCollectiveTest``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.distributed_c10d import (
    _get_default_group,
    get_global_rank,
    get_world_size,
)
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._collective_utils import mesh_broadcast, mesh_scatter, unpad_tensor
from torch.distributed.tensor.placement_types import Shard, _Partial
from torch.testing._internal.distributed.fake_pg import FakeProcessGroup

from backend import DeviceMesh, init_device_mesh

DT = "cpu"
#: The default group's timeout (as ``with_comms`` sets one); the launcher kills at its bound.
TIMEOUT = timedelta(seconds=30)

Case = Callable[[int, int], None]


# ---- world 4 ------------------------------------------------------------------------------

def case_init_process_group(rank: int, world: int) -> None:
    """DeviceMeshTest: the constructor initializes the default group from the environment."""
    assert not dist.is_initialized()
    DeviceMesh(DT, torch.arange(4).reshape(2, 2))
    assert dist.is_initialized()


def case_device_mesh_reuse_default_group(rank: int, world: int) -> None:
    """DeviceMeshTestGlooBackend: a 1-D whole-world mesh reuses the default group."""
    mesh = init_device_mesh(DT, (world,))
    mesh_group = mesh.get_group()
    default_group = _get_default_group()
    if torch.cuda.is_available():
        assert mesh_group != default_group
        assert get_world_size(mesh_group) == get_world_size(default_group)
    else:
        assert mesh_group == default_group


# ---- world 8: InitDeviceMeshTest ----------------------------------------------------------

def case_backend_override_argument_dict_with_idx_and_backend_lazy(rank: int, world: int) -> None:
    """Fake-backend overrides beside the real default backend; flatten takes only its own."""
    opts = FakeProcessGroup.Options()
    opts.fake_option = 42
    mesh = init_device_mesh(DT, (2, 2, 2), mesh_dim_names=("dp", "tp", "cp"),
                            backend_override={0: "fake", 2: ("fake", opts)})

    def get_opts(m: Any, dim_idx: int) -> Any:
        return m.get_group(dim_idx)._get_backend(torch.device(f"{DT}:{rank}")).options

    assert mesh.get_group(0)._get_backend_name() == "custom"  # the fake backend's type
    assert mesh.get_group(1)._get_backend_name() != "custom"
    assert mesh.get_group(2)._get_backend_name() == "custom"
    assert get_opts(mesh, 0) is None
    assert get_opts(mesh, 2).fake_option == 42

    dp_tp_mesh = mesh["dp", "tp"]._flatten()  # dims with different overrides: default
    dp_cp_mesh = mesh["dp", "cp"]._flatten(backend_override="fake")
    tp_cp_mesh = mesh["tp", "cp"]._flatten(backend_override=("fake", opts))
    assert dp_tp_mesh.get_group(0)._get_backend_name() != "custom"
    assert dp_cp_mesh.get_group(0)._get_backend_name() == "custom"
    assert tp_cp_mesh.get_group(0)._get_backend_name() == "custom"
    assert get_opts(dp_cp_mesh, 0) is None
    assert get_opts(tp_cp_mesh, 0).fake_option == 42


# ---- world 8: DeviceMeshCollectiveTest ----------------------------------------------------

def case_broadcast_1d(rank: int, world: int) -> None:
    mesh = DeviceMesh(DT, torch.arange(world))
    local_tensor = torch.ones(3, 3) * rank
    mesh_broadcast(local_tensor, mesh, mesh_dim=0)
    assert torch.equal(local_tensor, torch.zeros(3, 3))


def case_scatter_1d(rank: int, world: int) -> None:
    mesh = DeviceMesh(DT, torch.arange(world))
    shape = [3, 3, 3]
    for scatter_dim in range(len(shape)):
        shape[scatter_dim] *= world
        torch.manual_seed(0)  # the same tensor on every rank
        global_tensor = torch.randn(shape)
        pieces, _ = Shard(scatter_dim)._split_tensor(global_tensor, mesh.size(),
                                                     with_padding=True, contiguous=True)
        received = torch.empty_like(pieces[mesh.get_rank()])
        mesh_scatter(received, pieces, mesh, mesh_dim=0)  # dim > 0: non-contiguous pieces
        assert torch.equal(received, pieces[mesh.get_rank()])


def _chunks(t: torch.Tensor, world: int, dim: int) -> list[torch.Tensor]:
    """``torch.chunk`` into ``world`` pieces, padded with empty tensors to ``world``."""
    out = list(torch.chunk(t, world, dim=dim))
    return out + [torch.tensor([])] * (world - len(out))


def _check_piece(got: torch.Tensor, expected: torch.Tensor, value: torch.Tensor | None = None
                 ) -> None:
    if got.numel() == 0:  # an empty piece may keep the other dims' sizes after unpadding
        assert got.numel() == expected.numel()
        return
    assert got.size() == expected.size()
    torch.testing.assert_close(got, expected if value is None else value)


def case_scatter_uneven(rank: int, world: int) -> None:
    device_mesh = DeviceMesh(DT, list(range(world)))
    my_rank = device_mesh.get_rank()
    torch.manual_seed(0)
    tensor_to_split = torch.randn(device_mesh.size() + 3, device_mesh.size() + 1)
    for shard_dim in range(tensor_to_split.ndim):
        expected = _chunks(tensor_to_split, world, shard_dim)
        padded, pad_sizes = Shard(shard_dim)._split_tensor(
            tensor_to_split.clone(), device_mesh.size(), with_padding=True, contiguous=True)
        scattered = torch.empty_like(padded[my_rank])
        mesh_scatter(scattered, padded, device_mesh, mesh_dim=0)
        if pad_sizes[my_rank] != 0:
            scattered = unpad_tensor(scattered, shard_dim, pad_sizes[my_rank])
        _check_piece(scattered, expected[my_rank])


def case_all_gather_uneven(rank: int, world: int) -> None:
    device_mesh = DeviceMesh(DT, list(range(world)))
    my_rank = device_mesh.get_rank()
    tensor_to_split = torch.ones(device_mesh.size() + 3, device_mesh.size() + 1)
    for shard_dim in range(tensor_to_split.ndim):
        padded, pad_sizes = Shard(shard_dim)._split_tensor(
            tensor_to_split, device_mesh.size(), with_padding=True, contiguous=True)
        big = funcol.all_gather_single(padded[my_rank], gather_dim=shard_dim,
                                       group=(device_mesh, 0))
        chunks = torch.chunk(big, device_mesh.size(), dim=shard_dim)
        unpadded = [unpad_tensor(c, shard_dim, pad_sizes[i]) if pad_sizes[i] > 0 else c
                    for i, c in enumerate(chunks)]
        gathered = torch.cat(unpadded, dim=shard_dim)
        assert gathered.size() == tensor_to_split.size()
        assert torch.equal(gathered, tensor_to_split)


def case_reduce_scatter_contiguous(rank: int, world: int) -> None:
    device_mesh = DeviceMesh(DT, list(range(world)))
    my_rank = device_mesh.get_rank()
    step = world * 2
    tensor = torch.arange(0, step**2).view(step, -1) * (my_rank + 1)
    non_contiguous = tensor[::2, :2]
    contiguous = non_contiguous.clone().contiguous()
    a = DTensor.from_local(non_contiguous, device_mesh, [_Partial()])
    b = DTensor.from_local(contiguous, device_mesh, [_Partial()])
    a_local = a.redistribute(device_mesh, [Shard(0)])._local_tensor
    b_local = b.redistribute(device_mesh, [Shard(0)])._local_tensor
    assert torch.equal(a_local, b_local)
    assert list(a_local.size()) == [1, 2]
    sum_base = (1 + world) * world / 2
    first = my_rank * sum_base * step * 2
    assert torch.equal(a_local, torch.tensor([[first, first + sum_base]], dtype=a_local.dtype))


def case_reduce_scatter_uneven(rank: int, world: int) -> None:
    device_mesh = DeviceMesh(DT, list(range(world)))
    my_rank = device_mesh.get_rank()
    tensor_to_split = torch.ones(device_mesh.size() + 3, device_mesh.size() + 1) * rank
    res_num = (world - 1) * world / 2
    for shard_dim in range(tensor_to_split.ndim):
        expected = _chunks(tensor_to_split, world, shard_dim)
        padded, pad_sizes = Shard(shard_dim)._split_tensor(
            tensor_to_split.clone(), device_mesh.size(), with_padding=True, contiguous=True)
        scattered = funcol.reduce_scatter_single(torch.cat(padded, shard_dim), reduceOp="sum",
                                                 scatter_dim=shard_dim,
                                                 group=(device_mesh, 0))
        if pad_sizes[my_rank] > 0:
            scattered = unpad_tensor(scattered, shard_dim, pad_sizes[my_rank])
        _check_piece(scattered, expected[my_rank], torch.ones_like(expected[my_rank]) * res_num)


def case_broadcast_nd(rank: int, world: int) -> None:
    mesh = DeviceMesh(DT, torch.arange(8).reshape(2, 2, 2))
    local_tensor = torch.ones(3, 3) * rank
    for dim, dim_group in enumerate(mesh.get_all_groups()):
        global_ranks = [get_global_rank(dim_group, i) for i in range(get_world_size(dim_group))]
        cloned = local_tensor.clone()
        mesh_broadcast(cloned, mesh, mesh_dim=dim)
        assert torch.equal(cloned, torch.ones(3, 3) * global_ranks[0])


def case_scatter_nd(rank: int, world: int) -> None:
    mesh = DeviceMesh(DT, torch.arange(8).reshape(2, 2, 2))
    for dim, dim_group in enumerate(mesh.get_all_groups()):
        global_ranks = [get_global_rank(dim_group, i) for i in range(get_world_size(dim_group))]
        pieces = [torch.ones(3, 3) * g for g in global_ranks]
        coordinate = mesh.get_coordinate()
        assert coordinate is not None
        received = torch.empty_like(pieces[coordinate[dim]])
        mesh_scatter(received, pieces, mesh, mesh_dim=dim)
        assert torch.equal(received, torch.ones(3, 3) * rank)


#: The cases of each world, in the order every rank runs them, by torch's test name.
CASES: dict[int, tuple[Case, ...]] = {
    4: (case_init_process_group, case_device_mesh_reuse_default_group),
    8: (case_backend_override_argument_dict_with_idx_and_backend_lazy, case_broadcast_1d,
        case_scatter_1d, case_scatter_uneven, case_all_gather_uneven,
        case_reduce_scatter_contiguous, case_reduce_scatter_uneven, case_broadcast_nd,
        case_scatter_nd),
}


def case_name(case: Case) -> str:
    """torch's name of the test a case ports: ``case_x`` ports ``test_x``."""
    return "test_" + case.__name__.removeprefix("case_")


def _describe(e: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return f"{type(e).__module__}.{type(e).__qualname__}: {e}"[:1500] + "\n" + tb[-2500:]


def _write(out_dir: str, rank: int, result: dict[str, Any]) -> None:
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def main(out_dir: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    result: dict[str, Any] = {"rank": rank, "cases": {}}
    for case in CASES[world]:
        name = case_name(case)
        if world != 4 and not dist.is_initialized():  # as torch's with_comms does
            dist.init_process_group("gloo", timeout=TIMEOUT)
        print(f"case {name}", flush=True)
        try:
            case(rank, world)
            result["cases"][name] = "ok"
        except Exception as e:  # recorded; the next case still runs
            result["cases"][name] = _describe(e)
        if not dist.is_initialized():  # the constructor did not initialize it: do it here
            dist.init_process_group("gloo", timeout=TIMEOUT)
        _write(out_dir, rank, result)
    print("done", flush=True)
    try:  # rank 0 hosts the store: leave together
        dist.monitored_barrier(timeout=TIMEOUT, wait_all_ranks=True)
    except Exception as e:
        print(f"final barrier: {type(e).__name__}: {e}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip tearing down groups that a failed case may have left half-made


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[2])
