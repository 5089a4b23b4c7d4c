"""Surviving a failed rank on real Gloo processes: SIGKILL mid-step, rebind, check every dim.

Eight processes; the store lives in the launcher (as torchrun's agent store), which reports
the ranks that died.  Ranks kill themselves with SIGKILL inside a training step; the others
notice (a collective raises or times out, or the agent's report appears), compute the
surviving view, ``rebind`` and all-reduce on every dim of the new plan.  Expected sums and
the groups that may be kept come from NumPy rank tensors here, not from the code under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from gloo_launch import launch_with_agent

WORKER = Path(__file__).with_name("recover_gloo_worker.py")
PLANS = {"2d": np.arange(8).reshape(4, 2), "3d": np.arange(8).reshape(2, 2, 2),
         "spare": np.arange(6).reshape(3, 2)}
NAMES = {"2d": ["dp", "tp"], "3d": ["dp", "cp", "tp"], "spare": ["dp", "tp"]}


def _run(tmp_path: Path, plan: str, victims: list[int], way: str, kill_at: int = 0,
         backend: str = "gloo") -> dict[int, dict[str, Any]]:
    env = {"PLAN": plan, "VICTIMS": ",".join(map(str, victims)), "KILL_STEP": "2",
           "KILL_AT": str(kill_at), "WAY": way, "BACKEND": backend}
    codes, reports, logs = launch_with_agent(WORKER, 8, plan, tmp_path, bound_s=90, env=env)
    for r in range(8):
        if r in victims:
            assert codes[r] == -9, f"rank {r} should have been killed\n{logs}"
        else:
            assert codes[r] == 0 and r in reports, f"rank {r} failed\n{logs}"
    return reports


def _intact(plan: str, lost: list[int], rank: int) -> set[str]:
    """The dims whose group of ``rank`` holds no lost rank (brute force over the tensor)."""
    tensor, names = PLANS[plan], NAMES[plan]
    if rank not in tensor:
        return set()  # a spare had no group to keep
    where = tuple(int(i) for i in np.argwhere(tensor == rank)[0])
    out = set()
    for k, name in enumerate(names):
        index = list(where)
        index[k] = slice(None)
        if not set(tensor[tuple(index)].flat) & set(lost):
            out.add(name)
    return out


def _check(reports: dict[int, dict[str, Any]], plan: str, lost: list[int],
           in_new: set[int]) -> None:
    assert {r for r, rep in reports.items() if rep["in_new"]} == in_new
    for rank in in_new:
        rep = reports[rank]
        assert rep["lost"] == lost
        assert rep["sums"] == rep["expected"], (rank, rep)
        assert set(rep["kept"]) <= _intact(plan, lost, rank), (rank, rep)


@pytest.mark.timeout(150)
def test_one_rank_killed_dp_slice_dropped_tp_groups_kept(tmp_path: Path) -> None:
    # rank 5 dies after the step's dp all-reduce: its dp peers fail at the next one, the
    # others time out on dp waiting for them, and no tp collective fails anywhere
    reports = _run(tmp_path, "2d", [5], "drop", kill_at=1)
    _check(reports, "2d", [5], {0, 1, 2, 3, 6, 7})
    from backend._c10d._torch_private import RECONFIGURES

    for rank in (0, 1, 2, 3, 6, 7):  # so each tp group is reused: only dp is created, or,
        # on torch >= 2.14, reconfigured in place (its survivors keep their order)
        assert reports[rank]["kept"] == ["tp"], reports[rank]
        assert reports[rank]["created"] == (0 if RECONFIGURES else 1), reports[rank]
        assert reports[rank]["reconfigured"] == (["dp"] if RECONFIGURES else []), reports[rank]


@pytest.mark.timeout(150)
def test_a_whole_host_of_two_ranks_killed(tmp_path: Path) -> None:
    reports = _run(tmp_path, "2d", [2, 3], "drop", kill_at=1)
    _check(reports, "2d", [2, 3], {0, 1, 4, 5, 6, 7})


@pytest.mark.timeout(150)
def test_a_3d_plan_with_a_flattened_dim_survives(tmp_path: Path) -> None:
    reports = _run(tmp_path, "3d", [6], "drop")
    _check(reports, "3d", [6], {0, 1, 2, 3})


@pytest.mark.timeout(150)
def test_a_spare_takes_the_place_of_the_failed_rank(tmp_path: Path) -> None:
    reports = _run(tmp_path, "spare", [3], "substitute")
    _check(reports, "spare", [3], {0, 1, 2, 4, 5, 6})


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_gpus() < 8, reason="needs 8 CUDA GPUs (one NCCL rank each)")
@pytest.mark.timeout(300)
def test_nccl_shrinks_the_dp_groups_that_lost_a_rank(tmp_path: Path) -> None:
    """On NCCL the dp groups that lost rank 5's slice are shrunk to their survivors
    (shrink_group, in their own order): nothing is created, tp is kept."""
    reports = _run(tmp_path, "2d", [5], "drop", kill_at=1, backend="nccl")
    _check(reports, "2d", [5], {0, 1, 2, 3, 6, 7})
    for rank in (0, 1, 2, 3, 6, 7):
        assert reports[rank]["kept"] == ["tp"] and reports[rank]["created"] == 0, reports[rank]


@pytest.mark.timeout(300)
def test_the_soak_bench_runs_a_few_random_trials() -> None:
    """bench/recover_soak.py (200 trials outside the default run) at its smallest size."""
    import subprocess
    import sys

    soak = Path(__file__).resolve().parents[1] / "bench" / "recover_soak.py"
    out = subprocess.run([sys.executable, str(soak), "--trials", "2", "--seed", "7"],
                         capture_output=True, text=True, timeout=280, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 trials" in out.stdout and "0 hangs, 0 wrong" in out.stdout
