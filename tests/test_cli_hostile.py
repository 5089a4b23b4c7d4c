"""``meshlayout explain`` against hostile plan files and flags: every one exits 2 with a
message naming the problem, never a Python traceback (run as a user would, in a process);
an interrupt exits 130 saying so.  (Huge inputs, refused before work proportional to them:
``tests/test_refusals.py``.)"""

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
VIEWS = Views(a=MeshView.from_shape((2, 4), ("dp", "tp")))
"""
ODD = """
class Odd(Exception):
    def __str__(self):
        raise RuntimeError("no message")
"""
WORLD_PLAN = """
from mesh import MeshView
WORLD = MeshView.from_shape((4, 8), ("dp", "tp"))
def PLAN(world):
    if not world.ranks.is_identity:  # the survivors' world
        {}
    return {"w": world}
"""


def _explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "explain", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("plan", [RAISING_MAPPING, RAISING_VIEW, ODD + "raise Odd('boom')"],
                         ids=["items", "view-subclass", "str-raises"])
def test_a_plan_whose_objects_raise_when_read_exits_2_naming_the_plan(
        tmp_path: Path, plan: str) -> None:
    path = tmp_path / "plan.py"
    path.write_text(plan)
    out = _explain(str(path))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "plan.py" in out.stderr, out.stderr
    assert "boom" in out.stderr or "Odd: <its message could not be read" in out.stderr, \
        out.stderr


def test_views_are_read_once_by_their_entries_so_a_raising_len_is_never_asked(
        tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text(RAISING_LEN)
    out = _explain(str(path))
    assert out.returncode == 0 and "view a: (dp=2, tp=4)" in out.stdout, out.stderr


@pytest.mark.parametrize(("when", "raised", "says"), [
    ("raise SystemExit(0)", "at load", "exited (SystemExit: 0) instead of defining VIEWS"),
    ("raise SystemExit(0)", "on --fail", "PLAN in the plan file"),
    ("raise SystemExit('bye')", "on --fail", "exited (SystemExit: 'bye') when re-derived"),
], ids=["load", "fail", "fail-text"])
def test_a_plan_that_exits_exits_2_at_load_time_and_during_fail_alike(
        tmp_path: Path, when: str, raised: str, says: str) -> None:
    """Before: a PLAN exiting while re-derived from the survivors ended meshlayout with the
    plan's own code (0) and no output."""
    path = tmp_path / "plan.py"
    source = WORLD_PLAN.replace("{}", when)
    path.write_text(when + "\n" if raised == "at load" else source)
    out = _explain(str(path), "--fail", "13")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("source", ["raise KeyboardInterrupt\n",
                                    WORLD_PLAN.replace("{}", "raise KeyboardInterrupt")],
                         ids=["load", "fail"])
def test_an_interrupt_says_interrupted_and_exits_130(tmp_path: Path, source: str) -> None:
    path = tmp_path / "plan.py"
    path.write_text(source)
    out = _explain(str(path), "--fail", "13")
    assert out.returncode == 130, out.stderr
    assert out.stderr == "meshlayout explain: interrupted\n"


def test_a_plan_failing_with_an_unprintable_error_on_the_survivors_is_a_finding(
        tmp_path: Path) -> None:
    """An exception whose ``__str__`` raises, from PLAN on a surviving world: that way is
    impossible, and the report says which exception (it escaped before)."""
    path = tmp_path / "plan.py"
    path.write_text(ODD + WORLD_PLAN.replace("{}", "raise Odd()"))
    out = _explain(str(path), "--fail", "13", "--world", "32", "--devices-per-host", "8")
    assert out.returncode == 0, out.stderr
    assert "drop dp: impossible: the plan raised Odd: <its message could not be read" in \
        out.stdout, out.stdout


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


@pytest.mark.parametrize("size", ["²", "٣", "-2", "0x8", "2.0"])
def test_a_dims_size_of_no_ascii_digits_exits_2_naming_it(size: str) -> None:
    """Before: ``--dims dp=²`` passed ``str.isdigit`` and ``int("²")`` raised a traceback."""
    out = _explain("--dims", f"dp={size},tp=4")
    assert out.returncode == 2, out.stderr
    assert f"got 'dp={size}'" in out.stderr and "Traceback" not in out.stderr
