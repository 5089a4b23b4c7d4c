"""Flight-recorder dumps written by hand, in torch 2.13's format (``"2.10"``, as
``_dump_fr_trace`` writes it for Gloo: no ``pg_config`` members), for tests that need no
processes: each rank's calls are given as ``(dim, op, shape)`` in its program order, and
each group is named as the facade names it (``group_desc`` ``mesh_<dim>``)."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mesh import MeshView

Call = tuple[str, str, tuple[int, ...]]


def dump(view: MeshView, rank: int, calls: Sequence[Call], *, t0: int = 10**18,
         version: str = "2.10", backend: str = "gloo") -> dict[str, Any]:
    """Rank ``rank``'s dump of ``calls`` on its groups of ``view``, each named
    ``<backend>:<op>`` (torch 2.15's hook writes ``nccl2:all_reduce``)."""
    seq: dict[str, int] = {}
    entries = []
    for i, (dim, op, shape) in enumerate(calls):
        name = f"g-{dim}-{view.group(rank, dim)[0]}"
        seq[name] = seq.get(name, 0) + 1
        entries.append({
            "record_id": i, "pg_id": 1, "process_group": (name, f"mesh_{dim}"),
            "collective_seq_id": seq[name], "p2p_seq_id": 0, "op_id": i + 1,
            "profiling_name": f"{backend}:{op}", "time_created_ns": t0 + i * 1000,
            "input_sizes": [list(shape)], "input_dtypes": ["Float"],
            "output_sizes": [list(shape)], "output_dtypes": ["Float"], "state": "scheduled",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 3000, "is_p2p": False, "frames": [],
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
