"""One import, for real: a TP + FSDP2 + DCP training script in which only the
``init_device_mesh`` import changes runs on 4 Gloo processes and matches torch's own run
bit for bit (losses and parameters), and its DCP checkpoint round-trips.

Both runs are ``tests/one_import_worker.py`` (torch's ``init_device_mesh``, then ours).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gloo_launch
import pytest

WORKER = Path(__file__).with_name("one_import_worker.py")
BOUND_S = 180

pytestmark = [
    pytest.mark.timeout(2 * BOUND_S + 60),
    pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[int, Any], dict[int, Any]]:
    return gloo_launch.torch_then_ours(WORKER, 4, BOUND_S, tmp_path_factory)


def test_the_script_with_only_the_import_changed_matches_torch_bit_for_bit(
        runs: tuple[dict[int, Any], dict[int, Any]]) -> None:
    theirs, ours = runs
    for rank in range(4):
        assert ours[rank]["mesh_type"] == "backend._facade._torch_facade"
        assert theirs[rank]["mesh_type"] == "torch.distributed.device_mesh"
        assert ours[rank]["losses"] == theirs[rank]["losses"], rank
        assert ours[rank]["trained"] == theirs[rank]["trained"], rank
    first = [float.fromhex(v) for v in theirs[0]["losses"]]
    assert first[-1] < first[0]  # it trained


def test_the_checkpoint_round_trips(runs: tuple[dict[int, Any], dict[int, Any]]) -> None:
    for reports in runs:
        for rank, r in reports.items():
            assert r["loaded"] == r["trained"], rank
