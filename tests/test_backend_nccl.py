"""NCCL: the DEFAULT / SPLIT / NEW_GROUP decision (pure, no GPU), and a world of one on a GPU.

``plan_creation`` is tested on views whose groups are written out by hand.  The GPU tests
run ``NcclBackend`` in a subprocess (it initializes torch's default group) and skip
cleanly where CUDA is not available.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from typing import Any

import pytest
import torch

from backend import GroupOptions, Plan
from backend._c10d._spec import plan_creation
from mesh import MeshView

DEFAULT = GroupOptions()
TIMEOUT = GroupOptions(timeout=timedelta(seconds=30))


def plans(view: MeshView, dim: str, world: int, options: GroupOptions = DEFAULT, *,
          can_split: bool) -> set[Plan]:
    """The plans chosen by every rank of ``view``'s universe (they must agree)."""
    universe = [r for r in range(world) if view.coordinate(r) is not None]
    return {plan_creation(view, dim, r, world, options, can_split=can_split) for r in universe}


# ---- DEFAULT: reuse the world group --------------------------------------------------------

@pytest.mark.parametrize("can_split", [False, True])
def test_a_whole_world_dim_in_natural_order_with_default_options_reuses_the_world(
        can_split: bool) -> None:
    world = MeshView.from_shape(8, ("world",))
    assert plans(world, "world", 8, can_split=can_split) == {Plan.DEFAULT}
    flat = MeshView.from_shape((2, 4), ("dp", "tp")).flatten(("dp", "tp"), "all")
    assert plans(flat, "all", 8, can_split=can_split) == {Plan.DEFAULT}


def test_natural_order_reached_through_an_explicit_map_reuses_the_world() -> None:
    # [[0, 2], [1, 3]] flattened with dim1 outer reads 0, 1, 2, 3.
    view = MeshView.from_ranks([[0, 2], [1, 3]], ("a", "b")).flatten(("b", "a"), "ba")
    assert view.group(0, "ba") == (0, 1, 2, 3)
    assert plans(view, "ba", 4, can_split=False) == {Plan.DEFAULT}


@pytest.mark.parametrize("options", [TIMEOUT, GroupOptions(backend="nccl"),
                                     GroupOptions(group_desc="world"), GroupOptions(tag="x"),
                                     GroupOptions(pg_options=object())])
def test_any_overridden_option_gets_its_own_group_pytorch_156593(options: GroupOptions) -> None:
    world = MeshView.from_shape(8, ("world",))
    assert plans(world, "world", 8, options, can_split=False) == {Plan.NEW_GROUP}
    split = {Plan.NEW_GROUP} if options.tag else {Plan.SPLIT}
    assert plans(world, "world", 8, options, can_split=True) == split


@pytest.mark.parametrize("can_split", [False, True])
def test_the_whole_world_in_another_order_is_not_the_default_group(can_split: bool) -> None:
    reversed_world = MeshView.from_ranks([3, 2, 1, 0], ("w",))
    assert plans(reversed_world, "w", 4, can_split=can_split) == {Plan.NEW_GROUP}
    tp_dp = MeshView.from_shape((2, 2), ("dp", "tp")).flatten(("tp", "dp"), "tp_dp")
    assert tp_dp.group(0, "tp_dp") == (0, 2, 1, 3)
    assert plans(tp_dp, "tp_dp", 4, can_split=can_split) == {Plan.NEW_GROUP}


def test_a_whole_universe_dim_of_a_smaller_universe_is_not_the_default_group() -> None:
    first_half = MeshView.from_ranks([0, 1, 2, 3], ("h",))  # ranks 0..3 of a world of 8
    assert plans(first_half, "h", 8, can_split=False) == {Plan.NEW_GROUP}
    assert plans(first_half, "h", 8, can_split=True) == {Plan.NEW_GROUP}


# ---- SPLIT: one split_group call for an ascending family over the world --------------------

def test_ascending_groups_over_the_world_split_when_the_backend_can() -> None:
    mesh = MeshView.from_shape((2, 4), ("dp", "tp"))
    assert mesh.groups("dp") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert plans(mesh, "dp", 8, can_split=True) == {Plan.SPLIT}
    assert plans(mesh, "tp", 8, can_split=True) == {Plan.SPLIT}
    assert plans(mesh, "dp", 8, TIMEOUT, can_split=True) == {Plan.SPLIT}
    dp_tp = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")).flatten(("dp", "tp"), "dp_tp")
    assert dp_tp.group(0, "dp_tp") == (0, 1, 4, 5)  # ascending, not contiguous
    assert plans(dp_tp, "dp_tp", 8, can_split=True) == {Plan.SPLIT}


def test_without_can_split_every_non_default_family_uses_new_group() -> None:
    mesh = MeshView.from_shape((2, 4), ("dp", "tp"))
    assert plans(mesh, "dp", 8, can_split=False) == {Plan.NEW_GROUP}
    assert plans(mesh, "tp", 8, can_split=False) == {Plan.NEW_GROUP}


def test_a_tag_never_splits() -> None:
    mesh = MeshView.from_shape((2, 4), ("dp", "tp"))
    assert plans(mesh, "tp", 8, GroupOptions(tag="x"), can_split=True) == {Plan.NEW_GROUP}


def test_a_family_with_a_descending_group_uses_new_group() -> None:
    """split_group sorts each split, which would break 'group rank i = coordinate i'."""
    mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    tp_dp = mesh.flatten(("tp", "dp"), "tp_dp")
    assert tp_dp.group(0, "tp_dp") == (0, 4, 1, 5)
    assert plans(tp_dp, "tp_dp", 8, can_split=True) == {Plan.NEW_GROUP}
    # Transposing the whole mesh keeps each dim's groups, so it still splits.
    assert plans(mesh.transpose(), "dp", 8, can_split=True) == {Plan.SPLIT}


def test_an_explicit_rank_map_splits_only_where_its_groups_ascend() -> None:
    # Along a: (3, 1), (2, 0); along b: (3, 2), (1, 0); every group descends.
    mixed = MeshView.from_ranks([[3, 2], [1, 0]], ("a", "b"))
    assert set(mixed.groups("a")) == {(3, 1), (2, 0)}
    assert plans(mixed, "a", 4, can_split=True) == {Plan.NEW_GROUP}
    assert plans(mixed, "b", 4, can_split=True) == {Plan.NEW_GROUP}
    assert plans(mixed.transpose(), "a", 4, can_split=True) == {Plan.NEW_GROUP}
    # A transposed map whose groups ascend: a = (0, 1), (2, 3); b = (0, 2), (1, 3).
    transposed = MeshView.from_ranks([[0, 2], [1, 3]], ("a", "b"))
    assert plans(transposed, "a", 4, can_split=True) == {Plan.SPLIT}
    assert plans(transposed, "b", 4, can_split=True) == {Plan.SPLIT}
    # One ascending group and one descending one: the family cannot split.
    half = MeshView.from_ranks([[0, 1], [3, 2]], ("a", "b"))
    assert set(half.groups("b")) == {(0, 1), (3, 2)}
    assert plans(half, "b", 4, can_split=True) == {Plan.NEW_GROUP}


def test_a_family_over_part_of_the_world_never_splits() -> None:
    """split_group is collective over the whole world; ranks outside the universe never ask."""
    part = MeshView.from_ranks([[0, 1], [2, 3]], ("a", "b"))  # world of 8
    assert plans(part, "b", 8, can_split=True) == {Plan.NEW_GROUP}


# ---- on a GPU: NcclBackend in a world of one -----------------------------------------------

GPU_SCRIPT = """
    import json, logging
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    from backend import GroupOptions, NcclBackend, Plan, init_device_mesh
    from backend._c10d._spec import plan_creation

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    log = logging.getLogger("backend._c10d._torch_groups")
    log.setLevel(logging.DEBUG)
    log.addHandler(Keep())

    b = NcclBackend.from_env()
    out = {"device": torch.cuda.current_device(), "can_split": b._can_split()}
    plain = init_device_mesh("cuda", (1,), mesh_dim_names=("world",), backend=b)
    long = GroupOptions(timeout=timedelta(seconds=60))
    timed = init_device_mesh("cuda", (1,), mesh_dim_names=("world",), backend=b,
                             backend_override={"world": long})
    tagged = init_device_mesh("cuda", (1, 1), mesh_dim_names=("dp", "tp"), backend=b,
                              backend_override={"tp": GroupOptions(tag="x")})
    for label, mesh, dim in [("plain", plain, "world"), ("timed", timed, "world"),
                             ("tagged", tagged, "tp")]:
        g = mesh.get_group(dim)
        t = torch.full((4,), 3.0, device="cuda")
        dist.all_reduce(t, group=g)
        torch.cuda.synchronize()
        out[label] = {"sum": t.tolist(), "is_world": g is dist.group.WORLD,
                      "pg": dist.get_process_group_ranks(g),
                      "plan": plan_creation(mesh.view, dim, 0, 1,
                                            mesh.options[mesh.view.index(dim)],
                                            can_split=b._can_split()).value}
    from torch.distributed.tensor import Shard, distribute_tensor
    x = torch.arange(8.0, device="cuda")
    dt = distribute_tensor(x, plain.to_torch(), [Shard(0)])
    out["dtensor"] = torch.equal(dt.full_tensor(), x)
    out["log"] = records
    b.shutdown()
    out["initialized_after_shutdown"] = dist.is_initialized()
    print(json.dumps(out))
"""

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def gpu_run() -> dict[str, Any]:
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()))
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(GPU_SCRIPT)], env=env,
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the NCCL world of one did not finish in 240 s: {e.stderr!r}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@needs_gpu
@pytest.mark.timeout(300)
def test_nccl_world_of_one_all_reduces_on_the_default_group(gpu_run: dict[str, Any]) -> None:
    got = gpu_run["plain"]
    assert got == {"sum": [3.0] * 4, "is_world": True, "pg": [0], "plan": "default"}
    assert gpu_run["device"] == 0


@needs_gpu
@pytest.mark.timeout(300)
def test_nccl_binds_the_device_and_splits_overridden_dims(gpu_run: dict[str, Any]) -> None:
    """from_env binds the default group to cuda:LOCAL_RANK (eager init), so an overridden
    dim is split from it; a tagged dim gets new_group."""
    assert gpu_run["can_split"] is True
    assert gpu_run["timed"] == {"sum": [3.0] * 4, "is_world": False, "pg": [0], "plan": "split"}
    assert gpu_run["tagged"] == {"sum": [3.0] * 4, "is_world": False, "pg": [0],
                                 "plan": "new_group"}
    logged = " | ".join(gpu_run["log"])
    assert "creating split group" in logged and "creating new_group group" in logged, logged


@needs_gpu
@pytest.mark.timeout(300)
def test_nccl_to_torch_runs_dtensor_and_shutdown_completes(gpu_run: dict[str, Any]) -> None:
    assert gpu_run["dtensor"] is True
    assert gpu_run["initialized_after_shutdown"] is False
