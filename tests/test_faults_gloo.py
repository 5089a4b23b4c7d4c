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
from fault_gloo_worker import CYCLES, LATE_S, SHORT_S, THREAD_ROUNDS, TIMEOUT_S, VICTIM

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


def test_abort_after_a_rank_died_creates_nothing_and_returns(tmp_path: Path) -> None:
    """torch 2.15's ``DeviceMesh.abort()`` on the facade: with a peer dead and one dim never
    asked for, abort ends the group that exists, creates none (creating dp would wait on the
    dead rank), and shutdown afterwards returns without error."""
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "abort", tmp_path, BOUND_S)
    assert codes == [0, 0, 0, 17], logs
    for rank in (0, 1, 2):
        r = reports[rank]
        assert r["before"] == (1.0 if rank < 2 else 5.0), (rank, r)
        assert r["created_before"] == ["tp"] and r["created_after"] == [], (rank, r)
        assert r["abort"] == "ok" and r["abort_s"] < 5.0, (rank, r)
        assert r["shutdown"] == "ok" and r["shutdown_s"] < 10, (rank, r)


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
    its side, the store keeps three keys per barrier (2 dp + 2 tp), in the job's namespace
    (``job.0`` without torchelastic): its ticket counter and its round's decision and
    wake-up, and besides them only each rank's claim of its rank (the documented
    constants)."""
    reports = run("timeouts", tmp_path)
    for rank, r in reports.items():
        assert all(e["ok"] for e in r["log"]), (rank, r["log"])
        assert r["works"]["tp"] == (1.0 if rank < 2 else 5.0)
    keys = reports[0]["keys"]
    claims = [f"meshlayout/job.0/p/{rank}" for rank in range(4)]
    names = {k.split("/")[3] for k in keys if k not in claims}
    assert len(names) == 4 and all(n.startswith("ml-") for n in names), keys
    assert sorted(keys) == sorted([*claims, *(
        f"meshlayout/job.0/{part}/{n}{suffix}" for n in names
        for part, suffix in (("t", ""), ("d", "/0"), ("o", "/0")))]), keys


# ---- round 4 (issue 29): retries, re-creation, threads, Ctrl-C, deaths at every step --------
@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The ``live`` world (nobody dies): every phase of it, one launch."""
    reports = run("live", tmp_path_factory.mktemp("live"))
    return reports


def _group_sum(rank: int, dim: str) -> float:
    return float(sum(_group(rank, dim))) if dim != "all" else 6.0


def test_a_group_re_created_under_the_same_name_after_shutdown_works_every_time(
        live: dict[int, dict[str, Any]]) -> None:
    """CYCLES times a new backend over the same store creates tp and the 4-rank group, sums,
    and shuts down: every creation succeeds and sums right (stale keys of an earlier
    creation under the same torch name broke some)."""
    for rank, r in live.items():
        assert len(r["cycles"]) == CYCLES
        for i, cycle in enumerate(r["cycles"]):
            for dim in ("tp", "all"):
                assert cycle[dim]["ok"], (rank, i, cycle[dim])
                assert cycle[dim + "_sum"] == _group_sum(rank, dim), (rank, i, cycle)


def test_a_retry_after_a_failure_inside_torchs_creation_meets_its_peers_and_succeeds(
        live: dict[int, dict[str, Any]]) -> None:
    """Ranks 1 and 3 fail inside torch's creation of tp; their partners fail there at their
    timeout.  Every rank tries again (up to 4 times): the retries meet and create a group
    that works, under a torch name of its own (not the failed attempt's)."""
    for rank, r in live.items():
        attempts = r["retry"]
        assert attempts[-1]["ok"], (rank, attempts)
        assert len(attempts) <= 3, (rank, attempts)  # the first retry that all make
        assert r["retry_sum"] == _group_sum(rank, "tp"), (rank, r["retry_sum"])
        assert not attempts[0]["ok"]
        assert attempts[0]["end"] - attempts[0]["start"] < SHORT_S + 4 + SLACK_S, attempts[0]


def test_threads_asking_different_groups_in_opposite_orders_never_deadlock(
        live: dict[int, dict[str, Any]]) -> None:
    """THREAD_ROUNDS times, dp, tp and the 4-rank group asked at once from three threads, in
    opposite orders on odd ranks: every group is created on every member, promptly, and
    sums right (a lock held across torch's creation, and torch's one store connection per
    process, deadlocked processes; some got a group their peer did not)."""
    for rank, r in live.items():
        assert len(r["threads"]) == THREAD_ROUNDS
        for i, got in enumerate(r["threads"]):
            for dim in ("dp", "tp", "all"):
                assert got[dim]["ok"], (rank, i, dim, got[dim])
                assert got[dim]["end"] - got[dim]["start"] < SHORT_S, (rank, i, dim, got[dim])
                assert got["sums"][dim] == _group_sum(rank, dim), (rank, i, dim, got["sums"])


def test_ctrl_c_during_the_wait_acts_at_once_and_leaves_the_others_a_true_message(
        live: dict[int, dict[str, Any]]) -> None:
    """Ranks 0, 1, 2 wait for rank 3 (which never asks); rank 0 gets a SIGINT 0.5 s in.  It
    raises KeyboardInterrupt at once (not at its deadline), and ranks 1 and 2 fail at once
    naming both rank 0 (interrupted) and rank 3 (absent)."""
    mine = live[0]["ctrl_c"]
    assert mine["error"] == "KeyboardInterrupt", mine
    assert mine["end"] - mine["start"] < 0.5 + 0.7, mine
    for rank in (1, 2):
        got = live[rank]["ctrl_c"]
        assert got["error"] == "MembersMissingError", (rank, got)
        assert got["missing"] == [0, VICTIM], (rank, got)
        assert got["end"] - got["start"] < 0.5 + 1.2, (rank, got)
        assert "rank 0 was interrupted" in got["message"], got["message"]
        assert "rank 3 is not creating any group" in got["message"], got["message"]


def test_an_interrupt_while_taking_a_ticket_never_lets_a_round_pass_without_a_member(
        live: dict[int, dict[str, Any]]) -> None:
    """Rank 0 is interrupted as it takes its ticket (counted, value lost) and asks again at
    once; the others come 1 s later.  The round goes only with all four: every rank gets
    the group and it sums right (the retry's second ticket let three ranks pass)."""
    first = live[0]["ticket"][0]
    assert first["error"] == "KeyboardInterrupt", first
    for rank, r in live.items():
        assert r["ticket"][-1]["ok"], (rank, r["ticket"])
        assert r["ticket_sum"] == 6.0, (rank, r["ticket_sum"])


def test_a_rank_killed_before_or_after_its_commit_is_named_within_its_bound(
        tmp_path: Path) -> None:
    """Two pairs at once: rank 1 is killed holding its round's last ticket, before the
    commit; rank 3 right after its commit, before it wakes its partner.  Rank 0 fails naming
    rank 1 at its timeout plus the slack for a commit in flight (before: after twice its
    timeout, naming nobody); rank 2 fails naming rank 3 as a committer that stopped, at its
    timeout plus the slack, without entering torch's creation (before: inside it, after
    about 2.6 timeouts).  Each one's retry names the dead rank within its timeout."""
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "kills", tmp_path, BOUND_S)
    assert codes[0] == codes[2] == 0 and codes[1] == codes[3] == -9, (codes, logs)
    bounds = {0: SHORT_S + 1.0, 2: SHORT_S + 1.0}
    for rank, dead in ((0, 1), (2, 3)):
        first, retry = reports[rank]["log"]
        for attempt, bound in ((first, bounds[rank]), (retry, SHORT_S)):
            assert not attempt["ok"] and attempt["error"] == "MembersMissingError", attempt
            assert attempt["missing"] == [dead], (rank, attempt)
            assert attempt["end"] - attempt["start"] < bound + SLACK_S, (rank, attempt)
        words = ("took a ticket of this round and came no further" if rank == 0 else
                 "committed this round and stopped before waking the others")
        assert f"rank {dead} {words}" in first["message"], first["message"]
