"""``backend.apply_recovery`` on a live job: 8 Gloo processes, (dp=3, tp=2) over ranks 0..5
with ranks 6 and 7 spare, a sharded state and a DCP checkpoint of step 0; one rank is
SIGKILLed at step 2 (``tests/apply_recovery_worker.py``).  Every process still up decides with
``mesh.recover`` and acts on the way named: afterwards every block of every tensor holds the
value of the failure's step where some rank still up held it, and the checkpoint's where
none did (read from the checkpoint: only then); dtypes are kept; every group of the new
world lists the new view's group in coordinate order (group rank = coordinate); one more
step's all-reduce over the new tp groups is right; a healthy rank the way leaves out ends
with no mesh.  Nothing hangs: the launcher kills everything at its bound.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest

WORKER = Path(__file__).with_name("apply_recovery_worker.py")
BOUND_S = 300

pytestmark = [
    pytest.mark.timeout(BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


def _run(tmp_path: Path, way: str, victim: int) -> dict[int, dict[str, Any]]:
    codes, reports, logs = gloo_launch.launch_with_agent(
        WORKER, 8, "run", tmp_path, BOUND_S, env={"WAY": way, "VICTIM": str(victim)})
    assert codes[victim] == -9, logs  # SIGKILL
    alive = [r for r in range(8) if r != victim]
    assert [codes[r] for r in alive] == [0] * 7, f"exit codes {codes}\n{logs}"
    assert sorted(reports) == alive, logs
    return reports


def _check_state(reports: dict[int, dict[str, Any]]) -> None:
    for rank, r in reports.items():
        assert r["steps"] == [2], (rank, r["steps"])  # every survivor failed at step 2
        assert all(d == 0.0 for d in r["diff"].values()), (rank, r["diff"])
        assert {n: d for n, d in r.get("dtypes", {}).items()} == \
            {n: {"b": "torch.float64"}.get(n, "torch.float32") for n in r.get("dtypes", {})}
        if r["in_new"]:
            for dim, (ranks, coordinate_order) in r["groups"].items():
                assert ranks == coordinate_order, (rank, dim, ranks, coordinate_order)
            for dim, (group_rank, coordinate) in r["group_rank"].items():
                assert group_rank == coordinate, (rank, dim, r["group_rank"])
            assert r["tp_sum"] == r["tp_want"], (rank, r)


def test_a_spare_takes_the_failed_coordinate_and_every_element_is_right(tmp_path: Path
                                                                       ) -> None:
    reports = _run(tmp_path, "spare", victim=3)
    _check_state(reports)
    assert reports[6]["in_new"] and not reports[7]["in_new"]  # the first spare goes in
    assert reports[6]["groups"]["tp"][0] == [2, 6]  # rank 3's tp coordinate is the spare's
    # e's block of rank 3 was on rank 3 only: read from the checkpoint, by the spare alone
    assert reports[6]["storage"] == 4 and \
        all(r["storage"] == 0 for k, r in reports.items() if k != 6)
    assert sorted(k for k, r in reports.items() if "e" in r["diff"]) == [0, 1, 2, 4, 5, 6]
    # the dp group (1, 3, 5) goes on as (1, 6, 5): the spare was never a member, so Gloo
    # cannot reconfigure it: created anew, and Recovered.groups says why
    (dp,) = [g for g in reports[1]["reformed"] if g["before"] == [1, 3, 5]]
    assert dp["how"] == "ended" and ("a spare" in dp["why"] or "no reconfigure" in dp["why"])


def test_a_drop_leaves_the_failed_slice_out_and_its_healthy_rank_sends_what_it_holds(
        tmp_path: Path) -> None:
    reports = _run(tmp_path, "drop", victim=3)
    _check_state(reports)
    assert reports[0]["label"] == "drop 'dp'"
    assert not reports[2]["in_new"] and reports[2]["diff"] == {}  # left out, holds nothing
    assert sorted(k for k, r in reports.items() if r["in_new"]) == [0, 1, 4, 5]
    from backend._c10d._torch_private import RECONFIGURES

    for rank in (0, 1, 4, 5):  # dp (0, 2, 4) -> (0, 4): reconfigured in place on torch >= 2.14
        (dp,) = [g for g in reports[rank]["reformed"] if g["dim"] == "dp"]
        assert dp["after"] == reports[rank]["groups"]["dp"][1], (rank, dp)
        assert dp["how"] == ("reconfigured" if RECONFIGURES else "ended"), (rank, dp)
