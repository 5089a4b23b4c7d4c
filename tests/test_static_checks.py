"""The source is clean under ``ruff`` and ``mypy --strict`` (the issues' done-criteria)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


def test_ruff_is_clean_on_sources_tests_and_benchmarks() -> None:
    out = _run("ruff", "check", "src", "tests", "property_tests", "bench", "examples", "tools")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("package", ["layout", "mesh", "backend"])
def test_mypy_strict_is_clean(package: str) -> None:
    out = _run("mypy", "--strict", f"src/{package}")
    assert out.returncode == 0, out.stdout + out.stderr
