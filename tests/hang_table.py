"""The side-by-side table of ``docs/hang.md``: what ``meshlayout hang`` and torch's own
flight-recorder analyzer (``python -m torch.distributed.flight_recorder.fr_trace``, torch
2.13) name for each planted hang of ``tests/hang_programs.py``, one cell each, computed from
the dumps of a real run.  ``tests/test_hang_gloo.py`` recomputes every cell from a fresh run
and compares it with the page; ``python tests/hang_table.py DIR...`` prints the rows (for a
new page).

Torch's analyzer runs twice: on the dumps as Gloo writes them (their ``pg_config`` is empty,
so it cannot tell a group's members), and on copies whose ``pg_config`` is filled with the
members the plan gives (what an NCCL dump would carry), with its best-effort flag
``--allow-incomplete-ranks``.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hang_programs import DIMS, DIMS_OF, SHAPE

from mesh import HangReport, MeshView, read_flight_records

PREFIX = "fr_trace_rank_"


def view_of(name: str) -> MeshView:
    """The plan of the program ``name`` (a pipeline's dims are its own)."""
    return MeshView.from_shape(SHAPE, DIMS_OF.get(name, DIMS))


def _name(run: Path) -> str:
    """The program a run folder holds (``OUT/<program>/attempt<n>``)."""
    return run.parent.name


def dumps_in(run: Path) -> list[str]:
    """The pickle dumps of a run, in rank order."""
    return sorted(str(p) for p in run.glob(PREFIX + "*"))


def ours(run: Path) -> HangReport:
    return read_flight_records(dumps_in(run), view_of(_name(run)))


def ours_cell(report: HangReport) -> str:
    """``unmatched tp (0, 1) at dp=0: rank 1 (went on); behind: 2``: per finding its kind,
    group, ranks at fault with their causes, and the ranks that may be the cause instead."""
    words = []
    for f in report.findings:
        coord = ", ".join(f"{n}={c}" for n, c in f.group.coordinate)
        why = [f"{r} ({c.value})" for r, c in zip(f.ranks, f.causes)] \
            if f.kind == "unmatched" and f.causes else [str(r) for r in f.ranks]
        maybe = f", or maybe {', '.join(map(str, f.maybe))}" if f.maybe else ""
        words.append(f"{f.kind} {f.group.dim} {_tuple(f.group.members)}"
                     + (f" at {coord}" if coord else "") + f": rank {', '.join(why)}{maybe}")
    behind = sorted({b.rank for b in report.blocked})
    return "; ".join(words) + (f"; behind: {', '.join(map(str, behind))}" if behind else "")


def torch_cell(run: Path, filled: bool) -> str:
    """What torch's analyzer names: per problem it prints, the group's desc, the reason and
    the missing ranks; or the error it stops with."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in dumps_in(run):
            with open(path, "rb") as f:
                dump = pickle.load(f)  # our own test's dumps: trusted
            if filled:
                dump["pg_config"] = _members(dump, int(path.rsplit("_", 1)[1]),
                                             view_of(_name(run)))
            with open(os.path.join(tmp, os.path.basename(path)), "wb") as f:
                pickle.dump(dump, f)
        flags = ["--allow-incomplete-ranks"] if filled else []
        out = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                              tmp, "-p", PREFIX, *flags], capture_output=True, text=True,
                             timeout=120)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        last = [line for line in text.splitlines() if line.strip()][-1]
        return "stops: " + re.sub(r"\('ml-[0-9a-f]+', \d+\)", "(<group name>, <rank>)", last)
    found = []
    for block in re.split(r"\n(?=\S[^\n]*sequence number)", text):
        reason = re.search(r"^(.*?), sequence number: (\d+)", block, re.M)
        group = re.search(r"group info: [^:\n]*:(\S+)", block)
        missing = re.search(r"missing ranks: (\{[^}]*\})", block)
        if reason and group:
            found.append(f"{group.group(1)} seq {reason.group(2)}: {reason.group(1).lower()}"
                         + (f", missing {missing.group(1)}" if missing else ""))
    return "; ".join(sorted(found)) or "no problem named"


def _members(dump: dict[str, Any], rank: int, view: MeshView) -> dict[str, Any]:
    """``pg_config`` as an NCCL dump has it, from the plan: each group's members (the facade
    names a group's dim in its desc, ``mesh_<dim>``)."""
    config = {}
    for e in dump["entries"]:
        name, desc = e["process_group"]
        dim = desc.removeprefix("mesh_")
        ranks = list(view.group(rank, dim)) if dim in view.names else list(range(view.size()))
        config[name] = {"name": name, "desc": desc, "ranks": str(ranks)}
    return config


def _tuple(ranks: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, ranks)) + ")"


if __name__ == "__main__":
    for run in map(Path, sys.argv[1:]):
        print(f"| `{_name(run)}` | {ours_cell(ours(run))} | {torch_cell(run, False)} | "
              f"{torch_cell(run, True)} |")
