"""Planted hangs on real Gloo processes, read from torch's flight-recorder dumps
(``meshlayout hang`` / :func:`mesh.read_flight_records`): each is named as planted, as
``check_spmd`` names the same program before launch, and as the table of ``docs/hang.md``
says, side by side with torch's own analyzer.

Worlds of 4 processes on 127.0.0.1 (``tests/gloo_launch.py``), the mesh's groups with a 3 s
timeout that ends each hang, every process killed at a hard bound; the flight recorder on
(``TORCH_FR_BUFFER_SIZE``), every rank dumping (pickle and JSON) when its program raises or
ends (``tests/hang_gloo_worker.py``).  The programs: ``tests/hang_programs.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from doc_pages import ROOT
from gloo_launch import launch
from hang_programs import CAUSES, EXPECT, MAYBE, PROGRAMS
from hang_table import dumps_in, ours, ours_cell, torch_cell, view_of

from backend import FINDING_KINDS, check_spmd
from backend import read_flight_records as facade_read
from mesh import HangReport, read_flight_records

WORKER = Path(__file__).resolve().parent / "hang_gloo_worker.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each planted program run once on 4 Gloo processes: the folder of its dumps."""
    out = tmp_path_factory.mktemp("hang")

    def run(name: str) -> Path:
        launch(WORKER, 4, name, out / name, bound_s=150, env={"TORCH_FR_BUFFER_SIZE": "2000"})
        return sorted((out / name).glob("attempt*"))[-1]  # the one used (after a retry: 1)

    # One program at a time: run side by side, a program's ranks raced the next program's
    # torch imports on 2 cores, and in CI one rank came to the first group (3 s timeout) 6 s
    # after its peers, after every rank had met in the store (empty dumps, twice in CI).
    return {name: run(name) for name in PROGRAMS}


def _named(report: HangReport) -> set[tuple[str, str, tuple[int, ...], tuple[int, ...]]]:
    return {(f.kind, f.group.dim, f.group.members, f.ranks) for f in report.findings}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_each_planted_hang_is_named_as_planted(runs: dict[str, Path], name: str) -> None:
    report = read_flight_records(dumps_in(runs[name]), view_of(name))
    findings, behind = EXPECT[name]
    assert _named(report) == findings, str(report)
    assert {b.rank for b in report.blocked} == behind, str(report)
    assert report.kinds() <= set(FINDING_KINDS)
    if name in CAUSES:  # a stalled rank is never said to have gone on
        assert {r: c.value for f in report.findings if f.kind == "unmatched"
                for r, c in zip(f.ranks, f.causes)} == CAUSES[name], str(report)
    assert tuple(sorted({m for f in report.findings for m in f.maybe})) == MAYBE.get(name, ())


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_json_dumps_say_what_the_pickles_say(runs: dict[str, Path], name: str) -> None:
    pickles = read_flight_records(dumps_in(runs[name]), view_of(name))
    jsons = read_flight_records(sorted(map(str, runs[name].glob("fr_json_*.json"))),
                                view_of(name))
    assert _named(jsons) == _named(pickles)
    assert jsons.blocked == pickles.blocked


CHECK_SPMD_DIFFERS = {"size_desync": "desync"}
"""Where the records say more than check_spmd: on Gloo, a size desync aborts the member with
the smaller buffer (no dump), so the records name it as a rank that never entered (unmatched)
beside the desync, which they find against the other groups of the dim; check_spmd names the
desync alone."""

CHECK_SPMD_SEES_MORE = {"skips_send"}
"""Where check_spmd names the culprit the records can only name as possible: Gloo records no
point-to-point call, so the records name the blocked receiver and, as possible causes, its
pipeline neighbours; check_spmd pairs the sends and names the rank that skipped its send."""


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_check_spmd_gives_the_matching_offline_finding(runs: dict[str, Path],
                                                       name: str) -> None:
    offline = check_spmd(4, PROGRAMS[name], torch=True)
    records = read_flight_records(dumps_in(runs[name]), view_of(name))
    if name in CHECK_SPMD_DIFFERS:
        assert offline.kinds() == {CHECK_SPMD_DIFFERS[name]}
        assert records.kinds() == {"unmatched", "desync"}
        assert {r for f in offline.findings for r in f.ranks} <= \
            {r for f in records.findings if f.kind == "desync" for r in f.ranks}
        return
    if name in CHECK_SPMD_SEES_MORE:
        culprits = {r for f in offline.findings for r in f.ranks}
        assert culprits and culprits <= set(records.suspects) - \
            {r for f in records.findings for r in f.ranks}, (str(offline), str(records))
        return
    assert sorted((f.kind, f.ranks) for f in offline.findings) == \
        sorted((f.kind, f.ranks) for f in records.findings)
    assert {(b.rank, *b.group) for b in offline.blocked} == \
        {(b.rank, b.group.dim, b.group.members) for b in records.blocked}


@pytest.mark.timeout(420)
def test_the_page_table_holds_for_a_fresh_run(runs: dict[str, Path]) -> None:
    """Every row of docs/hang.md's side-by-side table, recomputed from this run's dumps."""
    page = (ROOT / "docs" / "hang.md").read_text().split("## Side by side")[1].split("\n## ")[0]
    rows = {m.group(1): [c.strip() for c in m.group(2).split(" | ")]
            for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", page, re.M)}
    assert set(rows) == set(PROGRAMS)
    # torch's analyzer runs in a process of its own per cell (18, each importing torch): two
    # at a time, one per core
    with ThreadPoolExecutor(2) as pool:
        cells = {(name, filled): pool.submit(torch_cell, run, filled)
                 for name, run in runs.items() for filled in (False, True)}
        for name, run in runs.items():
            got = [ours_cell(ours(run)), cells[name, False].result(), cells[name, True].result()]
            assert rows[name] == got, name


@pytest.mark.timeout(420)
def test_the_command_names_hosts_and_writes_its_schema(runs: dict[str, Path]) -> None:
    out = subprocess.run([sys.executable, "-m", "mesh", "hang", *dumps_in(runs["dies"]),
                          "--dims", "dp=2,tp=2", "--hosts", "node[1-2]",
                          "--devices-per-host", "2", "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["schema"] == "meshlayout.hang/1"
    assert data["no_dump"] == [2]
    assert {(f["group"]["dim"], f["ranks"][0]["host"]) for f in data["findings"]} == \
        {("tp", "node2"), ("dp", "node2")}


@pytest.mark.timeout(420)
def test_the_facade_reads_the_dumps_against_its_mesh(runs: dict[str, Path]) -> None:
    from backend import FakeBackend, init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"),
                            backend=FakeBackend(world_size=4, rank=0))
    report = facade_read(dumps_in(runs["skip_tp"]), mesh)
    assert _named(report) == EXPECT["skip_tp"][0]


@pytest.mark.timeout(420)
def test_torchs_own_device_mesh_is_accepted_as_the_plan(runs: dict[str, Path]) -> None:
    """Torch's ``DeviceMesh`` (it was refused: "must be a DeviceMesh ... got DeviceMesh(...)")
    reads the dumps as the facade's mesh over the same ranks does, alone or in a plan."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh as TorchMesh

    mesh = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"),
                     _init_backend=False, _rank=0)
    assert _named(facade_read(dumps_in(runs["skip_tp"]), mesh)) == EXPECT["skip_tp"][0]
    assert _named(facade_read(dumps_in(runs["skip_tp"]), {"mesh": mesh})) == \
        EXPECT["skip_tp"][0]


@pytest.mark.timeout(420)
def test_a_stalled_host_is_named_and_a_stall_never_went_on(runs: dict[str, Path]) -> None:
    """Ranks 2 and 3 (host1 of two hosts) stall: the report names the host, and says of
    each rank that it stopped (a stall, or its program ended), never that it went on."""
    from mesh import Topology

    report = read_flight_records(dumps_in(runs["host_stalls"]), view_of("host_stalls"),
                                 topology=Topology(4, 2))
    assert report.stalled_hosts == ("host1",) and report.suspects == (2, 3)
    assert "went on" not in str(report) and "its program ended without this call" in str(report)
