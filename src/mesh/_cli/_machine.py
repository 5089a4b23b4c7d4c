"""The machine the ``meshlayout`` command's flags name: ``--topology FILE`` (a saved
:class:`~mesh.Topology`), ``--hosts LIST`` (a Slurm host list) or ``--hosts-file FILE`` (one
host per line, in rank order), with ``--devices-per-host`` and ``--hosts-per-domain``.

Files are read up to :data:`MOST_MACHINE_BYTES`; a host list is counted before it is
expanded; anything wrong is a :class:`~mesh._plan._planfile.Refused` (exit status 2) or a
:class:`~mesh.MeshError` naming it.
"""

from __future__ import annotations

import argparse
import json

from .._core import InvalidMeshDataError, read_bounded
from .._topology import Topology, expand_hosts, hosts_file_lines
from ._planfile import Refused

__all__ = ["MOST_MACHINE_BYTES", "machine", "source"]

MOST_MACHINE_BYTES = 1 << 24
"""The largest topology or hosts file read (16 MiB: a topology saved by ``to_dict`` holds a
run per host of about 16 bytes, so a million hosts fit; JSON that size parses in about a
second into about 200 MB)."""


def source(args: argparse.Namespace) -> str | None:
    """The flag that names the machine, as the user wrote it (None: none does)."""
    for flag in ("topology", "hosts", "hosts_file"):
        value = getattr(args, flag, None)
        if value is not None:
            return f"--{flag.replace('_', '-')} {value}"
    return None


def machine(args: argparse.Namespace) -> Topology | None:
    """The topology ``--topology``, ``--hosts`` or ``--hosts-file`` names (None: none)."""
    if getattr(args, "topology", None) is not None:
        if args.devices_per_host is not None:
            raise Refused("--devices-per-host describes the machine, which --topology FILE "
                          "gives whole: leave it out (--hosts-per-domain may regroup the hosts)")
        topo = _saved(args.topology)
    elif getattr(args, "hosts", None) is not None:
        if args.devices_per_host is None:
            raise Refused("--hosts names the hosts; give --devices-per-host N too (the ranks "
                          "each host runs)")
        names = expand_hosts(args.hosts)
        topo = Topology.from_runs([(h, args.devices_per_host, 0) for h in range(len(names))],
                                  hosts=names)
    elif getattr(args, "hosts_file", None) is not None:
        topo = _hosts_file(args.hosts_file, args.devices_per_host,
                           args.hosts_per_domain is not None)
    else:
        return None
    if args.world is not None and args.world != topo.world_size:
        raise Refused(f"--world {args.world:,} differs from the machine's {topo.world_size:,} "
                      f"ranks ({source(args)})")
    return topo if args.hosts_per_domain is None else topo.with_domains(args.hosts_per_domain)


def _saved(path: str) -> Topology:
    text = read_bounded(path, "the topology file", MOST_MACHINE_BYTES, Refused)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # not JSON (UnicodeDecodeError is a ValueError)
        raise InvalidMeshDataError(f"the topology file {path!r} is not JSON: "
                                   f"{str(e)[:200]}") from None
    try:
        return Topology.from_dict(data)
    except InvalidMeshDataError as e:
        raise InvalidMeshDataError(f"the topology file {path!r}: {e}") from None


def _hosts_file(path: str, slots: int | None, regrouped: bool) -> Topology:
    """A hosts file's topology: each line's host takes its ``slots=`` (else ``slots``) next
    ranks, at its next devices; ``domain=`` names its fast domain (on every line or none)."""
    what = f"the hosts file {path!r}"
    try:
        text = read_bounded(path, "the hosts file", MOST_MACHINE_BYTES, Refused).decode()
    except UnicodeDecodeError:
        raise Refused(f"{what} is not UTF-8 text (one host per line, in rank order)") from None
    lines = hosts_file_lines(text, what)
    named = [line.domain is not None for line in lines]
    if any(named) and not all(named):
        raise Refused(f"{what} gives domain= on some lines only: give it on every line or none")
    if all(named) and regrouped:
        raise Refused(f"{what} names the domains (domain=): leave --hosts-per-domain out")
    index: dict[str, int] = {}
    used: dict[str, int] = {}
    domain_of: dict[int, str] = {}
    runs: list[list[int]] = []
    for line in lines:
        n = line.slots if line.slots is not None else slots
        if n is None:
            raise Refused(f"{what}: host {line.name!r} has no slots=N; give it, or "
                          "--devices-per-host N for every line without one")
        h = index.setdefault(line.name, len(index))
        if line.domain is not None and domain_of.setdefault(h, line.domain) != line.domain:
            raise Refused(f"{what}: host {line.name!r} is in domain {domain_of[h]!r} and "
                          f"{line.domain!r} (a host is in one fast domain)")
        runs.append([h, n, used.get(line.name, 0)])
        used[line.name] = used.get(line.name, 0) + n
    domains = [domain_of[h] for h in range(len(index))] if all(named) else None
    return Topology.from_runs(runs, hosts=list(index), domains=domains)
