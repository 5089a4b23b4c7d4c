"""``meshlayout explain --fail RANKS | --fail-host HOSTS [--spares RANKS]``: the blast radius
per view and dim, the plan re-derived under each way to continue, the groups a rank keeps
or rebuilds, and the failure drawn on the SVG.

Expected values come from NumPy scans of the rank tensor (built here with ``arange`` and
``reshape``, never by the code under test)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch_free import run_without

from mesh import MeshView, survive

SMALL = ["--world", "32", "--devices-per-host", "8", "--dims", "dp=4,tp=8"]
PLAN_3D = """
from mesh import MeshView, Topology
WORLD = MeshView.from_shape((2, 2, 4), ("dp", "cp", "tp"))
def PLAN(world):
    return {"world": world, "dp_cp": world["dp", "cp"].flatten(name="dp_cp")}
TOPOLOGY = Topology(16, devices_per_host=4)
"""
SVG = "{http://www.w3.org/2000/svg}"


def explain(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "explain", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=120, check=False, cwd=cwd)


def as_json(*args: str) -> dict[str, Any]:
    out = explain(*args, "--format", "json")
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def lines_of(tensor: Any, dims: tuple[int, ...]) -> Any:
    """Every group along ``dims`` (flattened in that order) as a row, rows ordered by their
    first member's position in the tensor (row-major)."""
    rest = [d for d in range(tensor.ndim) if d not in dims]
    return np.transpose(tensor, rest + list(dims)).reshape(-1, int(np.prod(
        [tensor.shape[d] for d in dims])))


def scan(rows: Any, failed: list[int]) -> dict[str, Any]:
    """The blast entry of one dim, by brute force over its groups."""
    hit = np.isin(rows, failed)
    broken = rows[hit.any(axis=1)]
    return {"group_size": rows.shape[1], "groups": rows.shape[0],
            "broken_groups": len(broken), "intact_groups": rows.shape[0] - len(broken),
            "stranded_ranks": int((~np.isin(broken, failed)).sum()),
            "first_broken_groups": [list(map(int, g)) for g in broken[:64 // rows.shape[1]]]}


def intact(old: Any, new: Any) -> int:
    """How many rows of ``new`` are rows of ``old``."""
    before = {tuple(r) for r in old.tolist()}
    return sum(tuple(r) in before for r in new.tolist())


# ---- text --------------------------------------------------------------------------------------

def test_the_text_reports_blast_ways_and_the_ranks_groups() -> None:
    out = explain(*SMALL, "--fail", "13", "--spares", "32", "--rank", "9")
    assert out.returncode == 0, out.stderr
    text = out.stdout[out.stdout.index("failed:"):]
    assert text.splitlines()[0] == "failed: 1 rank (13) on host 1"
    assert "  mesh.dp     4       8       1       7               3  (5, 13, 21, 29)" in text
    assert "  drop dp: (dp=3, tp=8) over 24 ranks (8 fewer)" in text
    assert "  drop tp: (dp=4, tp=7) over 28 ranks (4 fewer)" in text
    assert "  substitute (32): (dp=4, tp=8) over 32 ranks (0 fewer)" in text
    assert text.splitlines()[-2:] == [
        "  mesh.dp  intact  gone     kept     kept",
        "  mesh.tp  broken  gone     rebuilt  rebuilt"]


def test_without_spares_the_text_says_how_to_substitute() -> None:
    out = explain(*SMALL, "--fail", "13")
    assert "substitute: give --spares RANKS" in out.stdout


def test_an_impossible_drop_is_reported_with_its_reason() -> None:
    out = explain(*SMALL, "--fail", "0,9,18,27")  # every dp slice and 4 tp slices
    assert out.returncode == 0, out.stderr
    assert "drop dp: impossible: cannot drop along 'dp'" in out.stdout
    assert "drop tp: (dp=4, tp=4) over 16 ranks" in out.stdout


def test_a_views_only_plan_reports_the_blast_and_says_how_to_get_ways(tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text("from mesh import MeshView\n"
                    "VIEWS = {'m': MeshView.from_shape((4, 8), ('dp', 'tp'))}\n")
    data = as_json(str(path), "--fail", "13")
    assert data["ways"] is None and data["blast"][1]["broken_groups"] == 1
    assert "define WORLD (a MeshView) and PLAN" in explain(str(path), "--fail", "13").stdout


# ---- JSON against brute force ------------------------------------------------------------------

@pytest.mark.parametrize("failed", [[13], [0, 31], [8, 9, 10, 11, 12, 13, 14, 15]])
def test_the_blast_entries_equal_a_scan_of_the_rank_tensor(failed: list[int]) -> None:
    data = as_json(*SMALL, "--fail", ",".join(map(str, failed)))
    tensor = np.arange(32).reshape(4, 8)
    assert [e["dim"] for e in data["blast"]] == ["dp", "tp"]
    for k, entry in enumerate(data["blast"]):
        assert {key: entry[key] for key in scan(tensor, failed)} == scan(
            lines_of(tensor, (k,)), failed)


def test_a_flattened_view_and_a_3d_world_blast_and_survive_as_brute_force_says(
        tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text(PLAN_3D)
    failed = [5, 14]
    data = as_json(str(path), "--fail", "5,14", "--spares", "20,21", "--rank", "6")
    tensor = np.arange(16).reshape(2, 2, 4)
    expected = [scan(lines_of(tensor, (k,)), failed) for k in range(3)]
    expected.append(scan(lines_of(tensor, (0, 1)), failed))  # dp_cp: dp then cp
    got = [{key: e[key] for key in expected[0]} for e in data["blast"]]
    assert [(e["view"], e["dim"]) for e in data["blast"]] == [
        ("world", "dp"), ("world", "cp"), ("world", "tp"), ("dp_cp", "dp_cp")]
    assert got == expected
    assert data["failure"]["views"][1]["broken_instances"] == expected[3]["broken_groups"]
    ways = {(w["way"], w["dim"]): w for w in data["ways"]}
    assert ways["drop", "dp"]["error"] is not None  # 5 and 14 are in both dp slices
    drop_tp = ways["drop", "tp"]
    after = np.delete(tensor, [1, 2], axis=2)  # 5 is at tp=1, 14 at tp=2
    assert drop_tp["shape"] == list(after.shape)
    counts = [(g["intact_groups"], g["new_groups"]) for g in drop_tp["groups"]]
    olds = [lines_of(tensor, d) for d in ((0,), (1,), (2,), (0, 1))]
    news = [lines_of(after, d) for d in ((0,), (1,), (2,), (0, 1))]
    assert counts == [(intact(o, n), len(n) - intact(o, n)) for o, n in zip(olds, news)]
    spared = np.where(tensor == 5, 20, np.where(tensor == 14, 21, tensor))
    sub = ways["substitute", None]
    news = [lines_of(spared, d) for d in ((0,), (1,), (2,), (0, 1))]
    assert [(g["intact_groups"], g["new_groups"]) for g in sub["groups"]] == [
        (intact(o, n), len(n) - intact(o, n)) for o, n in zip(olds, news)]


def test_the_ranks_groups_are_kept_exactly_when_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text(PLAN_3D)
    data = as_json(str(path), "--fail", "5", "--rank", "6")
    tensor = np.arange(16).reshape(2, 2, 4)
    mine = {(g["view"], g["dim"]): g["broken"] for g in data["failure"]["rank"]["groups"]}
    assert mine == {("world", "dp"): False, ("world", "cp"): False, ("world", "tp"): True,
                    ("dp_cp", "dp_cp"): False}  # 6 is at (0, 1, 2); 5 at (0, 1, 1)
    drop_dp = next(w for w in data["ways"] if w["dim"] == "dp")
    assert drop_dp["rank"] == {"rank": 6, "survives": False, "groups": []}
    drop_tp = next(w for w in data["ways"] if w["dim"] == "tp")
    after = np.delete(tensor, [1], axis=2)
    kept = {(g["view"], g["dim"]): g["intact"] for g in drop_tp["rank"]["groups"]}
    for (view, dim), dims in [(("world", "dp"), (0,)), (("world", "cp"), (1,)),
                              (("world", "tp"), (2,)), (("dp_cp", "dp_cp"), (0, 1))]:
        old = next(r for r in lines_of(tensor, dims).tolist() if 6 in r)
        new = next(r for r in lines_of(after, dims).tolist() if 6 in r)
        assert kept[view, dim] == (old == new), (view, dim)


def test_group_counts_equal_the_listed_groups() -> None:
    world = MeshView.from_shape((4, 2, 4), ("dp", "cp", "tp"))

    def plan(w: MeshView) -> dict[str, MeshView]:
        return {"w": w, "f": w.flatten(("dp", "tp"), "dp_tp")}

    for s in (survive(plan, world, [5, 30], drop="dp"), survive(plan, world, [5], spares=[40])):
        for view, dim in (("w", "dp"), ("w", "cp"), ("w", "tp"), ("f", "dp_tp")):
            assert s.group_counts(view, dim) == (len(s.intact_groups(view, dim)),
                                                 len(s.new_groups(view, dim)))


# ---- hosts -------------------------------------------------------------------------------------

def test_fail_host_fails_every_rank_of_the_host_and_adds_to_fail() -> None:
    data = as_json(*SMALL, "--fail-host", "1", "--fail", "3")
    assert data["failure"]["ranks"] == [3, *range(8, 16)]
    assert data["failure"]["hosts"] == [0, 1] and data["failure"]["fail_hosts"] == [1]
    tensor = np.arange(32).reshape(4, 8)
    assert data["blast"][1]["broken_groups"] == scan(tensor, [3, *range(8, 16)])[
        "broken_groups"] == 2


def test_fail_host_uses_the_plan_files_topology(tmp_path: Path) -> None:
    path = tmp_path / "plan.py"
    path.write_text(PLAN_3D)  # hosts of 4
    data = as_json(str(path), "--fail-host", "2")
    assert data["failure"]["ranks"] == [8, 9, 10, 11]
    assert "on host 2 (--fail-host 2)" in explain(str(path), "--fail-host", "2").stdout


# ---- the picture -------------------------------------------------------------------------------

def drawn(path: Path) -> tuple[dict[tuple[float, float], int], ET.Element]:
    """The SVG's cells, by top-left corner -> rank, and its root."""
    root = ET.parse(path).getroot()
    cells = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "cell":
            rect, text = g.find(f"{SVG}rect"), g.find(f"{SVG}text")
            assert rect is not None and text is not None
            cells[float(rect.get("x", 0)), float(rect.get("y", 0))] = int(text.text or "")
    return cells, root


def outlined(root: ET.Element, cells: dict[tuple[float, float], int], kind: str) -> set[int]:
    """The ranks of the cells outlined with class ``kind`` (inset 2 or 3 px, or 7 px inside
    another outline)."""
    out = set()
    for r in root.iter(f"{SVG}rect"):
        if r.get("class") == kind:
            x, y = float(r.get("x", 0)), float(r.get("y", 0))
            out |= {cells[x - i, y - i] for i in (2, 3, 7) if (x - i, y - i) in cells}
    return out


def test_the_svg_crosses_failed_ranks_and_dashes_the_stranded(tmp_path: Path) -> None:
    picture = tmp_path / "f.svg"
    out = explain(*SMALL, "--fail", "13,30", "--svg", str(picture))
    assert out.returncode == 0, out.stderr
    cells, root = drawn(picture)
    tensor = np.arange(32).reshape(4, 8)
    hit = np.isin(tensor, [13, 30])
    rows, cols = hit.any(axis=1), hit.any(axis=0)
    stranded = {int(r) for r in tensor[(rows[:, None] | cols[None, :]) & ~hit]}
    assert outlined(root, cells, "failed") == {13, 30}
    assert outlined(root, cells, "broken") == stranded
    assert sum(p.get("class") == "failed-cross" for p in root.iter(f"{SVG}path")) == 2
    legend = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any(s.startswith("black crossed box: failed ranks (2 of the 32") for s in legend)
    assert any(s.startswith("black dashed outline: stranded ranks") for s in legend)


def test_the_svg_keeps_the_drawn_ranks_red_outline_when_it_is_stranded(tmp_path: Path) -> None:
    picture = tmp_path / "f.svg"
    assert explain(*SMALL, "--fail", "13", "--rank", "9", "--svg", str(picture)).returncode == 0
    cells, root = drawn(picture)
    assert outlined(root, cells, "highlight") == {9}
    assert 9 not in outlined(root, cells, "broken")


def test_stranded_members_of_the_drawn_ranks_groups_keep_their_member_outline(
        tmp_path: Path) -> None:
    """Rank 13 fails; rank 9's tp group (8-15) is the broken one: its healthy members keep
    their green member outline and get the stranded one inside it, and the legend counts
    rank 9's other members without rank 9."""
    picture = tmp_path / "f.svg"
    assert explain(*SMALL, "--fail", "13", "--rank", "9", "--svg", str(picture)).returncode == 0
    cells, root = drawn(picture)
    assert outlined(root, cells, "member") == {1, 17, 25, 8, 10, 11, 12, 14, 15}
    assert outlined(root, cells, "broken") == {5, 21, 29, 8, 10, 11, 12, 14, 15}
    legend = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "green outline: the other members of rank 9's tp group (7 of its 8 ranks)" in legend
    assert "blue outline: the other members of rank 9's dp group (3 of its 4 ranks)" in legend


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert not installed")
def test_the_failure_svg_renders(tmp_path: Path) -> None:
    picture = tmp_path / "f.svg"
    explain(*SMALL, "--fail-host", "1", "--rank", "5", "--svg", str(picture))
    done = subprocess.run(["rsvg-convert", "-o", str(tmp_path / "f.png"), str(picture)],
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0 and (tmp_path / "f.png").stat().st_size > 0


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "named"), [
    (["--fail", "99"], "rank 99"),
    (["--fail", "x"], "'x'"),
    (["--fail", "5-3"], "'5-3'"),
    (["--fail", "0-70000"], "65,536"),
    (["--fail-host", "9"], "host 9"),
    (["--fail", "13", "--spares", "5"], "spare rank 5"),
    (["--fail", "13,14", "--spares", "40"], "need 2 spares"),
    (["--spares", "40"], "--fail"),
], ids=["outside", "junk", "backwards", "too-many", "no-such-host", "spare-inside",
        "too-few-spares", "spares-alone"])
def test_bad_failure_flags_exit_2_naming_the_value(flags: list[str], named: str) -> None:
    out = explain(*SMALL, *flags)
    assert out.returncode == 2, out.stdout
    assert named in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_bad_host_says_the_valid_hosts() -> None:
    assert "valid: 0 <= host < 4" in explain(*SMALL, "--fail-host", "4").stderr


@pytest.mark.parametrize(("source", "named"), [
    ("from mesh import MeshView\nWORLD = MeshView.from_shape(4, ('x',))\n", "PLAN"),
    ("from mesh import MeshView\nWORLD = MeshView.from_shape(4, ('x',))\n"
     "def PLAN(w):\n    raise RuntimeError('boom')\n", "boom"),
    ("from mesh import MeshView\nWORLD = MeshView.from_shape(4, ('x',))\n"
     "def PLAN(w):\n    return {'w': w}\nVIEWS = {'other': WORLD}\n",
     "differs from PLAN(WORLD)"),
], ids=["plan-missing", "plan-raises", "views-differ"])
def test_a_bad_world_plan_exits_2(tmp_path: Path, source: str, named: str) -> None:
    path = tmp_path / "plan.py"
    path.write_text(source)
    out = explain(str(path), "--fail", "1")
    assert out.returncode == 2 and named in out.stderr, out.stderr


def test_explain_fail_imports_no_torch() -> None:
    code = ("from mesh._cli import main\n"
            "main(['explain', '--world', '32', '--dims', 'dp=4,tp=8', '--fail', '13', "
            "'--spares', '32', '--rank', '9', '--format', 'json'])\n")
    run_without(code, ("torch", "backend"))


def test_a_views_only_plan_gets_the_blast_of_a_world_too_large_for_ways(tmp_path: Path) -> None:
    """--fail derives ways for worlds up to 2**20 ranks; the blast radius alone is
    arithmetic, so a plan file with VIEWS only gets it at 2**24 ranks (docs/failure.md)."""
    path = tmp_path / "plan.py"
    path.write_text("from mesh import MeshView\n"
                    "VIEWS = {'m': MeshView.from_shape((2**21, 8), ('dp', 'tp'))}\n")
    data = as_json(str(path), "--fail", "13")
    assert data["ways"] is None and data["failure"]["ranks"] == [13]
    assert [(e["dim"], e["broken_groups"], e["stranded_ranks"]) for e in data["blast"]] == [
        ("dp", 1, 2**21 - 1), ("tp", 1, 7)]


def test_groups_of_one_rank_are_neither_kept_nor_new_communicators() -> None:
    """Dropping pp=2 leaves pp of size 1, as tp already is: 1,024 groups of one rank each,
    which create no communicator (they were counted as 1,024 new ones)."""
    args = ("--world", "2048", "--devices-per-host", "8", "--dims", "pp=2,dp=1024,tp=1",
            "--fail", "13")
    ways = {(w["way"], w["dim"]): w for w in as_json(*args)["ways"]}
    counts = {g["dim"]: (g["size"], g["intact_groups"], g["new_groups"])
              for g in ways["drop", "pp"]["groups"]}
    assert counts == {"pp": (1, 0, 0), "dp": (1024, 1, 0), "tp": (1, 0, 0)}
    text = explain(*args)
    assert text.returncode == 0, text.stderr
    drop_pp = text.stdout.split("  drop pp:")[1].split("  drop dp:")[0]
    assert "    mesh.pp      1       0    0  (size 1: no communicator)" in drop_pp
