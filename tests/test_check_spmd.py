"""check_spmd finds, offline, the group requests a job would hang or fail on.

The plan is torchtitan's (its ``ParallelDims`` unflattens the world three times and
flattens a loss dim): at 1,024 ranks, pp=4, dp_replicate=2, dp_shard=16, cp=2, tp=4, ep=8.
Expected findings are written out by hand from the planted fault.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from backend import (
    BackendConfigError,
    FakeBackend,
    GroupOptions,
    check_spmd,
    init_device_mesh,
)
from mesh import MeshView

WORLD = 1024
PP, DP_REP, DP_SHARD, CP, TP, EP = 4, 2, 16, 2, 4, 8
BATCH, FSDP = DP_REP * DP_SHARD, DP_SHARD * CP
EFSDP = FSDP * TP // EP


def titan(backend: FakeBackend, *, skip: int | None = None, swap: int | None = None) -> None:
    """Build torchtitan's meshes and ask for every group a training step uses, in one order.

    ``skip``: that rank never asks for ``cp``; ``swap``: that rank asks for ``fsdp`` before
    ``cp`` (its cp pair lies inside its fsdp group: the two wait on each other).
    """
    world = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("world",), backend=backend)
    data = world._unflatten(0, (PP, BATCH, CP, TP), ("pp", "batch", "cp", "tp"))
    dense = world._unflatten(0, (PP, DP_REP, FSDP, TP), ("pp", "dp_replicate", "fsdp", "tp"))
    sparse = world._unflatten(0, (PP, DP_REP, EFSDP, EP), ("pp", "dp_replicate", "efsdp", "ep"))
    loss = data["batch", "cp"]._flatten("loss")
    order = ["pp", "dp_replicate", "tp", "cp", "fsdp", "efsdp", "ep", "loss"]
    if backend.rank == swap:
        order[3], order[4] = order[4], order[3]
    for dim in order:
        if dim == "cp" and backend.rank == skip:
            continue
        mesh = {"pp": data, "tp": data, "cp": data, "fsdp": dense, "dp_replicate": dense,
                "efsdp": sparse, "ep": sparse, "loss": loss}[dim]
        mesh.get_group(dim)


def test_a_correct_plan_at_1024_ranks_passes_in_seconds() -> None:
    start = time.perf_counter()
    report = check_spmd(WORLD, titan)
    took = time.perf_counter() - start
    assert report.ok, str(report)
    assert str(report).endswith("every one can be created")
    # groups: pp 256, dp_replicate 512, tp 256, cp 512, fsdp 32, efsdp 64, ep 128, loss 16
    assert report.groups == 256 + 512 + 256 + 512 + 32 + 64 + 128 + 16
    assert took < 20, took


def test_a_skipped_dim_names_the_rank_that_never_asks() -> None:
    report = check_spmd(WORLD, lambda b: titan(b, skip=5))
    assert not report.ok
    # rank 5's cp group is (5, 9): cp has stride TP = 4 inside each batch index
    # rank 5 = (pp 0, batch 0, cp 1, tp 1): its cp pair is (1, 5) (cp has stride TP = 4)
    assert report.never_created == (("cp", (1, 5), (5,)),)
    assert report.waiting == ()
    assert "the 'cp' group (1, 5) is never asked for by rank 5" in str(report)


def test_a_swapped_order_names_the_ranks_waiting_on_each_other() -> None:
    report = check_spmd(WORLD, lambda b: titan(b, swap=5))
    assert not report.ok and report.never_created == ()
    # rank 1 waits at cp (1, 5) for rank 5, which waits at fsdp for rank 1 (1 is in it)
    fsdp = tuple(range(1, 128, 4))
    assert report.waiting == (((1, "cp", (1, 5)), (5, "fsdp", fsdp)),)
    assert "ranks (1, 5) asked for groups in different orders and wait on each other" in \
        str(report)
    assert report.blocked  # the members of their later groups are stuck behind them


def test_a_program_asking_for_a_view_it_is_not_in_is_reported() -> None:
    def program(backend: FakeBackend) -> None:
        view = MeshView.from_ranks([0, 1], ("pair",))
        backend.bind(view).get_group("pair")  # ranks 2 and 3 are not in it: unguarded

    report = check_spmd(4, program)
    assert [(r, call) for r, call, _ in report.errors] == [(2, 0), (3, 0)]
    assert "NotInMeshError" in report.errors[0][2]

    def guarded(backend: FakeBackend) -> None:
        mesh = backend.bind(MeshView.from_ranks([0, 1], ("pair",)))
        if mesh.get_coordinate() is not None:
            mesh.get_group("pair")

    assert check_spmd(4, guarded).ok


def test_a_cycle_between_two_tagged_world_groups() -> None:
    def program(backend: FakeBackend) -> None:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("x",), backend=backend)
        a = mesh._flatten("a", GroupOptions(tag="a"))
        b = mesh._flatten("b", GroupOptions(tag="b"))
        first, second = (b, a) if backend.rank == 1 else (a, b)
        first.get_group(), second.get_group()

    report = check_spmd(2, program)
    assert report.waiting == (((0, "a", (0, 1)), (1, "b", (0, 1))),)


@pytest.mark.parametrize(("world", "program"), [(0, titan), (2.0, titan), (4, "program")])
def test_bad_arguments_are_refused(world: Any, program: Any) -> None:
    with pytest.raises(BackendConfigError):
        check_spmd(world, program)


def test_views_reaching_the_same_groups_by_different_paths_are_one_group() -> None:
    """Even ranks ask for tp through a (dp, tp) shape, odd ranks through an explicit rank
    list (tp, dp) = [[0, 2], [1, 3]]: both reach tp groups (0, 1) and (2, 3), which a real
    run creates once (groups are named by their family), so nothing is missing."""
    shaped = MeshView.from_shape((2, 2), ("dp", "tp"))
    listed = MeshView.from_ranks([[0, 2], [1, 3]], ("tp", "dp"))
    assert shaped.groups("tp") == listed.groups("tp") == ((0, 1), (2, 3))

    def program(backend: FakeBackend) -> None:
        backend.bind(listed if backend.rank % 2 else shaped).get_group("tp")

    report = check_spmd(4, program)
    assert report.ok, str(report)
    assert report.groups == 2
