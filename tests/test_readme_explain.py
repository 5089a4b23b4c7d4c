"""Every ``meshlayout explain``, ``compare``, ``place``, ``reshard`` and ``hang`` command shown in
README.md or a ``docs/*.md`` page (a one-line ``bash`` block followed by a ``text`` block) prints
the output shown under it (``hang`` exits 1 when it shows a hang)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from doc_pages import PAGES, README, ROOT, name, text

_SHOWN = re.compile(
    r"```bash\n(meshlayout (?:explain|compare|place|reshard|hang|recover) [^\n]*)\n```\n\n"
    r"```text\n(.*?)\n```",
    re.S)
SHOWN = [(name(page), command, expected) for page in PAGES
         for command, expected in _SHOWN.findall(text(page))]


def test_the_pages_show_each_subcommand_with_its_output() -> None:
    assert {c.split()[1] for _, c, _ in SHOWN} == {"explain", "compare", "place", "reshard",
                                                   "hang", "recover"}
    assert SHOWN[0][0] == name(README) and SHOWN[0][1].split()[1] == "explain", \
        "no `meshlayout explain` command with its output in README.md"


@pytest.mark.parametrize(("page", "command", "expected"), SHOWN,
                         ids=[f"{p}: {c}" for p, c, _ in SHOWN])
def test_the_output_shown_is_what_the_command_prints(page: str, command: str,
                                                     expected: str) -> None:
    args = shlex.split(command)[1:]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run([sys.executable, "-m", "mesh", *args], capture_output=True, text=True,
                         encoding="utf-8", timeout=60, cwd=ROOT, env=env)
    assert out.returncode == (1 if args[0] == "hang" and "problems found" in expected else 0), \
        out.stderr
    assert out.stdout.rstrip("\n") == expected


@pytest.mark.skipif(shutil.which("meshlayout") is None, reason="the package is not installed")
def test_the_console_script_prints_the_same() -> None:
    _, command, expected = SHOWN[0]
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, encoding="utf-8",
                         timeout=60, cwd=ROOT, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == expected
