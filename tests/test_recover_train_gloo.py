"""Lose a rank or a host, keep training: torch's own TP (``parallelize_module``) and FSDP2
(``fully_shard``, or torch's HSDP: ``fully_shard`` over two dims) with Adam on a facade mesh
of Gloo processes; the victims are SIGKILLed mid-training, a host's ranks all at once
(``tests/recover_train_worker.py``).

Without a restart, every process still up decides with ``mesh.recover`` and acts with
``backend.apply_recovery`` on the way it ranks best: every survivor's step fails at the same
step; every recovered block of every parameter and Adam moment equals torch's own
``distribute_tensor`` of the expected state on the new mesh (the last completed step's
values, the checkpoint's where only the victims held them, read from the checkpoint by the
spare alone); every new group lists its ranks in coordinate order; training goes on, and
after 3 more steps the parameters equal, bit for bit, those of a job started on the new
mesh from the same state.

Scenarios: (dp=3, tp=2) FSDP2 × TP on 6 ranks, rank 3 killed, with a spare host of 2 (8
processes: the first spare takes its coordinate) and without (6 processes: its dp slice is
dropped, its healthy member sends what it holds and leaves, 4 go on); (dp_replicate=2,
dp_shard=2, tp=2) HSDP × TP on 2 hosts of 4, host 0 (ranks 0..3) killed, with a spare host
of 4 (12 processes: the spares take its coordinates) and without (8 processes: its
dp_replicate slice is dropped, 4 go on).  Each test takes 1 to 2 min on 2 loaded cores.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest
import torch

WORKER = Path(__file__).with_name("recover_train_worker.py")
BOUND_S = 420
HOST_0 = [0, 1, 2, 3]
ONLY_RANK_3 = 3 * (4 * 12 + 4 + 4 * 12)
"""The elements only rank 3 (dp=1, tp=1) of the (dp=3, tp=2) job holds, in each parameter and
its two moments: 0.weight's rows 16..20 (tp's half 12..24, dp's third of it), 0.bias's 4
of them, 2.weight's rows 4..8 by columns 12..24 (2.bias is replicated over tp: rank 2 too)."""

pytestmark = [
    pytest.mark.timeout(2 * BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


def _train(tmp_path: Path, job: str, world: int, victims: list[int]
           ) -> dict[int, dict[str, Any]]:
    """The training run: the victims die by SIGKILL, every other process exits 0 and
    reports; every survivor of the old world failed at step 4 with torch's shardings as
    the job's layout says; every process up got the same failure and trained on."""
    env = {"JOB": job, "VICTIMS": ",".join(map(str, victims))}
    codes, reports, logs = gloo_launch.launch_with_agent(WORKER, world, "train", tmp_path / "t",
                                                         BOUND_S, env=env)
    alive = [r for r in range(world) if r not in victims]
    assert [codes[r] for r in victims] == [-9] * len(victims), f"exit codes {codes}\n{logs}"
    assert [codes[r] for r in alive] == [0] * len(alive), f"exit codes {codes}\n{logs}"
    assert sorted(reports) == alive, logs
    for rank, r in reports.items():
        assert r["lost"] == victims, (rank, r)
        if r["goes_on"]:
            assert r["mismatched"] == [] and r["group_rank_is_coordinate"], (rank, r)
            assert r["trained_on"], (rank, r)
    return reports


def _old_world(reports: dict[int, dict[str, Any]], ranks: range) -> None:
    for rank in ranks:
        if rank in reports:
            r = reports[rank]
            assert r["shardings_match"] and r["failed_at"] == 4, (rank, r)


def _equals_reference(tmp_path: Path, job: str, victims: list[int],
                      shape: tuple[int, ...]) -> None:
    """A job started on a mesh of ``shape`` from the same state ends, after the same
    steps, with the recovered job's parameters, bit for bit."""
    run = tmp_path / "t" / "agent"
    world = math.prod(shape)
    env = {"JOB": job, "VICTIMS": ",".join(map(str, victims)), "FROM": str(run),
           "SHAPE": ",".join(map(str, shape))}
    codes, _, logs = gloo_launch.launch(WORKER, world, "reference", tmp_path / "r", BOUND_S,
                                        env=env)
    assert codes == [0] * world, f"exit codes {codes}\n{logs}"
    (ref_dir,) = (tmp_path / "r").glob("attempt*")
    ours, ref = torch.load(run / "final.pt"), torch.load(ref_dir / "final.pt")
    assert sorted(ours) == sorted(ref) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert all(torch.equal(ours[k], ref[k]) for k in ours), \
        {k: float((ours[k] - ref[k]).abs().max()) for k in ours}


def test_fsdp2_tp_training_loses_a_rank_recovers_onto_a_spare_and_equals_a_fresh_job(
        tmp_path: Path) -> None:
    reports = _train(tmp_path, "fsdp_tp", 8, [3])
    _old_world(reports, range(6))
    assert all(r["way"] == "spares [6]" for r in reports.values()), reports
    assert [r for r in reports if reports[r]["goes_on"]] == [0, 1, 2, 4, 5, 6]
    assert reports[0]["mesh"] == [[0, 1], [2, 6], [4, 5]]
    assert reports[6]["storage"] == ONLY_RANK_3  # read by the spare alone
    assert all(reports[r]["storage"] == 0 for r in (0, 1, 2, 4, 5, 7))
    _equals_reference(tmp_path, "fsdp_tp", [3], (3, 2))


def test_fsdp2_tp_training_loses_a_rank_without_a_spare_drops_its_dp_slice_and_equals_a_fresh_job(
        tmp_path: Path) -> None:
    reports = _train(tmp_path, "fsdp_tp", 6, [3])
    _old_world(reports, range(6))
    assert all(r["way"] == "drop 'dp'" for r in reports.values()), reports
    assert [r for r in reports if reports[r]["goes_on"]] == [0, 1, 4, 5]  # 2 sends, leaves
    assert reports[0]["mesh"] == [[0, 1], [4, 5]]
    assert sum(r["storage"] for r in reports.values()) == ONLY_RANK_3
    assert reports[2]["storage"] == 0
    _equals_reference(tmp_path, "fsdp_tp", [3], (2, 2))


def test_hsdp_tp_training_loses_a_host_recovers_onto_a_spare_host_and_equals_a_fresh_job(
        tmp_path: Path) -> None:
    reports = _train(tmp_path, "hsdp_tp", 12, HOST_0)
    _old_world(reports, range(8))
    assert all(r["way"] == "spares [8, 9, 10, 11]" for r in reports.values()), reports
    assert [r for r in reports if reports[r]["goes_on"]] == [4, 5, 6, 7, 8, 9, 10, 11]
    assert reports[4]["mesh"] == [[[8, 9], [10, 11]], [[4, 5], [6, 7]]]
    # the lost host was a whole replica: its blocks come from the other, none from storage
    assert all(r["storage"] == 0 for r in reports.values())
    _equals_reference(tmp_path, "hsdp_tp", HOST_0, (2, 2, 2))


def test_hsdp_tp_training_loses_a_host_without_a_spare_drops_its_replica_and_equals_a_fresh_job(
        tmp_path: Path) -> None:
    reports = _train(tmp_path, "hsdp_tp", 8, HOST_0)
    _old_world(reports, range(8))
    assert all(r["way"] == "drop 'dp_replicate'" for r in reports.values()), reports
    assert sorted(reports) == [4, 5, 6, 7] and all(r["goes_on"] for r in reports.values())
    assert reports[4]["mesh"] == [[[4, 5], [6, 7]]]
    assert all(r["storage"] == 0 for r in reports.values())
    _equals_reference(tmp_path, "hsdp_tp", HOST_0, (1, 2, 2))
