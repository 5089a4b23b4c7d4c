"""Broken Gloo groups re-formed in place on a rebind (torch >= 2.14's ``_reconfigure``), and
said where they cannot be: group rank = mesh coordinate in every reconfigured group, the
right sums on every new group, no hang.

Eight real Gloo processes, the store in the launcher (``recover_gloo_worker.py``, as
``test_recover_gloo.py``).  The expected groups, sums and coordinates come from NumPy rank
tensors in the worker; here, what the backend says it did (``backend.reformed``) is checked
against what torch reports of each group (its global ranks, this rank's group rank).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_recover_gloo import _run as launched


def _reconfigures() -> bool:
    from backend._c10d._torch_private import RECONFIGURES

    return RECONFIGURES


NO_RECONFIGURE = "torch < 2.14 has no Gloo reconfigure (torch.distributed._reconfigure)"


def _run(tmp_path: Path, plan: str, victims: list[int], way: str
         ) -> dict[int, dict[str, Any]]:
    """The recovery suite's launch, the victims killed at the second kill point."""
    return launched(tmp_path, plan, victims, way, kill_at=1)


def _coordinates_kept(rep: dict[str, Any]) -> None:
    """Every new group is this rank's group of the new view, in its order, and this rank's
    group rank is its mesh coordinate; the sums are right."""
    assert rep["sums"] == rep["expected"], rep
    for n, ranks in rep["ranks"].items():
        assert ranks == rep["wanted"][n], (n, rep)
        assert rep["group_rank"][n] == rep["coordinate"][n] == ranks.index(
            int(rep["wanted"][n][rep["coordinate"][n]])), (n, rep)


@pytest.mark.skipif(not _reconfigures(), reason=NO_RECONFIGURE)
@pytest.mark.timeout(150)
def test_a_dp_drop_reconfigures_the_dp_groups_in_place(tmp_path: Path) -> None:
    """(dp=4, tp=2), rank 5 killed, its dp slice (4, 5) dropped: each dp group loses one
    member and keeps the others' order, so it is reconfigured, not created; tp is kept."""
    reports = _run(tmp_path, "2d", [5], "drop")
    for rank in (0, 1, 2, 3, 6, 7):
        rep = reports[rank]
        _coordinates_kept(rep)
        assert rep["reconfigured"] == ["dp"] and rep["kept"] == ["tp"], rep
        assert rep["created"] == 0, rep
        dp = [r for r in rep["reformed"] if r["how"] == "reconfigured"]
        assert len(dp) == 1 and dp[0]["after"] == rep["wanted"]["dp"], rep
        assert dp[0]["before"] == [rank % 2 + 2 * i for i in range(4)], rep
    for rank in (4,):  # the healthy rank of the dropped slice reconfigures nothing
        assert all(r["how"] == "ended" for r in reports[rank]["reformed"]), reports[rank]


@pytest.mark.timeout(150)
def test_a_group_a_spare_joins_is_created_anew_and_says_why(tmp_path: Path) -> None:
    """(dp=3, tp=2) over 0..5, rank 3 killed, spare 6 in its place: the dp group (1, 3, 5)
    becomes (1, 6, 5), which brings a rank that was not a member when it was created; Gloo
    reconfigures only among members, so it is created anew (on torch 2.13: no reconfigure
    at all), and the backend says so."""
    reports = _run(tmp_path, "spare", [3], "substitute")
    for rank in (1, 5):
        rep = reports[rank]
        _coordinates_kept(rep)
        assert rep["reconfigured"] == [] and "dp" not in rep["kept"], rep
        (dp,) = [r for r in rep["reformed"] if r["before"] == [1, 3, 5]]
        assert dp["how"] == "ended" and dp["after"] == [1, 5], dp
        want = "a spare" if _reconfigures() else "has no reconfigure"
        assert want in dp["why"], dp
    for rank in (0, 2, 4, 6):
        _coordinates_kept(reports[rank])
