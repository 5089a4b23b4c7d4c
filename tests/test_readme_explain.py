"""Every ``meshlayout explain``, ``compare``, ``place`` and ``reshard`` command shown in the README
prints the output shown under it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOWN = re.findall(
    r"```bash\n(meshlayout (?:explain|compare|place|reshard) [^\n]*)\n```\n\n```text\n(.*?)\n```",
    (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_shows_an_explained_plan_and_a_comparison() -> None:
    assert [c.split()[1] for c, _ in SHOWN][:2] == ["explain", "compare"], \
        "no `meshlayout explain` and `compare` commands with their output in README.md"


@pytest.mark.parametrize(("command", "expected"), SHOWN, ids=[c for c, _ in SHOWN])
def test_the_readme_output_is_what_the_command_prints(command: str, expected: str) -> None:
    args = shlex.split(command)[1:]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run([sys.executable, "-m", "mesh", *args], capture_output=True, text=True,
                         encoding="utf-8", timeout=60, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == expected


@pytest.mark.skipif(shutil.which("meshlayout") is None, reason="the package is not installed")
def test_the_console_script_prints_the_same() -> None:
    command, expected = SHOWN[0]
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, encoding="utf-8",
                         timeout=60, cwd=ROOT, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == expected
