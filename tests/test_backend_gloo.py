"""GlooBackend with real processes on loopback: groups, collectives, DTensor, faults.

Each scenario launches its world once (``tests/backend_gloo_worker.py``, one process per
rank, torchrun's environment, a free port picked at run time) under a hard time bound;
the workers write what they observed and the tests below compare it with groups derived
by brute force (:mod:`backend_oracle`), never with the code under test.

Launches: worlds of 4 and 8 for the checks, and two worlds of 4 for the faults.

A torch behaviour shapes one case of the worker: with ``use_local_synchronization=True``
torch names a group by hashing its ranks *and this process's count of groups so far*
(``_hash_ranks_to_str``), and Gloo rendezvouses under that name.  A view over part of the
world creates groups on its members only, so without care the counts drift apart and a
later group spanning both sides waits for a rendezvous that never comes.  The backend names
every group from its family and members instead (``backend._c10d._rendezvous.group_name``): the
``after_sub`` case creates new whole-world groups after such a view, and ranks outside the
view create nothing (they get NotAMemberError when they ask).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gloo_launch
import pytest
from backend_gloo_worker import (
    DTENSOR,
    FAULT_DEFAULT_TIMEOUT_S,
    FAULT_TIMEOUT_S,
    VICTIM,
    VICTIM_EXIT,
    cases,
)
from backend_oracle import BruteMesh, build

WORKER = Path(__file__).with_name("backend_gloo_worker.py")
CHECK_BOUND_S = 120  # hard bound on one launch (normally ~12 s for 4 ranks, ~20 s for 8)
FAULT_BOUND_S = 60  # normally ~9 s (exit) and ~14 s (stall)

pytestmark = [
    pytest.mark.timeout(CHECK_BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


# ---- launching a world --------------------------------------------------------------------

def launch(world: int, mode: str, out: Path, bound_s: float
           ) -> tuple[list[int | None], dict[int, dict[str, Any]], str]:
    """:func:`gloo_launch.launch` of this file's worker."""
    return gloo_launch.launch(WORKER, world, mode, out, bound_s)


# ---- the checks: worlds of 4 and 8 --------------------------------------------------------

@pytest.fixture(scope="module", params=[4, 8], ids=["world4", "world8"])
def check_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[int, dict[int, dict[str, Any]]]]:
    world: int = request.param
    codes, reports, logs = launch(world, "check", tmp_path_factory.mktemp(f"gloo{world}"),
                                  CHECK_BOUND_S)
    assert codes == [0] * world, f"exit codes {codes}\n{logs}"
    assert sorted(reports) == list(range(world)), f"reports from ranks {sorted(reports)}"
    yield world, reports


def _expected(world: int) -> dict[str, tuple[Any, BruteMesh, dict[str, dict[str, Any]]]]:
    out = {}
    for label, start, ops, overrides in cases(world):
        view, brute = build(start, ops)
        out[label] = (view, brute, overrides)
    return out


def _observations(world: int, reports: dict[int, dict[str, Any]]
                  ) -> Iterator[tuple[int, str, str, dict[str, Any], BruteMesh, Any]]:
    """``(rank, case, dim, observed, brute, view)`` for every rank in every case's universe."""
    for label, (view, brute, _) in _expected(world).items():
        for rank in sorted(brute.ranks):
            got = reports[rank]["cases"][label]
            assert got is not None, f"rank {rank} skipped {label} but is in its universe"
            for dim in brute.names:
                yield rank, label, dim, got[dim], brute, view


def test_the_checks_cover_what_the_issue_asks(check_run: tuple[int, Any]) -> None:
    """Transposed meshes, non-contiguous flattened dims, unflattened worlds, explicit maps."""
    world, _ = check_run
    exp = _expected(world)
    assert {"base", "transposed", "flat_tp_dp", "unflat", "explicit_t", "sub"} <= set(exp)
    flat = exp["flat_tp_dp"][1]
    assert any(g != tuple(sorted(g)) for r in flat.ranks for g in [flat.group(r, "tp_dp")])
    if world == 8:
        g = exp["flat_dp_tp"][1].group(0, "dp_tp")
        assert g == (0, 1, 4, 5)  # ascending but not contiguous


def test_all_reduce_of_the_rank_sums_the_brute_force_group(check_run: tuple[int, Any]) -> None:
    world, reports = check_run
    for rank, label, dim, got, brute, view in _observations(world, reports):
        assert got["all_reduce"] == sum(brute.group(rank, dim)) == sum(view.group(rank, dim)), (
            rank, label, dim)


def test_all_gather_returns_the_ranks_in_coordinate_order(check_run: tuple[int, Any]) -> None:
    world, reports = check_run
    for rank, label, dim, got, brute, view in _observations(world, reports):
        expected = list(brute.group(rank, dim))
        assert got["all_gather"] == expected == list(view.group(rank, dim)), (rank, label, dim)


def test_torch_group_ranks_size_and_rank_follow_the_mesh(check_run: tuple[int, Any]) -> None:
    world, reports = check_run
    for rank, label, dim, got, brute, _ in _observations(world, reports):
        expected = list(brute.group(rank, dim))
        assert got["pg"] == expected, (rank, label, dim)
        assert got["size"] == len(expected)
        assert got["rank"] == expected.index(rank) == brute.coord(rank)[
            brute.names.index(dim)], (rank, label, dim)


def test_ranks_outside_a_views_universe_get_not_in_mesh_error(check_run: tuple[int, Any]
                                                              ) -> None:
    world, reports = check_run
    for label, (_, brute, _) in _expected(world).items():
        outside = set(range(world)) - brute.ranks
        for rank in outside:
            assert reports[rank]["cases"][label] is None, (rank, label)
            assert reports[rank]["outside"][label] == ["NotAMemberError"] * len(brute.names)
    assert any(set(range(world)) - b.ranks for _, b, _ in _expected(world).values())


def test_groups_created_after_a_partial_view_work_on_every_rank(check_run: tuple[int, Any]
                                                                ) -> None:
    """The case after the view over part of the world ran its collectives on all ranks."""
    world, reports = check_run
    labels = list(_expected(world))
    assert labels.index("after_sub") > labels.index("sub")
    assert all(reports[r]["cases"]["after_sub"] for r in range(world))


def _family_keys(world: int) -> dict[tuple[str, str], Any]:
    """``(case, dim) -> (every group of the dim in order, options)``, from the brute force."""
    keys = {}
    for label, (_, brute, overrides) in _expected(world).items():
        for dim in brute.names:
            family = tuple(sorted({brute.group(r, dim) for r in brute.ranks}))
            keys[label, dim] = (family, json.dumps(overrides.get(dim, {}), sort_keys=True))
    return keys


def test_dims_share_a_communicator_exactly_when_groups_and_options_match(
        check_run: tuple[int, Any]) -> None:
    """Same family of groups and same options: one torch group; anything else: another.
    (Torch's group names identify the communicator on a rank.)"""
    world, reports = check_run
    keys = _family_keys(world)
    for rank in range(world):
        seen = [(label, dim, got["name"])
                for label, per_dim in reports[rank]["cases"].items() if per_dim
                for dim, got in per_dim.items()]
        for la, da, na in seen:
            for lb, db, nb in seen:
                assert (na == nb) == (keys[la, da] == keys[lb, db]), (rank, la, da, lb, db)
    if world == 8:  # the two unflattens of one world: (dp, cp, tp) and (dp, ep, ep_tp)
        cases_of_0 = reports[0]["cases"]
        assert cases_of_0["base"]["tp"]["name"] == cases_of_0["unflat_moe"]["ep_tp"]["name"]
        assert cases_of_0["base"]["tp"]["name"] != cases_of_0["tagged"]["tp"]["name"]


def test_each_family_is_created_once_per_rank(check_run: tuple[int, Any]) -> None:
    """The backend's creation count after each case is the number of distinct (family,
    options) this rank has asked for so far among views it is in (outside one, nothing)."""
    world, reports = check_run
    keys = _family_keys(world)
    for rank in range(world):
        seen: set[Any] = set()
        for label, (_, brute, _) in _expected(world).items():
            if rank in brute.ranks:
                seen |= {keys[label, dim] for dim in brute.names}
            assert reports[rank]["created"][label] == len(seen), (rank, label)


def test_only_a_whole_world_natural_dim_with_default_options_reuses_the_default_group(
        check_run: tuple[int, Any]) -> None:
    world, reports = check_run
    natural = list(range(world))
    reused = 0
    for rank, label, dim, got, brute, _ in _observations(world, reports):
        overridden = dim in _expected(world)[label][2]
        expect = list(brute.group(rank, dim)) == natural and not overridden
        assert got["is_world"] == expect, (rank, label, dim)
        reused += expect
    assert reused > 0


def test_to_torch_works_with_dtensor(check_run: tuple[int, Any]) -> None:
    """``distribute_tensor(x, mesh.to_torch(), placements).full_tensor() == x`` on every rank,
    for an 8 x 12 tensor: Shard(0) on the first mesh dim, Shard(1) on the last."""
    world, reports = check_run
    exp = _expected(world)
    for rank in range(world):
        for label in DTENSOR:
            got = reports[rank]["dtensor"][label]
            shape = exp[label][1].shape
            local = [8 // shape[0], 12 // shape[-1] if len(shape) > 1 else 12]
            assert got == {"equal": True, "local": local}, (rank, label)


def test_shutdown_completes_and_destroys_the_default_group(check_run: tuple[int, Any]) -> None:
    world, reports = check_run
    for rank in range(world):
        assert reports[rank]["shutdown_s"] < 10, rank
        assert reports[rank]["initialized_after_shutdown"] is False, rank


# ---- faults -------------------------------------------------------------------------------

@pytest.mark.timeout(FAULT_BOUND_S + 30)
def test_when_a_rank_exits_every_other_rank_gets_an_error_not_a_hang(tmp_path: Path) -> None:
    codes, reports, logs = launch(4, "exit", tmp_path, FAULT_BOUND_S)
    assert codes[VICTIM] == VICTIM_EXIT, f"exit codes {codes}\n{logs}"
    survivors = [r for r in range(4) if r != VICTIM]
    assert [codes[r] for r in survivors] == [0, 0, 0], f"exit codes {codes}\n{logs}"
    for r in survivors:
        got = reports[r]
        assert got["before"] == 4.0  # the collective before the fault saw every rank
        assert got["error"], f"rank {r} finished a collective with a dead peer: {got}"
        assert got["elapsed_s"] < FAULT_TIMEOUT_S + 5, got
        assert got["shutdown_done"] is True, f"rank {r}: shutdown hung after the fault"


@pytest.mark.timeout(FAULT_BOUND_S + 30)
def test_when_a_rank_stalls_the_others_time_out_within_the_dims_timeout(tmp_path: Path) -> None:
    """The group was created with GroupOptions(timeout=5 s) while the default group has 60 s:
    the survivors fail after about 5 s, so the per-dim timeout reached the group."""
    codes, reports, logs = launch(4, "stall", tmp_path, FAULT_BOUND_S)
    assert codes[VICTIM] == VICTIM_EXIT, f"exit codes {codes}\n{logs}"
    for r in (r for r in range(4) if r != VICTIM):
        got = reports[r]
        assert codes[r] == 0 and got["error"], (r, codes, got)
        assert FAULT_TIMEOUT_S * 0.8 <= got["elapsed_s"] < FAULT_TIMEOUT_S + 5, got
        assert got["elapsed_s"] < FAULT_DEFAULT_TIMEOUT_S / 2
        assert got["shutdown_done"] is True, f"rank {r}: shutdown hung after the timeout"
