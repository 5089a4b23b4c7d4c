"""Flight-recorder dumps written by hand, in torch 2.13's format (``"2.10"``, as
``_dump_fr_trace`` writes it for Gloo: no ``pg_config`` members), for tests that need no
processes: each rank's calls are given as ``(dim, op, shape)`` in its program order, and
each group is named as the facade names it (``group_desc`` ``mesh_<dim>``; the dim ``world``
is torch's default group).  A call's ``time_created_ns`` is ``t0`` plus 1 µs per place in
the program (``at``: a rank that skips a call keeps the others' clock), and with ``frames``
it carries the stack torch records: torch's frame, then ``train.py`` at line 100 plus its
place."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mesh import MeshView

Call = tuple[str, str, tuple[int, ...]]


def dump(view: MeshView, rank: int, calls: Sequence[Call], *, t0: int = 10**18,
         version: str = "2.10", backend: str = "gloo", at: Sequence[int] | None = None,
         frames: bool = False, lines: Sequence[int] | None = None) -> dict[str, Any]:
    """Rank ``rank``'s dump of ``calls`` on its groups of ``view``, each named
    ``<backend>:<op>`` (torch 2.15's hook writes ``nccl2:all_reduce``); call ``i`` made at
    ``t0`` plus ``at[i]`` µs (default ``i``), with ``frames`` at line ``100 + lines[i]`` of
    ``train.py`` (default: its place in time)."""
    seq: dict[str, int] = {}
    entries = []
    for i, (dim, op, shape) in enumerate(calls):
        name = _group_name(view, rank, dim)
        desc = "default_pg" if dim == "world" else f"mesh_{dim}"
        seq[name] = seq.get(name, 0) + 1
        place = i if at is None else at[i]
        stack = [{"name": op, "filename": "/venv/torch/distributed/distributed_c10d.py",
                  "line": 3245}, {"name": "step", "filename": "/job/train.py",
                                  "line": 100 + (place if lines is None else lines[i])}
                 ] if frames else []
        entries.append({
            "record_id": i, "pg_id": 1, "process_group": (name, desc),
            "collective_seq_id": seq[name], "p2p_seq_id": 0, "op_id": i + 1,
            "profiling_name": f"{backend}:{op}", "time_created_ns": t0 + place * 1000,
            "input_sizes": [list(shape)], "input_dtypes": ["Float"],
            "output_sizes": [list(shape)], "output_dtypes": ["Float"], "state": "scheduled",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 3000, "is_p2p": False, "frames": stack,
            "thread_id": "1", "thread_name": "python"})
    return {"version": version, "comm_lib_version": "", "entries": entries,
            "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}},
            "pg_status": {}}


def write(folder: Path, dumps: Mapping[int, dict[str, Any]], *, as_json: bool = False
          ) -> list[str]:
    """The dumps written to ``folder`` as torch names them; their paths in rank order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, data in sorted(dumps.items()):
        path = folder / (f"fr_json_{rank}.json" if as_json else f"fr_trace_rank_{rank}")
        path.write_bytes(json.dumps(data).encode() if as_json else pickle.dumps(data))
        paths.append(str(path))
    return paths


def step(n: int, *, tp: tuple[int, ...] = (4, 8)) -> list[Call]:
    """``n`` steps of a tp all_reduce then a dp all_reduce."""
    return [c for _ in range(n) for c in (("tp", "all_reduce", tp), ("dp", "all_reduce", (16,)))]


def run(view: MeshView, programs: Mapping[int, Sequence[Call | None]], *,
        backend: str = "gloo", frames: bool = False) -> dict[int, dict[str, Any]]:
    """The dumps of ``programs`` (each rank's calls in program order, None where it skips
    one; a rank whose program is cut short stalls there) run to their hang on blocking
    calls: a rank issues its next
    call when its previous one completed, and a collective completes once every member of
    its group issued it (whatever the shapes: Gloo completes a desync of equal bytes).  A
    call ``("p2p", "send" or "recv", (peer,))`` is a point-to-point call with ``peer``: a
    recv waits for the matching send, a send never waits, and neither is recorded (Gloo
    records no point-to-point calls).  The clock ticks once per round of issues, so a rank
    that went on past a call makes its next calls while the others wait in it; a call's
    frame is at line 100 plus its place in the program (skipped calls counted)."""
    issued: dict[int, list[tuple[Call, int, int]]] = {r: [] for r in programs}
    count: dict[tuple[str, int], int] = {}  # (group, rank) -> collectives issued there
    sent: dict[tuple[int, int], int] = {}  # (sender, receiver) -> sends issued
    lines = {r: [i for i, c in enumerate(p) if c is not None] for r, p in programs.items()}
    progs = {r: [c for c in p if c is not None] for r, p in programs.items()}
    at = dict.fromkeys(progs, 0)
    for tick in range(10_000):
        moved = False
        for r in sorted(progs):
            if at[r] >= len(progs[r]) or (at[r] and not _done(
                    view, r, progs, at[r] - 1, count, sent)):
                continue
            dim, op, shape = progs[r][at[r]]
            if dim == "p2p" and op == "send":
                sent[(r, shape[0])] = sent.get((r, shape[0]), 0) + 1
            elif dim != "p2p":
                name = _group_name(view, r, dim)
                count[(name, r)] = count.get((name, r), 0) + 1
                issued[r].append((progs[r][at[r]], tick, lines[r][at[r]]))
            at[r] += 1
            moved = True
        if not moved:
            break
    return {r: dump(view, r, [c for c, _, _ in issued[r]], at=[t for _, t, _ in issued[r]],
                    backend=backend, frames=frames, lines=[i for _, _, i in issued[r]])
            for r in programs}


def _group_name(view: MeshView, rank: int, dim: str) -> str:
    return "0" if dim == "world" else f"g-{dim}-{view.group(rank, dim)[0]}"


def _done(view: MeshView, rank: int, programs: Mapping[int, Sequence[Call]], i: int,
          count: Mapping[tuple[str, int], int], sent: Mapping[tuple[int, int], int]) -> bool:
    """Whether rank ``rank``'s call ``i`` (issued) has completed."""
    dim, op, shape = programs[rank][i]
    if dim == "p2p":
        if op == "send":
            return True
        nth = sum(1 for d, o, s in programs[rank][:i + 1] if d == "p2p" and o == "recv" and
                  s[0] == shape[0])
        return sent.get((shape[0], rank), 0) >= nth
    name = _group_name(view, rank, dim)
    members = range(len(programs)) if dim == "world" else view.group(rank, dim)
    nth = sum(1 for d, _, _ in programs[rank][:i + 1] if d == dim)
    return all(count.get((name, m), 0) >= nth for m in members)


def clockless(dumps: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``dumps`` without the clock: no entry holds a ``time_created_ns``."""
    return {r: d | {"entries": [{k: v for k, v in e.items() if k != "time_created_ns"}
                                for e in d["entries"]]} for r, d in dumps.items()}
