"""Discovering the machine with real processes: a Gloo world of 8 on loopback pretends to run
on 2 hosts, on 4 hosts in 2 NVLink domains, on hosts of 3 and 5 ranks, with ranks dealt
round-robin, and in Slurm blocks; every rank must get the same topology, the one built here
by hand, and a plan that does not fit must fail on every rank before any group exists.

One launch (``tests/topology_gloo_worker.py``, one process per rank, a free port picked at
run time) under a hard bound.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest

from mesh import Topology

WORKER = Path(__file__).with_name("topology_gloo_worker.py")
BOUND_S = 120  # normally ~10 s

pytestmark = [
    pytest.mark.timeout(BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    codes, found, logs = gloo_launch.launch(WORKER, 8, "discover",
                                            tmp_path_factory.mktemp("topology"), BOUND_S)
    assert codes == [0] * 8, logs
    assert sorted(found) == list(range(8)), logs
    return found


def _racks(hosts: list[str], domains: list[int]) -> Topology:
    return Topology.from_hosts(hosts, domains=domains)


EXPECTED = {
    "2 hosts of 4": Topology.from_hosts(["node0"] * 4 + ["node1"] * 4),
    "4 hosts of 2 in 2 NVLink domains": Topology.from_hosts(
        [f"node{r // 2}" for r in range(8)], hosts_per_domain=2),
    "hosts of 3 and 5": Topology.from_hosts(["a"] * 3 + ["b"] * 5),
    "ranks dealt round-robin to 2 hosts": Topology.from_hosts([f"n{r % 2}" for r in range(8)]),
    "Slurm blocks of 2 hosts": Topology.from_hosts([f"gpu{r // 2:02d}" for r in range(8)],
                                                   hosts_per_domain=2),
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_every_rank_discovers_the_machine_it_pretends_to_run_on(reports, case) -> None:
    expected = EXPECTED[case]
    for rank, report in reports.items():
        found = Topology.from_dict(report["found"][case])
        assert found == expected, (rank, report["found"][case])
        assert [found.host_name(h) for h in range(found.num_hosts)] == \
            [expected.host_name(h) for h in range(expected.num_hosts)]


def test_ranks_dealt_round_robin_keep_their_devices(reports) -> None:
    found = Topology.from_dict(reports[0]["found"]["ranks dealt round-robin to 2 hosts"])
    assert [found.device(r) for r in range(8)] == [r // 2 for r in range(8)]
    assert not found.in_order


def test_two_ranks_on_one_device_fail_every_rank(reports) -> None:
    for report in reports.values():
        assert "two ranks claim one device: rank 0 and rank 1" in report["one device"]


def test_the_real_machine_is_one_host_of_8_named_by_its_hostname(reports) -> None:
    real = Topology.from_dict(reports[3]["real"])
    assert real == Topology(8, 8) and real.host_name(0) == socket.gethostname()
    assert all(r["real"] == reports[0]["real"] and r["real cached"] for r in reports.values())


def test_a_rank_makes_a_constant_number_of_store_calls(reports) -> None:
    """On the real TCPStore: 11 calls (compare_set, check, wait, get, add; wait, get, set,
    add; wait, get), one more for the first rank of a run (append), two more for the last
    to arrive (get, compare_set), one more for the last to check (compare_set)."""
    for rank, report in reports.items():
        calls = report["calls"]
        assert sum(calls.values()) <= 15 and calls["add"] == 2, (rank, calls)
        assert calls["check"] == 1 and calls["set"] == 1, (rank, calls)
        assert calls.get("append", 0) == (1 if rank in (0, 4) else 0), (rank, calls)


@pytest.mark.parametrize(("case", "words"), [
    # issue 44, item 3: every rank's add meets the non-number; all name the key
    ("junk counter", r"/n' is not a counter"),
    # there before any rank counted itself: every rank refuses it (issue 44)
    ("forged answer", r"/answer' held a value before every rank had counted itself"),
    ("junk run record", r"/runs, line 1': is not JSON"),
    # 3 planted, 8 adds: the ranks reading 9, 10 and 11 each fault, and the rank reading 8
    # answers from the 5 records there: whichever sets the verdict first names its own count,
    # or (seen under load, when a rank checking that short answer is first) itself misplaced
    ("stale counter", r"/n' counted (9|10|11) of 8 ranks|the answer puts rank \d on host "
                      r"'node\d', but it runs on 'node\d'"),
])
def test_a_value_planted_before_the_call_fails_every_rank_alike(reports, case, words) -> None:
    """Issue 34, item 1 on real processes: a forged but valid machine planted as the answer
    was adopted by some ranks and not others; now all 8 end with one typed error."""
    outcomes = {r["planted"][case] for r in reports.values()}
    assert len(outcomes) == 1, outcomes
    (only,) = outcomes
    assert only.startswith("DiscoveryError: ") and re.search(words, only), only


def test_a_junk_counter_leaves_the_default_store_working_for_torch_and_discovery(
        reports) -> None:
    """Issue 44, item 3 on real processes: one 4-byte plant at discovery's counter closed
    every rank's default store connection (TCPStore's server drops a client whose ``add``
    meets a non-number): the next discovery, ``new_group`` and the facade's groups failed
    with "Broken pipe".  Discovery runs on a connection of its own, replaced when it may be
    closed: after the plant, two more discoveries, torch's ``new_group`` and a bound mesh's
    groups work on every rank."""
    for rank, report in reports.items():
        assert "is not a counter" in report["planted"]["junk counter"], rank
        assert "Broken pipe" not in str(report["planted"]), rank
        assert report["new_group after plants"] == 8 and report["tp sum"] == (
            6 if rank < 4 else 22) and report["real bind"] == "ok", rank


def test_a_plan_that_does_not_fit_fails_on_every_rank_before_any_group(reports) -> None:
    for report in reports.values():
        e = report["expectation"]
        assert e["dim"] == "tp" and e["level"] == "host" and e["group"] == list(range(8))
        assert e["spans"] == ["node0", "node1"]
        assert "spans hosts node0, node1" in e["message"]
        assert report["created before the error"] == 0


def test_a_plan_that_fits_binds_and_runs(reports) -> None:
    assert [reports[r]["tp sum"] for r in range(8)] == [6] * 4 + [22] * 4
    assert all(r["real bind"] == "ok" for r in reports.values())
