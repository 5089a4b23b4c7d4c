"""Separately converted slices compose in torch: TP + FSDP2 on 4 Gloo processes.

``tests/interop_gloo_worker.py`` converts ``mesh["tp"]`` and ``mesh["dp"]`` of a (dp, tp) =
(2, 2) mesh with two separate ``to_torch()`` calls, then trains an MLP with TP on one and
FSDP2 on the other (FSDP2 ``_concatenate``s them, which torch only allows for meshes of one
root); each rank also trains the same MLP in one process on the whole batch.  Expected values
come from that single-process reference and from the mesh written out by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest

WORKER = Path(__file__).with_name("interop_gloo_worker.py")
BOUND_S = 120  # normally ~15 s

pytestmark = [
    pytest.mark.timeout(BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    codes, got, logs = gloo_launch.launch(WORKER, 4, "train", tmp_path_factory.mktemp("tp"),
                                          BOUND_S)
    assert codes == [0] * 4, f"exit codes {codes}\n{logs}"
    assert sorted(got) == [0, 1, 2, 3], logs
    return got


def test_tp_plus_fsdp2_on_separately_converted_slices_matches_one_process(
        reports: dict[int, dict[str, Any]]) -> None:
    for rank, r in reports.items():
        assert r["max_diff"], rank
        worst = max(r["max_diff"].values())
        assert worst < 1e-5, (rank, r["max_diff"])
        assert r["ref_losses"][-1] < r["ref_losses"][0]  # it trained
        # FSDP2 placed the TP parameters on the concatenation of the two separate slices
        assert set(map(tuple, filter(None, r["meshes"].values()))) == {("dp", "tp")}


def test_separately_converted_slices_share_one_torch_root(
        reports: dict[int, dict[str, Any]]) -> None:
    for r in reports.values():
        assert r["same_root"] and r["converted_twice_is_same"]
        assert r["concat_mesh"] == [[0, 1], [2, 3]]


def test_with_mesh_lets_dtensor_find_the_mesh(reports: dict[int, dict[str, Any]]) -> None:
    for rank, r in reports.items():
        tp_group = [0, 1] if rank < 2 else [2, 3]
        assert r["with_mesh_mesh"] == tp_group
        index = tp_group.index(rank)
        assert r["with_mesh_local"] == [[4.0 * index, 4.0 * index + 1],
                                        [4.0 * index + 2, 4.0 * index + 3]]
