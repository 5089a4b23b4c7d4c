"""``docs/cli.md`` lists every subcommand of ``meshlayout`` and, under each, every flag its
``--help`` prints, and no flag that ``--help`` lacks.

The help is read as a reader gets it (``meshlayout SUB --help``, run as ``python -m mesh``);
a flag is an option string of its ``options:`` section (``--rank``), and the page lists it
as the first cell of a table row under ``## meshlayout SUB`` (``| `--rank RANK` | ... |``).
A failure prints the rows to add, taken from the help.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from doc_pages import DOCS, ROOT

PAGE = (DOCS / "cli.md").read_text(encoding="utf-8")


def _help(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "mesh", *args, "--help"], capture_output=True,
                         text=True, encoding="utf-8", timeout=60, check=True, cwd=ROOT,
                         env={**os.environ, "COLUMNS": "1000", "PYTHONIOENCODING": "utf-8"})
    return out.stdout


SUBCOMMANDS = re.findall(r"^ {4}(\w+) ", _help().split("positional arguments:")[1], re.M)


def _options(sub: str) -> dict[str, str]:
    """Flag -> its help row (``| `--rank RANK` | also show ... |``), from ``meshlayout SUB
    --help``; a flag's meaning continues on the lines indented under it."""
    section = _help(sub).split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries: list[list[str]] = []  # [invocation, meaning]
    for line in section.splitlines():
        if line.startswith("  -"):
            invocation, _, meaning = line.strip().partition("  ")
            entries.append([invocation, meaning.strip()])
        else:
            entries[-1][1] = (entries[-1][1] + " " + line.strip()).strip()
    return {flag: f"| `{invocation}` | {meaning} |" for invocation, meaning in entries
            for flag in re.findall(r"(?:^|, )(--?[\w-]+)", invocation)
            if flag not in ("-h", "--help")}


def _listed(sub: str) -> set[str]:
    """The flags the page's table rows list under ``## meshlayout SUB``."""
    section = PAGE.split(f"\n## meshlayout {sub}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(--[\w-]+)", section, re.M))


def test_the_command_s_own_flags_are_listed_before_the_subcommands() -> None:
    flags = set(re.findall(r"^ {2}(--[\w-]+)", _help().split("\noptions:\n", 1)[1], re.M))
    head = PAGE.split("\n## meshlayout ", 1)[0]
    assert flags and [f for f in sorted(flags) if f"  {f}" not in head] == []


def test_every_subcommand_has_its_section() -> None:
    assert SUBCOMMANDS == ["explain", "compare", "place", "reshard", "hang", "recover"]
    assert re.findall(r"^## meshlayout (\w+)$", PAGE, re.M) == SUBCOMMANDS


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_flag_of_the_help_is_listed_under_its_subcommand(sub: str) -> None:
    options = _options(sub)
    missing = [options[f] for f in options if f not in _listed(sub)]
    assert missing == [], "add to docs/cli.md under ## meshlayout " + sub + ":\n" + \
        "\n".join(dict.fromkeys(missing))
    assert _listed(sub) <= set(options), "docs/cli.md lists flags --help lacks"
