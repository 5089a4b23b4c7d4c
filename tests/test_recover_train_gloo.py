"""Lose a rank, keep training: torch's own TP (``parallelize_module``) and FSDP2
(``fully_shard``) with Adam on a (dp=3, tp=2) facade mesh of 8 Gloo processes (ranks 6 and
7 a spare host); rank 3 is SIGKILLed mid-training (``tests/recover_train_worker.py``).

Without a restart, every process still up decides with ``mesh.recover`` and acts with
``backend.apply_recovery`` (the spare way): every survivor's step fails at the same step; every
recovered block of every parameter and Adam moment equals torch's own ``distribute_tensor``
of the expected state on the new mesh (the last completed step's values, the checkpoint's
where only the dead rank held them, read from the checkpoint by the spare alone); every new
group lists its ranks in coordinate order; training goes on, and after 3 more steps the
parameters equal, bit for bit, those of a job started on the same mesh from the same state.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gloo_launch
import pytest
import torch

WORKER = Path(__file__).with_name("recover_train_worker.py")
BOUND_S = 420

pytestmark = [
    pytest.mark.timeout(2 * BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


def test_fsdp2_tp_training_loses_a_rank_recovers_onto_a_spare_and_equals_a_fresh_job(
        tmp_path: Path) -> None:
    env = {"VICTIM": "3"}
    codes, reports, logs = gloo_launch.launch_with_agent(WORKER, 8, "train", tmp_path / "t",
                                                         BOUND_S, env=env)
    assert codes[3] == -9 and [c for r, c in enumerate(codes) if r != 3] == [0] * 7, \
        f"exit codes {codes}\n{logs}"
    assert sorted(reports) == [0, 1, 2, 4, 5, 6, 7], logs
    for rank in (0, 1, 2, 4, 5):
        r = reports[rank]
        assert r["shardings_match"] and r["failed_at"] == 4, (rank, r)
    for rank in (0, 1, 2, 4, 5, 6):
        r = reports[rank]
        assert r["lost"] == [3] and r["way"] == "spares [6]", (rank, r)
        assert r["mismatched"] == [] and r["group_rank_is_coordinate"], (rank, r)
        assert r["trained_on"], (rank, r)
    assert reports[6]["storage"] > 0  # what only rank 3 held, read by the spare alone
    assert all(reports[r]["storage"] == 0 for r in (0, 1, 2, 4, 5, 7))
    run = tmp_path / "t" / "agent"
    codes, _, logs = gloo_launch.launch(WORKER, 6, "reference", tmp_path / "r", BOUND_S,
                                        env={**env, "FROM": str(run)})
    assert codes == [0] * 6, f"exit codes {codes}\n{logs}"
    (ref_dir,) = (tmp_path / "r").glob("attempt*")
    ours, ref = torch.load(run / "final.pt"), torch.load(ref_dir / "final.pt")
    assert sorted(ours) == sorted(ref) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert all(torch.equal(ours[k], ref[k]) for k in ours), \
        {k: float((ours[k] - ref[k]).abs().max()) for k in ours}
