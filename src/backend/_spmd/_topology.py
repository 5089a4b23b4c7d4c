"""The topology models (classes 5 and 6): communicators against the machine.

Given a :class:`mesh.Topology` (which host and NVLink domain each rank runs on), every
communicator the program holds (the world, each group it created or was answered, the
groups torch code made) is checked, for an NCCL job:

- **Uneven ranks per host** (5): a communicator spanning hosts with unequal numbers of its
  members on them.  NCCL 2.31.2 hangs in ``ncclCommInitRank`` with 7 + 8 ranks (NVIDIA/nccl
  #2385, in NVLS multicast setup: ``NCCL_NVLS_ENABLE=0`` avoids it); it typically follows
  dropping a failed rank.
- **NVLS multicast slots** (6): a communicator with two or more members in one NVLink domain
  uses NVLS there (about ``nvls_per_communicator`` = 10 multicast groups each in NCCL 2.29,
  pytorch #187155), and the domain's NVSwitch partition has ``nvls_slots`` = 128 (NVIDIA/nccl
  #2077: NCCL 2.29 fails instead of falling back).  The slots are the partition's, so the
  count is per domain, over the distinct communicators using NVLS there (at least the
  count of any one rank).
- **Communicators per rank** (6, any backend): more distinct communicators on a rank than
  the ``communicators`` budget given.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

from mesh import Topology
from mesh._core import FindingKind, verb

from ._events import Call, Create, Hit, Shrink, TorchCreate, TorchGroupKey, Trace
from ._report import Finding, who

__all__ = ["communicators", "topology_findings"]


def communicators(trace: Trace, world: int) -> dict[Hashable, tuple[str, Sequence[int]]]:
    """Every communicator ``trace``'s rank holds: key -> (name in words, members)."""
    held: dict[Hashable, tuple[str, Sequence[int]]] = {("world", world): ("world",
                                                                          range(world))}
    for e in trace.events:
        if isinstance(e, (Create, Hit)):
            held.setdefault(e.group.key, (e.group.label, e.group.members))
        elif isinstance(e, Call):
            held.setdefault(e.group.key, (e.group.label, e.group.members))
        elif isinstance(e, Shrink) and e.made is not None:
            held.setdefault(e.made.key, (e.made.label, e.made.members))
        elif isinstance(e, TorchCreate):  # keyed as a call on the group made keys it
            mine = [e.ranks] if e.what == "new_group" else [tuple(r) for r in e.ranks]
            for ranks in mine:
                if trace.rank in ranks:
                    held.setdefault(TorchGroupKey(e.name, ranks), (e.name, ranks))
    return held


def topology_findings(traces: Sequence[Trace], world: int, topology: Topology | None,
                      nccl: bool, *, budget: int | None, slots: int, per_comm: int
                      ) -> list[Finding]:
    """Uneven hosts, NVLS slots per domain, communicators per rank over ``budget``."""
    every: dict[Hashable, tuple[str, Sequence[int]]] = {}
    over: dict[int, int] = {}
    for t in traces:
        held = communicators(t, world)
        if budget is not None and len(held) > budget:
            over[t.rank] = len(held)
        for key, value in held.items():
            every.setdefault(key, value)
    found = [_over_budget(over, world, budget)] if over else []
    if topology is None or not nccl:
        return found
    return found + _on_the_machine(every, topology, slots, per_comm)


def _over_budget(over: dict[int, int], world: int, budget: int | None) -> Finding:
    """The ranks holding more communicators than ``budget`` (``over``: rank -> how many)."""
    most = max(over.values())
    ranks = tuple(sorted(over))
    return Finding(
        FindingKind.BUDGET,
        f"{who(ranks, world)} {verb(ranks, 'holds', 'hold')} up to {most} communicators, "
        f"over the budget of "
        f"{budget} per rank (each costs GPU memory and, on NVSwitch, NVLS slots): share "
        "groups between views (same family, same options) or drop unused dims",
        "budget", ranks)


def _on_the_machine(every: dict[Hashable, tuple[str, Sequence[int]]], topology: Topology,
                    slots: int, per_comm: int) -> list[Finding]:
    """Communicators with uneven ranks per host, and NVLink domains whose communicators
    need more NVLS multicast groups than their NVSwitch partition has slots."""
    found: list[Finding] = []
    per_domain: dict[int, list[str]] = defaultdict(list)
    for _key, (label, members) in every.items():
        hosts = Counter(topology.host(r) for r in members)
        if len(hosts) > 1 and len(set(hosts.values())) > 1:
            found.append(_uneven(label, members, hosts, topology))
        domains = Counter(topology.domain(r) for r in members)
        for d, n in domains.items():
            if n >= 2:
                per_domain[d].append(label)
    for d, labels in sorted(per_domain.items()):
        if len(labels) * per_comm > slots:
            spanned = _domain_ranks(topology, d)
            found.append(Finding(
                FindingKind.NVLS,
                f"NVLink domain {d} (ranks {spanned[0]} to {spanned[-1]}) holds {len(labels)} "
                f"communicators using NVLS ({_labels(labels)}): about {len(labels) * per_comm} "
                f"multicast groups at ~{per_comm} each, over its NVSwitch partition's {slots} "
                "slots (NCCL 2.29 fails instead of falling back, NVIDIA/nccl #2077): share "
                "communicators, or set NCCL_NVLS_ENABLE=0 for the small ones",
                f"nvls {len(labels)}", ()))
    return found


def _labels(labels: list[str]) -> str:
    counts = Counter(labels)
    shown = ", ".join(f"{n} {lab!r}" if n > 1 else repr(lab)
                      for lab, n in list(counts.items())[:6])
    return shown + (", ..." if len(counts) > 6 else "")


def _domain_ranks(topology: Topology, domain: int) -> list[int]:
    """The ranks of NVLink domain ``domain`` (its hosts regular or listed explicitly)."""
    hosts = [h for h in range(topology.num_hosts)
             if topology.domain(topology.ranks_on(h)[0]) == domain]
    return sorted(r for h in hosts for r in topology.ranks_on(h))


def _uneven(label: str, members: Sequence[int], hosts: Counter[int], topology: Any) -> Finding:
    split = " + ".join(str(n) for _, n in sorted(hosts.items()))
    where = ", ".join(f"{topology.host_name(h)}: {n}" for h, n in sorted(hosts.items())[:6])
    return Finding(
        FindingKind.UNEVEN_HOSTS,
        f"the {label!r} communicator of {len(members)} ranks has {split} ranks on its "
        f"{len(hosts)} hosts ({where}{', ...' if len(hosts) > 6 else ''}): NCCL 2.31.2 hangs "
        "at init with unequal ranks per host (NVIDIA/nccl #2385; NCCL_NVLS_ENABLE=0 avoids "
        "it): keep the same number of its ranks on every host, e.g. drop a whole host's "
        "slice after a failure",
        f"uneven {label} {sorted(hosts.values())}", tuple(members)[:1])
