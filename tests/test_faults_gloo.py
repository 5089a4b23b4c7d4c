"""Lazy and still safe, on 4 real Gloo processes: a late, mis-ordered, absent or killed rank.

Each scenario of ``tests/fault_gloo_worker.py`` runs once (one launch each, ~10-25 s, killed
at :data:`BOUND_S`).  Mesh (dp, tp) = (2, 2), both dims with a 5 s timeout: dp groups are
{0, 2} and {1, 3}, tp groups {0, 1} and {2, 3}.  What must hold (issue: no cascade, bounded
and explained failures):

- a group whose members are all present is created, whatever failed before it;
- a creation that cannot complete fails within its timeout plus a small slack (one more
  timeout at most while a missing member is busy with another group), with a
  MembersMissingError that names this rank, the group, the missing members and the cause.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest
from fault_gloo_worker import LATE_S, TIMEOUT_S, VICTIM

WORKER = Path(__file__).with_name("fault_gloo_worker.py")
BOUND_S = 90
SLACK_S = 2.5  # past the timeout: the busy-peer slack (1 s), polling and a loaded machine

pytestmark = [
    pytest.mark.timeout(BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


def run(mode: str, tmp: Path) -> dict[int, dict[str, Any]]:
    second = {"SECOND_MASTER_PORT": str(gloo_launch.free_port())}  # for a world after shutdown
    codes, reports, logs = gloo_launch.launch(WORKER, 4, mode, tmp, BOUND_S, second)
    assert codes == [0] * 4, f"exit codes {codes}\n{logs}"
    assert sorted(reports) == [0, 1, 2, 3], logs
    return reports


def entries(report: dict[str, Any], dim: str) -> list[dict[str, Any]]:
    return [e for e in report["log"] if e["dim"] == dim]


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    return run("late", tmp_path_factory.mktemp("late"))


def test_a_late_rank_does_not_break_a_group_whose_members_are_present(
        late: dict[int, dict[str, Any]]) -> None:
    """Rank 3 is 7 s late.  tp {0, 1} (both present) is created at the first request on both
    ranks, although rank 1 first failed dp {1, 3} (torch's per-process naming broke it)."""
    for rank in (0, 1):
        first_tp = entries(late[rank], "tp")[0]
        assert first_tp["ok"], (rank, first_tp)
    assert entries(late[0], "dp")[0]["ok"] and entries(late[2], "dp")[0]["ok"]  # {0, 2}


def test_a_late_rank_fails_in_bounded_time_and_is_named(late: dict[int, dict[str, Any]]
                                                        ) -> None:
    first = entries(late[1], "dp")[0]  # rank 1 waited for rank 3 at dp {1, 3}
    assert not first["ok"] and first["error"] == "MembersMissingError"
    assert first["builtin_timeout"] and first["missing"] == [VICTIM]
    assert TIMEOUT_S - 0.5 < first["end"] - first["start"] < TIMEOUT_S + SLACK_S, first
    assert "rank 1 could not create the 'dp' group (1, 3)" in first["message"]
    assert "rank 3 is not creating any group" in first["message"]
    assert "Likely cause" in first["message"] and "check_spmd" in first["message"]
    mine = entries(late[VICTIM], "dp")[0]  # rank 3 comes after its dp partner gave up
    assert mine["start"] > LATE_S - 0.5
    if not mine["ok"]:
        assert mine["end"] - mine["start"] < TIMEOUT_S + SLACK_S, mine


def test_after_a_late_rank_one_more_request_makes_every_group_work(
        late: dict[int, dict[str, Any]]) -> None:
    for rank, r in late.items():
        assert r["works"]["dp"] == (0 + 2 if rank in (0, 2) else 1 + 3), (rank, r["log"])
        assert r["works"]["tp"] == (0 + 1 if rank in (0, 1) else 2 + 3), (rank, r["log"])


def test_a_misordered_request_fails_on_every_rank_in_bounded_time_saying_why(
        tmp_path: Path) -> None:
    reports = run("misorder", tmp_path)
    for rank, r in reports.items():
        first = r["log"][0]
        if first["ok"]:
            continue  # a rank whose partner happened to be free (it never is, here)
        assert first["error"] == "MembersMissingError", (rank, first)
        # the partner was busy with another group: up to its deadline plus the slack
        assert first["end"] - first["start"] < 2 * TIMEOUT_S + SLACK_S, (rank, first)
        assert "asked for groups in a different order" in first["message"], first["message"]
        assert "is creating the" in first["message"]
    assert not all(r["log"][0]["ok"] for r in reports.values())


def test_a_skipped_dim_names_the_absent_rank_and_leaves_healthy_groups_working(
        tmp_path: Path) -> None:
    reports = run("skip", tmp_path)
    dp1 = entries(reports[1], "dp")[0]
    assert not dp1["ok"] and dp1["missing"] == [VICTIM]
    assert "rank 3 is not creating any group" in dp1["message"]
    assert "skipped this group" in dp1["message"]
    assert dp1["end"] - dp1["start"] < TIMEOUT_S + SLACK_S
    assert reports[0]["works"] == {"dp": 2.0, "tp": 1.0}
    assert reports[1]["works"]["tp"] == 1.0  # tp {0, 1} works although rank 1 failed dp
    assert reports[2]["works"] == {"dp": 2.0, "tp": 5.0}
    assert reports[VICTIM]["works"] == {"tp": 5.0}
    for rank, r in reports.items():  # after shutdown(), a new backend and world work
        assert r["again"] == (1.0 if rank < 2 else 5.0), (rank, r.get("again"))


def test_a_killed_rank_is_named_and_shutdown_returns(tmp_path: Path) -> None:
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "killed", tmp_path, BOUND_S)
    assert codes == [0, 0, 0, 17], logs
    for rank in (0, 1, 2):
        r = reports[rank]
        assert r["before"] == {"dp": 2.0 if rank in (0, 2) else 4.0,
                               "tp": 1.0 if rank < 2 else 5.0}
        partner_lost = [d for d in ("dp", "tp") if VICTIM in _group(rank, d)]
        for dim in partner_lost:  # the collective with rank 3 in it failed, and says who
            got = r["explained"][dim]
            assert got is not None and got["type"] == "PeerLostError", (rank, dim, got)
            assert got["lost"] == [VICTIM] and "rank 3 has not answered" in got["message"]
        assert r["shutdown_s"] < 10


def _group(rank: int, dim: str) -> tuple[int, ...]:
    return ((0, 2) if rank in (0, 2) else (1, 3)) if dim == "dp" else \
        ((0, 1) if rank < 2 else (2, 3))


def test_a_retry_after_a_failure_past_the_barrier_waits_for_its_peer_and_names_it(
        tmp_path: Path) -> None:
    """Rank 1's tp creation fails after the members met (rank 0 has its group); rank 1's
    retry must not pass alone (it did: the round stayed "go"): it fails within its timeout
    naming rank 0, which already created the group."""
    reports = run("retry_after_go", tmp_path)
    tp0 = entries(reports[0], "tp")
    assert len(tp0) == 1 and tp0[0]["ok"]
    first, retry = entries(reports[1], "tp")
    assert not first["ok"] and "injected" in first["message"]
    assert not retry["ok"] and retry["error"] == "MembersMissingError", retry
    assert retry["missing"] == [0]
    assert TIMEOUT_S - 0.5 < retry["end"] - retry["start"] < TIMEOUT_S + SLACK_S, retry
    assert "rank 0 already created this group" in retry["message"]
    for rank in (2, 3):
        assert entries(reports[rank], "tp")[0]["ok"]


def test_a_rank_killed_while_others_wait_is_named_and_nobody_hangs(tmp_path: Path) -> None:
    """Rank 3 is SIGKILLed inside the barrier of a 4-rank group after taking its ticket:
    the others' creation fails (torch cannot finish it) naming rank 3, and so does their
    retry, each within its timeout plus the liveness check."""
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "killed_waiting", tmp_path, BOUND_S)
    assert codes[:3] == [0, 0, 0] and codes[3] == -9, (codes, logs)
    for rank in (0, 1, 2):
        first, retry = reports[rank]["log"]
        for attempt in (first, retry):
            assert not attempt["ok"] and attempt["error"] == "MembersMissingError", attempt
            assert attempt["missing"] == [VICTIM], attempt
            assert "rank 3 has not answered" in attempt["message"], attempt["message"]
        assert first["end"] - first["start"] < TIMEOUT_S + 4 + SLACK_S, first
        assert retry["end"] - retry["start"] < TIMEOUT_S + SLACK_S, retry


def test_ranks_with_different_default_timeouts_meet_and_leave_only_counters(
        tmp_path: Path) -> None:
    """Each rank's backend has its own default timeout and the dims none: the groups are
    created (their names never depend on a per-process setting).  After every rank closed
    its side, the store keeps three keys per barrier (2 dp + 2 tp): its ticket counter and
    its round's decision and wake-up, and nothing else (the documented constant)."""
    reports = run("timeouts", tmp_path)
    for rank, r in reports.items():
        assert all(e["ok"] for e in r["log"]), (rank, r["log"])
        assert r["works"]["tp"] == (1.0 if rank < 2 else 5.0)
    keys = reports[0]["keys"]
    names = {k.split("/")[2] for k in keys}
    assert len(names) == 4 and all(n.startswith("ml-") for n in names), keys
    assert sorted(keys) == sorted(f"meshlayout/{part}/{n}{suffix}" for n in names
                                  for part, suffix in (("t", ""), ("d", "/0"), ("o", "/0"))), keys
