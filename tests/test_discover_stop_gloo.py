"""Discovery on real processes when a rank stops right after publishing (issue 44, item 2):
4 Gloo processes on loopback (``tests/discover_stop_worker.py``), timeout 4 s, rank 3
frozen with ``SIGSTOP`` (and woken once the others have their outcome) or killed with
``SIGKILL``.  Before, ranks 0-2 failed at 14 s naming nobody and the frozen rank, resumed,
adopted the machine; now every rank ends with one error naming rank 3, the others at 4 s.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import gloo_launch
import pytest
from discover_stop_worker import STOPPED, T_S

from backend._c10d._gather import SLACK_S

WORKER = Path(__file__).with_name("discover_stop_worker.py")
BOUND_S = 300  # start-up under load; normally ~15 s
pytestmark = [
    pytest.mark.timeout(BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds and signals need "
                                                       "POSIX"),
]
NAMED = f"rank {STOPPED} did not check the answer within {T_S:g} s"


def _others_fail_naming_rank_3_at_their_timeout(reports: dict[int, dict], logs: str) -> str:
    outcomes = {reports[r]["outcome"] for r in (0, 1, 2)}
    assert len(outcomes) == 1, (outcomes, logs)
    (only,) = outcomes
    assert only.startswith("DiscoveryError: ") and NAMED in only, only
    took = [reports[r]["took_s"] for r in (0, 1, 2)]
    assert max(took) >= T_S and max(took) <= T_S + SLACK_S, took  # the first at T wrote it
    return only


def test_a_rank_frozen_after_publishing_is_named_and_fails_alike_when_woken(
        tmp_path: Path) -> None:
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "freeze", tmp_path, BOUND_S)
    assert codes == [0] * 4 and sorted(reports) == [0, 1, 2, 3], logs
    error = _others_fail_naming_rank_3_at_their_timeout(reports, logs)
    late = reports[STOPPED]
    assert late["resumed_at"] >= max(reports[r]["ended_at"] for r in (0, 1, 2)), reports
    assert late["outcome"] == error, late


def test_a_rank_killed_after_publishing_is_named_by_every_other(tmp_path: Path) -> None:
    codes, reports, logs = gloo_launch.launch(WORKER, 4, "kill", tmp_path, BOUND_S)
    assert codes[:3] == [0] * 3 and codes[STOPPED] == -signal.SIGKILL, (codes, logs)
    assert sorted(reports) == [0, 1, 2], logs
    _others_fail_naming_rank_3_at_their_timeout(reports, logs)
