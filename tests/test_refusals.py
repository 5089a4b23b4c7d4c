"""Bad input is refused before work proportional to it (issue 30): every case of
``tests/refusals.py`` (the ``meshlayout`` command and the library) refuses within a fixed
bound on Python steps and memory held, whatever the size it was handed.

The bound is deterministic (``work_bound.bounded``: trace events, and at most 100 MB held,
the issue's bound on the validation's own allocations), so the test does not flake on a busy
machine; the seconds (the issue's 2 s) are ``bench/time_bounds.py``'s ``hostile refuse``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from refusals import CASES
from work_bound import bounded

EVENTS = 100_000  # the command's own parsing and explanation take up to ~30,000
HELD = 100 << 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_input_is_refused_within_a_fixed_bound(tmp_path: Path, name: str) -> None:
    if "/dev/zero" in name and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    refuse = CASES[name](tmp_path)
    with bounded(events=EVENTS, peak_bytes=HELD):
        refuse()


def test_the_bound_catches_work_proportional_to_the_input() -> None:
    """The premise: listing the ranks of one 2**20-device host in Python (what
    ``--fail-host`` did) breaks the bound."""
    with pytest.raises(AssertionError, match="enumerates"), \
            bounded(events=EVENTS, peak_bytes=HELD):
        [r for r in range(1 << 20)]
