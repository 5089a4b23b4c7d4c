"""A hung job read in mesh coordinates: torch's flight-recorder dumps against the plan.

Module map: ``_unpickle`` runs a pickle of builtins only, in bounded work; ``_records`` reads
dumps safely with it (or JSON; bounded);
``_groups`` finds which group of the plan each of torch's process groups is; ``_hung``
lines the members' calls up per group; ``_why`` says why a rank never entered a call (the
other ranks' order, the clock, Gloo's unseen point-to-point calls); ``_hidden`` finds a
skip hidden behind another rank's hang (a rank past a call its group never reached);
``_passed`` what the peers of a rank without a dump show it got past;
``_report`` words the
result (:class:`HangReport`).  Imports only the core and the machine model (``mesh._topology``):
no torch, no other wing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping

from .._core import FlightRecordError, MeshView, show
from .._topology import Topology
from ._hung import analyse
from ._records import FORMATS, MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_UNITS, read_dump
from ._report import SCHEMA, HangFinding, HangReport, report

__all__ = ["FORMATS", "MAX_DUMP_BYTES", "MAX_DUMP_DEPTH", "MAX_DUMP_UNITS", "SCHEMA",
           "HangFinding", "HangReport", "read_flight_records"]

MAX_DUMPS = 1 << 20
"""The most dump files one call reads (a million ranks)."""


def read_flight_records(paths: Iterable[str], views: Mapping[str, MeshView] | MeshView, *,
                        topology: Topology | None = None) -> HangReport:
    """What torch's flight-recorder dumps of a hung job (``paths``, one file per rank, the
    rank at the end of the name, or folders of them) say under its plan ``views`` (a view,
    or the plan's views by name): which group is stuck, by view, dim and coordinate; the
    ranks that never entered its pending call (by coordinate and, with a
    :class:`~mesh.Topology`, host); the first call where members diverge; and the ranks
    merely waiting behind them.

    A dump that cannot be read is a line of the report (:attr:`HangReport.unreadable`: which
    file, and why) and the others are read: the report is then partial
    (:attr:`HangReport.partial`) and the ranks of those files are without a dump.  Dumps
    that cannot be read as one job's, or a call where none can be read, raise
    :class:`~mesh.FlightRecordError` naming the file and what is wrong; so does a plan that
    is not the job's (a dump past its ranks, a ``mesh_<dim>`` group or one whose members the
    dump lists that it lacks, two disjoint groups of the job on one of its groups), before
    any finding; groups made by hand that the plan does not have are listed in
    :attr:`HangReport.mismatches`.  The files are read with an
    unpickler that loads only builtin containers and scalars, at most :data:`MAX_DUMP_BYTES`
    each, in work bounded by :data:`MAX_DUMP_UNITS` and nesting by :data:`MAX_DUMP_DEPTH`.
    """
    if isinstance(views, MeshView):
        views = {"mesh": views}
    if not (isinstance(views, Mapping) and views and
            all(isinstance(v, MeshView) for v in views.values())):
        raise FlightRecordError(f"the plan must be a mesh.MeshView or a non-empty mapping of "
                                f"view name -> MeshView, got {show(views)}")
    if topology is not None and not isinstance(topology, Topology):
        raise FlightRecordError(f"the topology must be a mesh.Topology or None, got "
                                f"{show(topology)}")
    files = _paths(paths)
    seen: dict[object, object] = {}  # the values the dumps repeat, kept once
    dumps, unreadable = [], []
    for path in files:
        try:
            dumps.append(read_dump(path, seen))
        except FlightRecordError as e:  # one bad file: a line of the report, not its end
            if len(files) == 1:
                raise
            unreadable.append(str(e))
    if not dumps:
        raise FlightRecordError(f"none of the {len(files)} dumps could be read; the first: "
                                f"{unreadable[0]}")
    hang = analyse(dumps, views)
    return report(hang, views, _host_words(topology), unreadable=tuple(unreadable))


def _paths(paths: Iterable[str]) -> list[str]:
    if isinstance(paths, (str, bytes)):
        raise FlightRecordError(f"paths must be a list of dump files, got the one string "
                                f"{show(paths)} (wrap it in a list)")
    files: list[str] = []
    for p in paths:
        if not isinstance(p, str):
            raise FlightRecordError(f"a dump's path must be a str, got {show(p)}")
        files += _folder(p) if os.path.isdir(p) else [p]
        if len(files) > MAX_DUMPS:
            raise FlightRecordError(f"more than {MAX_DUMPS:,} dump files")
    if not files:
        raise FlightRecordError("no dump files given: pass one per rank")
    return files


def _folder(path: str) -> list[str]:
    """The dumps in a folder: its files whose names end in a rank (``.json`` or ``.pkl``
    after it allowed), in name order."""
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise FlightRecordError(f"cannot list {path!r}: {e.strerror or e}") from None
    found = [os.path.join(path, n) for n in names if _RANKED.search(n)]
    if not found:
        raise FlightRecordError(f"the folder {path!r} holds no file named like a dump (a name "
                                "ending in its rank: fr_trace_rank_3, dump_3.json)")
    return found


_RANKED = re.compile(r"\d(\.json|\.pkl|\.pickle)?$")


def _host_words(topology: Topology | None) -> Callable[[int], str | None]:
    """A rank's host name on ``topology`` (None without one, or off it)."""
    def host(rank: int) -> str | None:
        if topology is None:
            return None
        try:
            return topology.host_name(topology.host(rank))
        except Exception:  # a rank the machine does not place: no host to name
            return None
    return host

