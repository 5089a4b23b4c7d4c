"""Each benchmark script runs once at its smallest size (a smoke test, not a timing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", ["layout_ops.py", "plan_scale.py", "communicators.py",
                                    "materialize.py", "hot_path.py", "explain.py",
                                    "creation_scale.py", "time_bounds.py", "compare.py",
                                    "compile.py", "rebind_scale.py", "discover_scale.py",
                                    "placement_scale.py"])
def test_benchmark_runs_at_its_smallest_size(script: str) -> None:
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ours" in out.stdout  # the comparison table was printed
