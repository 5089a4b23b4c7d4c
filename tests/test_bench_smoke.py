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
                                    "placement_scale.py", "check_spmd.py", "reshard.py",
                                    "recover.py"])
def test_benchmark_runs_at_its_smallest_size(script: str) -> None:
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ours" in out.stdout  # the comparison table was printed


@pytest.mark.timeout(400)
def test_the_creation_soak_runs_a_short_run() -> None:
    """bench/creation_soak.py (random faults, threads, re-creations and retries on Gloo
    processes) at its smallest size: every outcome created or a typed failure naming the
    right rank, no hang."""
    out = subprocess.run([sys.executable, str(BENCH / "creation_soak.py"), "--smoke"],
                         capture_output=True, text=True, timeout=380, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 random trials on 8 processes" in out.stdout and "0 hangs, 0 wrong, 0 unnamed" in \
        out.stdout, out.stdout
    assert "1 runs of 8 processes x 3 threads" in out.stdout and "0 failed" in out.stdout
    assert "all outcomes created or named" in out.stdout


@pytest.mark.timeout(900)
def test_the_recovery_measurement_runs_at_its_smallest_size() -> None:
    """bench/recover_gloo.py (Costs calibrated on this machine, then one failure recovered
    on 8 Gloo processes the two ways no Gloo test runs, and a restart from DCP) at its
    smallest size: it prints the calibration, a row per way, and the restart beside the
    fastest way."""
    out = subprocess.run([sys.executable, str(BENCH / "recover_gloo.py"), "--smoke"],
                         capture_output=True, text=True, timeout=880, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "calibrated on this machine" in out.stdout
    ways = [line[7:35].strip() for line in out.stdout.splitlines()
            if line.startswith("     3 ")]  # the victim's rows: its way, 28 wide
    assert sorted(ways) == ["drop 'tp'", "evict hosts [1] onto spares"], out.stdout
    assert "restart from the DCP checkpoint" in out.stdout, out.stdout


@pytest.mark.timeout(600)
def test_the_reshard_totals_bench_runs_at_its_smallest_size() -> None:
    """bench/reshard_totals.py at its smallest size: the reads table and the memory table."""
    out = subprocess.run([sys.executable, str(BENCH / "reshard_totals.py"), "--smoke"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all of them, for every tensor" in out.stdout and "fsdp experts w1" in out.stdout
