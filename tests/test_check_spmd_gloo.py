"""The model against the real thing: corpus programs of classes 1 to 3 (``tests/
spmd_corpus.py``, those with ``gloo`` set) run on Gloo processes, where they must hang (the
ranks run into their timeout) or fail at once as ``check_spmd`` predicts, on exactly the
ranks its reasoning names; a fixed twin must pass.

Worlds of 2 to 4 processes on 127.0.0.1 (``tests/gloo_launch.py``), groups with a 3 s
timeout, every process killed at a hard bound; three worlds run side by side (their time
is mostly timeouts).  Class 2 runs in its Gloo form (a member holds the group already and skips
the creation among its members, which its peer enters) and class 3 in torch's Gloo form
(``new_group`` without local synchronization made by a subset: the ranks' group names
drift); their NCCL forms (a split over the device-bound world) need GPUs and several of
them, and are checked by the model only (``tests/test_check_spmd_calls.py``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from gloo_launch import launch
from spmd_corpus import CASES, TIMEOUT, Case, verdict

from backend import check_spmd

WORKER = Path(__file__).resolve().parent / "spmd_gloo_worker.py"

FAILING = {
    "shape on a pair": {0, 1},  # the members of the desynced group
    "send ring": {0, 1, 2},  # the ranks waiting on each other
    "crossed orders": {0, 1},
    "cache hit against creation": {0, 1},  # rank 1 at the creation, rank 0 in its call
    "new_group by a subset": {0, 1, 2},  # every rank's group of all three is named apart
}
"""The ranks that must fail on Gloo, as the model reasons about each case."""

SAMPLE = [c for c in CASES if c.gloo]


def _run(case: Case, out: Path) -> tuple[list[int | None], dict[int, Any], str]:
    return launch(WORKER, case.world, case.name, out, bound_s=90)


@pytest.mark.timeout(240)
def test_real_gloo_runs_fail_where_the_check_says(tmp_path: Path) -> None:
    assert {c.cls for c in SAMPLE} >= {0, 1, 2, 3}
    assert set(FAILING) == {c.name for c in SAMPLE if c.gloo != "ok"}
    reports = [check_spmd(c.world, c.program, **c.check) for c in SAMPLE]  # one world at a time
    with ThreadPoolExecutor(3) as pool:  # more would race torch's imports on 2 cores
        done = list(pool.map(lambda ic: _run(ic[1], tmp_path / f"case{ic[0]}"),
                             enumerate(SAMPLE)))
    wrong = []
    for case, report, (codes, runs, logs) in zip(SAMPLE, reports, done):
        got = verdict(report)
        failed = {r for r in range(case.world)
                  if runs.get(r, {}).get("outcome") != "ok" or codes[r] != 0}
        expected = set() if case.gloo == "ok" else FAILING[case.name]
        waited = max([runs[r]["seconds"] for r in failed if r in runs], default=0.0)
        if got != case.expect:
            wrong.append(f"{case.name}: the check says {sorted(got)}\n{report}")
        elif failed != expected:
            wrong.append(f"{case.name}: on Gloo ranks {sorted(failed)} failed, expected "
                         f"{sorted(expected)}: {runs}\n{logs[-3000:]}")
        elif case.gloo == "hang" and waited < 0.8 * TIMEOUT.total_seconds():
            wrong.append(f"{case.name}: predicted a hang, but no rank waited for its timeout: "
                         f"{runs}")
    assert not wrong, "\n\n".join(wrong)
