"""Fuzz of the hang reader's public entry, :func:`mesh.read_flight_records` (issue 45).

THE LAW: whatever the dumps hold, it returns a :class:`~mesh.HangReport` or raises a
``mesh.MeshError`` (the reader's is ``FlightRecordError``), and a report names no rank outside
the plan's world: not as dumped, without a dump, a suspect, at fault or possibly at fault in a
finding, blocked or waited for; its words and JSON are produced without an error.

The dumps: random programs on random meshes run to their hang (``tests/hang_synth.run``:
random skips and stalls, some ranks' dumps left out, the clock kept or dropped, Gloo's or
2.15's ``nccl2`` names), then fields of random entries replaced by junk (wrong types, negative,
huge or missing sequence numbers, times and record ids, foreign group names and descs, lists
of members that are no group of the plan), whole dumps replaced by junk, files named for
ranks past the world, written as pickles or JSON.
"""

from __future__ import annotations

import json
import pickle
import tempfile
from pathlib import Path
from typing import Any

from hang_synth import Call, clockless, run
from hypothesis import event, given
from hypothesis import strategies as st

from mesh import HangReport, MeshError, MeshView, Topology, read_flight_records

DIMS = ("dp", "tp", "pp", "cp")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all_single", "broadcast")
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                 st.text(max_size=6), st.lists(st.integers(-3, 9), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
FIELDS = ("process_group", "collective_seq_id", "p2p_seq_id", "record_id", "profiling_name",
          "time_created_ns", "input_sizes", "input_dtypes", "state", "is_p2p", "frames")
SEQS = st.one_of(st.integers(-2, 8), st.just(2**63), st.just(2**70))
GROUPS = st.tuples(st.sampled_from(["0", "g-dp-0", "g-tp-1", "g-pp-0", "x", ""]),
                   st.sampled_from(["default_pg", "mesh_dp", "mesh_tp", "mesh_pp", "mesh_zz",
                                    "", "undefined"]))


@st.composite
def jobs(draw: st.DrawFn) -> tuple[MeshView, dict[int, Any], int]:
    """A mesh, its ranks' dumps (some junk, some missing) and how many hosts it has."""
    ndim = draw(st.integers(1, 3))
    names = tuple(draw(st.permutations(DIMS))[:ndim])
    view = MeshView.from_shape(tuple(draw(st.lists(st.integers(1, 3), min_size=ndim,
                                                   max_size=ndim))), names)
    world = view.ranks.max_rank + 1
    steps = [(draw(st.sampled_from((*names, "world"))), draw(st.sampled_from(OPS)),
              (draw(st.integers(1, 4)),)) for _ in range(draw(st.integers(1, 6)))]
    programs: dict[int, list[Call | None]] = {}
    for r in range(world):
        cut = draw(st.integers(0, len(steps))) if draw(st.booleans()) else len(steps)
        programs[r] = [None if draw(st.integers(0, 9)) == 0 else c for c in steps[:cut]]
    dumps: dict[int, Any] = run(view, programs, backend=draw(st.sampled_from(["gloo", "nccl2"])),
                                frames=draw(st.booleans()))
    if draw(st.booleans()):
        dumps = clockless(dumps)
    for r in draw(st.lists(st.integers(0, world - 1), max_size=world)):
        dumps.pop(r, None)
    for _ in range(draw(st.integers(0, 4))):
        _spoil(draw, dumps, world)
    if not dumps:
        dumps[draw(st.integers(0, world + 2))] = draw(JUNK)
    return view, dumps, draw(st.integers(1, world))


def _spoil(draw: st.DrawFn, dumps: dict[int, Any], world: int) -> None:
    """One change of junk: an entry's field, a whole dump, a dump's members or version, or a
    dump moved to another rank (past the world too)."""
    rank = draw(st.sampled_from(sorted(dumps))) if dumps else 0
    dump = dumps.get(rank)
    how = draw(st.integers(0, 5))
    if how == 0 or not (isinstance(dump, dict) and isinstance(dump.get("entries"), list)):
        dumps[rank] = draw(JUNK)
    elif how == 1 and dump["entries"]:
        entry = draw(st.sampled_from(dump["entries"]))
        field = draw(st.sampled_from(FIELDS))
        entry[field] = draw(st.one_of(JUNK, SEQS, GROUPS))
        if draw(st.booleans()):
            entry.pop(draw(st.sampled_from(FIELDS)), None)
    elif how == 2:
        members = draw(st.lists(st.integers(-1, world + 1), max_size=4))
        dump["pg_config"] = {draw(GROUPS)[0]: {"name": "", "desc": "", "ranks": str(members)}}
    elif how == 3:
        dump["version"] = draw(st.one_of(st.sampled_from(["2.10", "2.11", "2.9", "3.0"]), JUNK))
    elif how == 4:
        dumps[draw(st.integers(0, world + 2))] = dumps.pop(rank)
    else:
        dump["entries"] = dump["entries"] + draw(st.lists(st.fixed_dictionaries(
            {f: st.one_of(SEQS, GROUPS, st.sampled_from(["gloo:all_reduce", "scheduled"]))
             for f in FIELDS}), max_size=2))


def _write(folder: Path, dumps: dict[int, Any], as_json: bool) -> list[str]:
    paths = []
    for rank, data in sorted(dumps.items()):
        path = folder / (f"fr_{rank}.json" if as_json else f"fr_trace_rank_{rank}")
        try:
            path.write_bytes(json.dumps(data).encode() if as_json else pickle.dumps(data))
        except (TypeError, ValueError):  # junk JSON cannot spell (a tuple key): its repr
            path.write_bytes(repr(data).encode())
        paths.append(str(path))
    return paths


def _named(report: HangReport) -> set[int]:
    """Every rank the report names."""
    ranks = {*report.dumped, *report.no_dump, *report.suspects}
    for f in report.findings:
        ranks |= {*f.ranks, *f.maybe, *f.group.members}
    for r, g, waits in ((b.rank, b.group, b.waits_for) for b in report.blocked):
        ranks |= {r, *g.members, *waits}
    for s in report.groups:
        ranks |= {*s.entered, *s.never, *s.no_dump}
    return ranks


@given(job=jobs(), as_json=st.booleans(), hosts=st.booleans())
def test_the_reader_returns_a_report_within_the_world_or_a_typed_error(
        job: tuple[MeshView, dict[int, Any], int], as_json: bool, hosts: bool) -> None:
    view, dumps, per_host = job
    world = view.ranks.max_rank + 1
    topology = Topology(world, per_host) if hosts and world % per_host == 0 else None
    with tempfile.TemporaryDirectory() as folder:
        paths = _write(Path(folder), dumps, as_json)
        try:
            report = read_flight_records(paths, view, topology=topology)
        except MeshError:
            event("refused")
            return
    event(f"read: {'a hang' if not report.ok else 'no hang'}")
    assert _named(report) <= set(range(world)), str(report)
    assert str(report).startswith(f"meshlayout hang over {world} ranks")
    data = json.loads(json.dumps(report.to_dict()))
    assert {s["rank"] for s in data["suspects"]} <= set(range(world))
