"""``meshlayout explain`` against hostile plan files and flags: every one exits 2 with a
message naming the problem, never a Python traceback (run as a user would, in a process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RAISING_MAPPING = """
from mesh import MeshView
class Views(dict):
    def items(self):
        raise RuntimeError("boom from items")
VIEWS = Views(a=MeshView.from_shape((2, 2), ("dp", "tp")))
"""
RAISING_VIEW = """
from mesh import MeshView
class Bad(MeshView):
    def size(self, dim=None):
        raise RuntimeError("boom from a MeshView subclass")
    def family(self, dim):
        raise RuntimeError("boom from a MeshView subclass")
VIEWS = {"a": Bad.from_shape((2, 4), ("dp", "tp"))}
"""
RAISING_LEN = """
from mesh import MeshView
class Views(dict):
    def __len__(self):
        raise RuntimeError("boom from len")
VIEWS = Views(a=MeshView.from_shape((2, 2), ("dp", "tp")))
"""


def _explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "explain", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("plan", [RAISING_MAPPING, RAISING_VIEW, RAISING_LEN],
                         ids=["items", "view-subclass", "len"])
def test_a_plan_whose_objects_raise_when_read_exits_2_naming_the_plan(
        tmp_path: Path, plan: str) -> None:
    path = tmp_path / "plan.py"
    path.write_text(plan)
    out = _explain(str(path))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "plan.py" in out.stderr and "boom" in out.stderr, out.stderr


@pytest.mark.parametrize("flags", [
    ["--dims", "dp=" + "9" * 5000],
    ["--dims", "dp=2", "--world", "9" * 5000],
    ["--dims", "dp=2,tp=4", "--rank", "1" * 5000],
    ["--dims", "dp=2,tp=4", "--devices-per-host", "7" * 5000],
], ids=["dims", "world", "rank", "devices-per-host"])
def test_an_integer_flag_of_thousands_of_digits_exits_2(flags: list[str]) -> None:
    out = _explain(*flags)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "Exceeds the limit" not in out.stderr
