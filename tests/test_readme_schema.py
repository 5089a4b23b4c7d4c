"""The JSON tables of the guide's pages (``docs/plans.md``, ``docs/tensors.md``) list every key
``meshlayout explain``, ``compare``, ``place``, ``reshard`` and ``hang`` print, and no other.

A table row names a field in backticks (``views[].dims``: the items of a list are ``[]``);
when its meaning is an object written ``{"key", "key" (note), ...}``, those quoted names
are that field's keys.  The JSON is walked the same way: every object's keys, by path, with
a list's items under the list's path.  The documents come from the command itself, with
every optional part present (``--rank``, fast domains, ``--traffic``, ``--fail`` with
``--spares``, a machine with ``--topology``; ``place`` with a runner-up).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from doc_pages import PAGES, ROOT, text

PLAN = ["--world", "64", "--devices-per-host", "4", "--hosts-per-domain", "2", "--rank", "5"]


def tables() -> list[list[tuple[str, str]]]:
    """Every ``| field | meaning |`` table of the pages: its rows as (field, meaning)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"\| field \| meaning \|\n\|---\|---\|\n((?:\|.*\|\n)+)",
                                text(page)):
            found.append([tuple(cell.strip() for cell in line.strip("|").split(" | ", 1))
                          for line in block.splitlines()])
    return found  # type: ignore[return-value]


def table(schema: str) -> list[tuple[str, str]]:
    """The one table whose ``schema`` row names ``schema`` (``meshlayout.explain/1``)."""
    found = [rows for rows in tables() if ("`schema`", f'`"{schema}"`') in rows]
    assert len(found) == 1, f"{len(found)} tables of the schema {schema} in the pages"
    return found[0]


def documented(rows: list[tuple[str, str]]) -> dict[str, set[str]]:
    """Path -> keys, as the table's rows say them ("" is the top level)."""
    out: dict[str, set[str]] = {"": set()}
    for field, meaning in rows:
        paths = [p for p in re.findall(r"`([^`]*)`", field) if re.fullmatch(r"[a-z_.\[\]]+", p)]
        out[""] |= {p for p in paths if "." not in p and "[" not in p}
        if len(paths) == 1 and "{" in meaning:
            out[paths[0]] = set(re.findall(r'"(\w+)"', meaning))
    return out


def keys_of(data: Any, path: str = "", out: dict[str, set[str]] | None = None,
            skip: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """Path -> the keys the JSON has there (a list's items under the list's own path, what
    is inside them under ``path[].key``); paths in ``skip`` are not walked."""
    out = {} if out is None else out
    if path in skip:
        return out
    items = [data] if isinstance(data, dict) else [
        x for x in data if isinstance(x, dict)] if isinstance(data, list) else []
    for item in items:
        out.setdefault(path, set()).update(item)
        inner = path + "[]" if isinstance(data, list) else path
        for k, v in item.items():
            keys_of(v, f"{inner}.{k}" if inner else k, out, skip)
    return out


def run(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "mesh", *args, "--format", "json"],
                         capture_output=True, text=True, check=True, timeout=60, cwd=ROOT)
    data: dict[str, Any] = json.loads(out.stdout)
    return data


MACHINE = ["--topology", "examples/machine.json"]


def test_the_explain_table_lists_every_key_of_the_json() -> None:
    data = run("explain", *PLAN, "--dims", "dp=4,cp=2,tp=8", "--fail", "13", "--spares", "64")
    data["topology"] = run("explain", "--dims", "dp=14,tp=8", *MACHINE)["topology"]
    assert data["topology"]["dims"]  # every part of the machine report is there
    assert documented(table("meshlayout.explain/1")) == keys_of(data)


def test_the_compare_table_lists_every_key_of_its_json() -> None:
    data = run("compare", *PLAN, "--dims", "dp=8,tp=8", "--dims", "tp=8,dp=8",
               "--traffic", "tp=1GiB")
    found = keys_of(data, skip=frozenset({"plans", "traffic.bytes"}))  # documented elsewhere,
    assert documented(table("meshlayout.compare/1")) == found  # and a map from dim names
    assert [keys_of(p) for p in data["plans"]] == [keys_of(run("explain", *PLAN, "--dims", d))
                                                   for d in ("dp=8,tp=8", "tp=8,dp=8")]


def test_the_place_table_lists_every_key_of_its_json() -> None:
    data = run("place", "--dims", "dp=7,ep=4,tp=4", *MACHINE, "--traffic", "ep=4GiB,tp=1GiB")
    assert data["runner_up"] is not None
    found = keys_of(data, skip=frozenset({"traffic.bytes", "chosen.view"}))  # a map; a view
    assert documented(table("meshlayout.place/1")) == found


def test_the_reshard_table_lists_every_key_of_its_json() -> None:
    data = run("reshard", "examples/trainer.py", "examples/server.py", "--rank", "9")
    assert data["rank"]["tensors"]  # every optional part is there
    found = keys_of(data, skip=frozenset({"rank.tensors"}))  # a map from tensor names
    assert documented(table("meshlayout.reshard/2")) == found
    assert set(data["rank"]["tensors"]["embed"]) == {"sends", "receives", "kept"}


def test_the_hang_table_lists_every_key_of_its_json() -> None:
    out = subprocess.run([sys.executable, "-m", "mesh", "hang", "examples/hang", "--plan",
                          "examples/hang/plan.py", "--format", "json"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 1, out.stderr  # the example job hangs
    data = json.loads(out.stdout)
    assert data["findings"] and data["blocked"] and data["groups"]  # every part is there
    maps = frozenset(f"{p}.coordinate" for p in (  # maps from dim names
        "findings[].group", "findings[].ranks[]", "blocked[].group", "blocked[].rank",
        "groups[].group", "groups[].never_entered[]"))
    assert documented(table("meshlayout.hang/1")) == keys_of(data, skip=maps)
