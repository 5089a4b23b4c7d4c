"""``meshlayout recover``: every way on after a failure, priced, from a plan file; its JSON is
``Recovery.to_dict()``; bad input exits 2 naming the value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLAN = "examples/recover_plan.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "recover", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})


def test_the_table_lists_every_way_cheapest_first_and_the_refused_with_reasons() -> None:
    out = _run(PLAN, "--fail", "13", "--spares", "8")
    assert out.returncode == 0, out.stderr
    rows = [line.split()[0] for line in out.stdout.splitlines()[2:] if line.strip()]
    ways = [r for r in rows if r != "refused"]
    assert ways[0] == "spare" and {"drop", "restart", "wait", "evict_host"} <= set(ways)
    assert "refused refactor" in out.stdout and "keeps no more ranks" in out.stdout


def test_docs_failure_md_shows_the_table_the_command_prints() -> None:
    """The worked example in docs/failure.md is the command's output, byte for byte."""
    out = _run(PLAN, "--fail", "13", "--spares", "8")
    assert out.returncode == 0, out.stderr
    doc = (ROOT / "docs" / "failure.md").read_text(encoding="utf-8")
    start = doc.index("```text\nkind           seconds") + len("```text\n")
    assert doc[start:doc.index("```", start)] == out.stdout


def test_the_json_is_the_recovery_and_agrees_with_the_library() -> None:
    import runpy

    from mesh import Topology, recover

    out = _run(PLAN, "--fail-host", "1", "--spares", "8", "--format", "json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    plan = runpy.run_path(str(ROOT / PLAN))
    want = recover(plan["PLAN"], plan["WORLD"], list(range(8, 16)), state=plan["TENSORS"],
                   spares=list(range(32, 40)), topology=Topology(40, 8), itemsize=2)
    assert got == json.loads(json.dumps(want.to_dict()))
    assert got["failed"] == list(range(8, 16)) and got["ways"][0]["kind"] == "spare"


def test_without_a_checkpoint_a_state_only_the_failed_rank_held_is_named() -> None:
    """Adam's moments are sharded over both dims: rank 13's blocks are on rank 13 only."""
    out = _run(PLAN, "--fail", "13", "--spares", "8", "--no-checkpoint")
    assert out.returncode == 2, out.stderr
    assert "held by failed ranks only (failed: [13]) and checkpoint=False" in out.stderr
    assert ".exp_avg" in out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["examples/hang/plan.py", "--fail", "1"], "must define WORLD and PLAN"),
    (["examples/trainer.py", "--fail", "1"], "must define VIEWS"),
    ([PLAN], "give the failure: --fail RANKS or --fail-host HOSTS"),
    ([PLAN, "--fail", "99"], "99"),
    ([PLAN, "--fail-host", "9"], "9"),
    ([PLAN, "--fail", "13", "--spares", "16"], "spare"),
    ([PLAN, "--fail", "13", "--state", "examples/machine.json"], "machine.json"),
    ([PLAN, "--fail", "13", "--way", "2"], "give --svg FILE too"),
    ([PLAN, "--fail", "13", "--view", "world"], "give --svg FILE too"),
    ([PLAN, "--fail", "13", "--svg", "x.svg", "--way", "99"], "(1 .. "),
    ([PLAN, "--fail", "13", "--svg", "x.svg", "--view", "nope"], "'nope'"),
    ([PLAN, "--fail", "13", "--svg", "x.svg", "--color-by", "nope"], "nope"),
])
def test_bad_input_exits_2_naming_it(args: list[str], says: str) -> None:
    out = _run(*args)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert says in out.stderr, out.stderr


def _cells(picture: str) -> list[int]:
    """The ranks an SVG picture draws, one cell each."""
    import re
    return sorted(int(r) for r in re.findall(r'<g class="cell">.*?>(\d+)</text>', picture,
                                              flags=re.S))


def test_svg_draws_the_cheapest_ways_world_and_way_picks_another(tmp_path: Path) -> None:
    """The spare way: rank 13's coordinate holds spare 32 and the world keeps its 32 cells;
    ``--way 2`` (the next row of the table) draws that way's world, and its title names it."""
    first, second = tmp_path / "first.svg", tmp_path / "second.svg"
    out = _run(PLAN, "--fail", "13", "--spares", "8", "--svg", str(first))
    assert out.returncode == 0, out.stderr
    picture = first.read_text()
    assert picture.startswith("<svg") and "way 1, spares [32]" in picture
    assert _cells(picture) == sorted([*range(13), *range(14, 32), 32])
    table = [line.split() for line in out.stdout.splitlines()[2:] if line.strip()]
    out = _run(PLAN, "--fail", "13", "--spares", "8", "--svg", str(second), "--way", "2")
    assert out.returncode == 0, out.stderr
    label = " ".join(table[1][10:])  # the second way's label, as the table shows it
    assert f"way 2, {label}" in second.read_text().replace("&#x27;", "'"), label
    assert f"after {label}" in out.stderr
