"""Where the machine a plan runs on differs from the topology it declares: the data of
``meshlayout explain --topology FILE`` (or ``--hosts``, ``--hosts-file``).

:func:`differences` compares two topologies (the plan's ``TOPOLOGY``, or the hosts of 8
assumed without one, against the machine) rank by rank without listing the world (the
first rank whose host, or fast domain, differs: :func:`~mesh._topology.first_split`),
and the plan's dims on each: those whose groups span more (or fewer) hosts or domains on
the machine.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core import MeshError, MeshView, show
from .._plan import explain, machine_fields
from .._topology import Topology, first_split

__all__ = ["differences"]


def differences(views: Mapping[str, MeshView], declared: Topology | None, declared_from: str,
                machine: Topology, source: str) -> dict[str, Any]:
    """``{"source", "declared_from", "declared", "differences", "dims"}``: the machine
    (``source`` names the flag) against the ``declared`` topology (``declared_from`` says
    whose: the plan's, or assumed), each difference a sentence, and the dims placed
    differently on the machine."""
    data: dict[str, Any] = {"source": source, "declared_from": declared_from,
                            "declared": None, "differences": [], "dims": []}
    if declared is None:
        return data
    data["declared"] = machine_fields(declared, declared_from.startswith("assumed"))
    data["differences"] = _machine_lines(declared, machine)
    try:
        before = explain(views, declared).to_dict()
    except MeshError as e:  # the plan does not fit the topology it declares
        data["differences"].append(f"the plan does not fit the declared topology: {e}")
        return data
    after = explain(views, machine).to_dict()
    for vb, va in zip(before["views"], after["views"]):
        for db, da in zip(vb["dims"], va["dims"]):
            if (db["hosts_per_group"], db["domains_per_group"]) != (
                    da["hosts_per_group"], da["domains_per_group"]):
                data["dims"].append({
                    "view": vb["name"], "dim": db["name"],
                    "declared": {k: db[k] for k in ("hosts_per_group", "domains_per_group")},
                    "machine": {k: da[k] for k in ("hosts_per_group", "domains_per_group")}})
    return data


def _machine_lines(declared: Topology, machine: Topology) -> list[str]:
    """Sentences: the world, the hosts and their sizes, the first rank on another host, the
    domains, the first rank in another domain."""
    out = []
    if declared.world_size != machine.world_size:
        out.append(f"world: {declared.world_size:,} ranks declared, {machine.world_size:,} on "
                   "the machine")
    hosts = (_hosts(declared), _hosts(machine))
    if hosts[0] != hosts[1]:
        out.append(f"hosts: {hosts[0]} declared, {hosts[1]} on the machine")
    split = first_split(declared, machine)
    if split is not None and split < min(declared.world_size, machine.world_size):
        out.append(f"the first rank whose host differs: rank {split:,} (declared on host "
                   f"{_host(declared, split)}, on the machine on host {_host(machine, split)}; "
                   "the ranks before it share hosts alike)")
    doms = (_domains(declared), _domains(machine))
    if doms[0] != doms[1]:
        out.append(f"fast domains: {doms[0]} declared, {doms[1]} on the machine")
    split = first_split(declared, machine, domains=True)
    if split is not None and split < min(declared.world_size, machine.world_size):
        out.append(f"the first rank whose fast domain differs: rank {split:,} (declared in "
                   f"domain {declared.domain(split):,}, on the machine in domain "
                   f"{machine.domain(split):,})")
    return out


def _hosts(t: Topology) -> str:
    sizes = t.sizes()[0]
    each = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,}"
    return f"{t.num_hosts:,} host{'s' * (t.num_hosts != 1)} of {each} devices"


def _host(t: Topology, rank: int) -> str:
    h = t.host(rank)
    name = t.host_name(h)
    return f"{h:,}" if name == f"host{h}" else f"{h:,}, {show(name)}"


def _domains(t: Topology) -> str:
    if t.hosts_per_domain == 1:
        return "none (each host its own)"
    ranks = t.sizes()[1]
    each = f"{ranks[0]:,}" if len(ranks) == 1 else f"{ranks[0]:,} to {ranks[-1]:,}"
    how = "as listed" if t.hosts_per_domain is None else \
        f"of {min(t.hosts_per_domain, t.num_hosts):,} hosts"
    return f"{t.num_domains:,} domain{'s' * (t.num_domains != 1)} {how} ({each} ranks)"
