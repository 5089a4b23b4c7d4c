"""What ``meshlayout SUB --help`` shows is true: every example it gives runs as shown (from
a copy of the checkout's ``examples/``) and exits 0, or 1 where its comment says "exit 1";
and every flag its texts mention is a flag of that subcommand.

An example is a line of the epilog's ``examples:`` block starting ``meshlayout``; a line
ending ``\\`` continues on the next, a trailing ``(...)`` (on its line or the next, indented)
is a comment.  Globs (``fr_json_*.json``) are expanded as a shell would.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mesh._cli._parser import parser

ROOT = Path(__file__).resolve().parents[1]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    top = parser()
    found = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices)


SUBCOMMANDS = _subcommands()


def _examples(epilog: str) -> list[tuple[str, str]]:
    """(command, comment) of each example in an epilog's ``examples:`` block."""
    block = epilog.split("examples:\n", 1)[1].split("\n\n", 1)[0]
    out: list[list[str]] = []
    continued = False
    for line in block.splitlines():
        text = line.strip()
        remark = re.search(r"(?:^|\s{2,})(\(.*\))$", text)
        comment = remark.group(1) if remark else ""
        command = (text[:remark.start()] if remark else text).strip()
        if out and (continued or not command.startswith("meshlayout")):
            out[-1][0] += " " + command.rstrip("\\")
            out[-1][1] += comment
        else:
            out.append([command.rstrip("\\"), comment])
        continued = command.endswith("\\")
    return [(c.strip(), m) for c, m in out if c.strip()]


EXAMPLES = [(sub, command, comment) for sub, p in SUBCOMMANDS.items()
            for command, comment in _examples(p.epilog or "")]


def test_every_subcommand_gives_examples() -> None:
    assert sorted({sub for sub, _, _ in EXAMPLES}) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize("sub, command, comment", EXAMPLES,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(EXAMPLES)])
def test_each_example_of_the_help_runs(tmp_path: Path, sub: str, command: str,
                                       comment: str) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    words = shlex.split(command)
    assert words[:2] == ["meshlayout", sub], command
    args = [w2 for w in words[1:] for w2 in (sorted(glob.glob(w, root_dir=tmp_path))
                                              if "*" in w else [w])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-m", "mesh", *args], capture_output=True,
                         text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    expected = 1 if "exit 1" in comment else 0
    assert out.returncode == expected, f"{command}\n{out.stderr[-2000:]}"


def _texts(p: argparse.ArgumentParser) -> list[str]:
    return [p.description or "", p.epilog or "", *(a.help or "" for a in p._actions)]


def _mentioned(text: str) -> set[str]:
    """The flags a text names (``--expect-intra-*`` names a prefix)."""
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*\*?", text))


@pytest.mark.parametrize("sub", sorted(SUBCOMMANDS))
def test_every_flag_a_help_text_mentions_exists(sub: str) -> None:
    p = SUBCOMMANDS[sub]
    flags = set(p._option_string_actions)
    unknown = sorted(f for text in _texts(p) for f in _mentioned(text)
                     if not (f in flags or (f.endswith("*")
                             and any(g.startswith(f[:-1]) for g in flags))))
    assert unknown == [], f"meshlayout {sub} --help mentions flags it lacks: {unknown}"
