"""check_spmd finds, offline, the group requests a job would hang or fail on.

The plan is torchtitan's (its ``ParallelDims`` unflattens the world three times and
flattens a loss dim): at 1,024 ranks, pp=4, dp_replicate=2, dp_shard=16, cp=2, tp=4, ep=8.
Expected findings are written out by hand from the planted fault.
"""

from __future__ import annotations

from typing import Any

import pytest
from work_bound import bounded

from backend import (
    BackendConfigError,
    FakeBackend,
    GroupOptions,
    bind,
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


def test_a_correct_plan_at_1024_ranks_passes() -> None:
    """(Its seconds, against a 20 s target: ``bench/time_bounds.py``.)"""
    report = check_spmd(WORLD, titan)
    assert report.ok, str(report)
    assert str(report).endswith("every one can be created")
    # groups: pp 256, dp_replicate 512, tp 256, cp 512, fsdp 32, efsdp 64, ep 128, loss 16
    assert report.groups == 256 + 512 + 256 + 512 + 32 + 64 + 128 + 16


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
        bind(view, backend).get_group("pair")  # ranks 2 and 3 are not in it: unguarded

    report = check_spmd(4, program)
    assert [(r, call) for r, call, _ in report.errors] == [(2, 0), (3, 0)]
    assert "NotAMemberError" in report.errors[0][2]

    def guarded(backend: FakeBackend) -> None:
        mesh = bind(MeshView.from_ranks([0, 1], ("pair",)), backend)
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
        bind(listed if backend.rank % 2 else shaped, backend).get_group("tp")

    report = check_spmd(4, program)
    assert report.ok, str(report)
    assert report.groups == 2


def parity(backend: FakeBackend, device_type: str = "cpu") -> None:
    """Even ranks ask for dp then tp, odd ranks tp then dp: fine when each group is made by
    its members (Gloo), a deadlock when each dim is one split over the world (NCCL)."""
    mesh = init_device_mesh(device_type, (WORLD // 8, 8), mesh_dim_names=("dp", "tp"),
                            backend=backend)
    for dim in (("dp", "tp") if backend.rank % 2 == 0 else ("tp", "dp")):
        mesh.get_group(dim)


def test_mixed_orders_by_parity_pass_for_gloo_and_fail_for_an_nccl_split() -> None:
    assert check_spmd(WORLD, parity, backend="gloo").ok
    report = check_spmd(WORLD, parity, backend="nccl")
    assert not report.ok and len(report.waiting) == 1 and len(report.waiting[0]) == WORLD
    assert {(d, m) for _, d, m in report.waiting[0]} == {("dp", ()), ("tp", ())}
    text = str(report)
    assert len(text) < 4000, len(text)
    assert "the even ranks (0, 2, 4, ..., 1022; 512 ranks) wait at the split of dim 'dp' " \
           "over the world" in text, text
    assert "the odd ranks (1, 3, 5, ..., 1023; 512 ranks) wait at the split of dim 'tp'" in text


def test_auto_models_nccl_for_a_cuda_mesh_and_gloo_for_a_cpu_mesh() -> None:
    assert check_spmd(WORLD, parity).ok
    assert not check_spmd(WORLD, lambda b: parity(b, "cuda")).ok


def test_a_program_that_omits_backend_is_checked_on_the_recorder() -> None:
    """init_device_mesh without backend= binds the process's backend: during the check,
    the recorder (before: torch's default world, and 0 groups reported)."""
    def program(backend: FakeBackend) -> None:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        if backend.rank != 3:
            mesh.get_group("dp")

    report = check_spmd(4, program)
    assert report.groups == 2 and report.never_created == (("dp", (1, 3), (3,)),)


def test_an_async_program_is_refused_not_reported_ok() -> None:
    async def program(backend: FakeBackend) -> None:
        init_device_mesh("cpu", (2,), mesh_dim_names=("x",), backend=backend).get_group("x")

    with pytest.raises(BackendConfigError, match=r"asyncio\.run"):
        check_spmd(2, program)


def test_a_world_over_the_limit_is_refused_at_once() -> None:
    """At once: before any rank runs, in a few hundred Python steps and a few KiB (a bound on
    work, not seconds; the seconds are ``bench/time_bounds.py``'s)."""
    with bounded(events=20_000, peak_bytes=1 << 20):
        with pytest.raises(BackendConfigError, match="limit"):
            check_spmd(2**80, titan)
        with pytest.raises(BackendConfigError, match="backend must be one of"):
            check_spmd(4, titan, backend="mpi")  # type: ignore[arg-type]


def test_many_ranks_raising_the_same_error_make_one_line() -> None:
    def program(backend: FakeBackend) -> None:
        bind(MeshView.from_ranks([0, 1], ("pair",)), backend).get_group("pair")

    report = check_spmd(64, program)
    assert len(report.errors) == 62
    lines = [line for line in str(report).splitlines() if "raised" in line]
    assert len(lines) == 1 and "ranks 2 to 63 (62 ranks)" in lines[0], lines


def test_a_program_raising_an_unprintable_exception_is_a_finding() -> None:
    """Before: ``str()`` of the program's exception raised again, out of ``check_spmd``."""
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    def program(backend: FakeBackend) -> None:
        raise Unprintable()

    report = check_spmd(2, program)
    assert not report.ok and len(report.errors) == 2
    assert "Unprintable: <its message could not be read" in str(report)


def test_a_backend_that_is_no_name_is_a_typed_refusal() -> None:
    """Found by the fuzz: a NumPy array as ``backend=`` raised NumPy's ValueError (its
    truth value is ambiguous) where the check compared it with the names."""
    import numpy as np

    from backend import BackendConfigError

    with pytest.raises(BackendConfigError, match="backend must be one of"):
        check_spmd(1, int, backend=np.array([0, 1]))
