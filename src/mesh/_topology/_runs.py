"""Building a topology from its parts, checked: host and domain labels, devices, runs of
ranks per host and per domain, and their canonical (run-length) form.  Pure functions over
ints and tuples; :class:`~._topology.Topology` calls them once, at construction."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .._core import MAX_UNIVERSE, MeshTypeError, TopologyError, as_int, as_size, ordered, show
from ._kinds import Domains, EvenDomains, ListedDomains, Runs

__all__ = [
    "bounded_hosts",
    "canonical_domains",
    "checked_devices",
    "checked_per_domain",
    "checked_runs",
    "domain_runs",
    "host_domain_runs",
    "host_label_text",
    "label_text",
    "merged_runs",
    "named_once",
    "one_rank_per_device",
    "permuted_domains",
    "run_length",
]



def checked_per_domain(value: object) -> int:
    """``hosts_per_domain`` checked: a positive int below 2**63."""
    f = as_size(value, "hosts_per_domain")
    if f > MAX_UNIVERSE:
        raise TopologyError(f"hosts_per_domain must be below 2**63, got {show(f)}")
    return f


def label_text(lab: object, what: str) -> str:
    """A host (or domain) label as text: a str, or an int in int64 (NumPy and torch ints
    too)."""
    if isinstance(lab, str):
        return str(lab)
    try:
        v = as_int(lab, what, "a label (a str or an int)")
    except MeshTypeError:
        raise MeshTypeError(f"{what} must be a label (a str or an int), got "
                            f"{show(lab)}") from None
    if not -MAX_UNIVERSE <= v < MAX_UNIVERSE:
        raise TopologyError(f"{what} must be an int in int64 or a str, got {show(v)}")
    return str(v)


def host_label_text(lab: object, what: str) -> str:
    """A host's label: :func:`label`, not empty (a saved topology names every host)."""
    text = label_text(lab, what)
    if not text:
        raise TopologyError(f"{what} must name a host (a non-empty str or an int), got ''")
    return text


def checked_devices(devices: object, of: list[int]) -> list[int]:
    """Every rank's device: ``devices`` checked (ints >= 0, one per rank), or each host's
    ranks numbered 0, 1, ... in rank order."""
    if devices is None:
        seen: dict[int, int] = {}
        out = []
        for h in of:
            out.append(seen.get(h, 0))
            seen[h] = out[-1] + 1
        return out
    given = ordered(devices, "devices")
    if len(given) != len(of):
        raise TopologyError(f"devices must give one device per rank ({len(of):,}), got "
                            f"{len(given):,}")
    out = [as_int(d, f"devices[{r}]") for r, d in enumerate(given)]
    bad = next((r for r, d in enumerate(out) if not 0 <= d < MAX_UNIVERSE), None)
    if bad is not None:
        raise TopologyError(f"devices[{bad}] must be a device index >= 0, got "
                            f"{show(out[bad])}")
    return out


def domain_runs(domains: object, of: list[int], hosts: int) -> Runs:
    """Each host's domain, from every rank's domain label, as runs of hosts (a host whose
    ranks name two domains is refused)."""
    given = ordered(domains, "domains")
    if len(given) != len(of):
        raise TopologyError(f"domains must give one domain label per rank ({len(of):,}), "
                            f"got {len(given):,}")
    index: dict[str, int] = {}
    per_host: dict[int, int] = {}
    for r, (h, lab) in enumerate(zip(of, given)):
        d = index.setdefault(label_text(lab, f"domains[{r}]"), len(index))
        first = per_host.setdefault(h, d)
        if first != d:
            raise TopologyError(f"rank {r} says its host (host {h}) is in domain {lab!r}, but "
                                f"an earlier rank of that host said {list(index)[first]!r}"
                                " (a host is in one fast domain)")
    return tuple((d, len(list(g))) for d, g in itertools.groupby(
        per_host[h] for h in range(hosts)))


def checked_runs(runs: object) -> Runs:
    """``Topology.from_runs``'s runs checked in form: an ordered, non-empty sequence of
    ``(host, count, first device)``, ints (NumPy and torch ints too), host and device >= 0,
    count >= 1, all below 2**63, the counts adding up to at most 2**63 ranks."""
    given = ordered(runs, "runs")
    if not given:
        raise TopologyError("runs must hold at least one run (host, count, first_device), got "
                            "none")
    out: list[tuple[int, ...]] = []
    total = 0
    for i, run in enumerate(given):
        parts = ordered(run, f"runs[{i}]")
        if len(parts) != 3:
            raise TopologyError(f"runs[{i}] must be (host, count, first_device), got "
                                f"{show(run)}")
        h, c, d = (as_int(x, f"runs[{i}][{j}]") for j, x in enumerate(parts))
        total += c
        if not (0 <= h < MAX_UNIVERSE and 1 <= c and 0 <= d < MAX_UNIVERSE) or \
                total > MAX_UNIVERSE:
            raise TopologyError(f"runs[{i}] must be (host, count, first_device): host and "
                                "device >= 0 below 2**63, count >= 1, the counts adding up to "
                                f"at most 2**63 ranks; got {show(run)}")
        out.append((h, c, d))
    return tuple(out)


def bounded_hosts(runs: Runs, world: int, names: Sequence[str] | None = None) -> int:
    """The hosts the runs number (the largest host index + 1), every index checked below the
    world first (a host runs at least one rank, so a larger index leaves a host idle):
    nothing that grows with an index runs before this.  The error names the least idle
    host (found among the runs: bounded) and the bound."""
    most = max(h for h, _, _ in runs)
    if most >= world:
        taken = {h for h, _, _ in runs}
        idle = next(i for i in range(len(taken) + 1) if i not in taken)
        label = names[idle] if names is not None and idle < len(names) else f"host{idle}"
        raise TopologyError(f"host {idle:,} ({label}) has no ranks: every host of a topology "
                            f"runs at least one rank (a run of ranks is on host {most:,}: a "
                            f"topology of {world:,} ranks has hosts 0 <= host < {world:,})")
    return most + 1


def host_domain_runs(domains: object, hosts: int) -> Runs:
    """Each host's fast domain label (``domains[h]``, one per host, in host order) as runs of
    hosts, domains numbered by first appearance."""
    given = ordered(domains, "domains")
    if len(given) != hosts:
        raise TopologyError(f"domains must give one domain label per host ({hosts:,}), got "
                            f"{len(given):,}")
    index: dict[str, int] = {}
    of = [index.setdefault(label_text(lab, f"domains[{h}]"), len(index))
          for h, lab in enumerate(given)]
    return tuple((d, len(list(g))) for d, g in itertools.groupby(of))


def run_length(placed: list[tuple[int, int]]) -> Runs:
    """``(host, device)`` per rank as runs ``(host, count, first device)``."""
    runs: list[list[int]] = []
    for h, d in placed:
        if runs and runs[-1][0] == h and runs[-1][2] + runs[-1][1] == d:
            runs[-1][1] += 1
        else:
            runs.append([h, 1, d])
    return tuple(tuple(r) for r in runs)


def merged_runs(runs: Sequence[tuple[int, ...]]) -> Runs:
    """Runs with each run that continues the one before (same host, next device) merged."""
    out: list[list[int]] = []
    for h, c, d in runs:
        if out and out[-1][0] == h and out[-1][2] + out[-1][1] == d:
            out[-1][1] += c
        else:
            out.append([h, c, d])
    return tuple(tuple(r) for r in out)


def one_rank_per_device(runs: Runs, names: tuple[str, ...] | None) -> None:
    """Refuse two ranks on one device of one host, naming them."""
    spans: dict[int, list[tuple[int, int, int]]] = {}
    start = 0
    for h, c, d in runs:
        spans.setdefault(h, []).append((d, d + c, start))
        start += c
    for h, held in spans.items():
        held.sort()
        for (a0, a1, ra), (b0, _, rb) in itertools.pairwise(held):
            if b0 < a1:
                host = names[h] if names is not None else f"host{h}"
                raise TopologyError(
                    f"two ranks claim one device: rank {ra + b0 - a0:,} and rank {rb:,} are "
                    f"both on host {h} ({host}), device {b0:,}")
        if held[-1][1] > MAX_UNIVERSE:
            raise TopologyError(f"a device index on host {h} passes 2**63")


def permuted_domains(domains: Runs, order: list[int], count: int) -> Runs:
    """Domain runs over hosts numbered anyhow (``count`` of them), renumbered as ``order``
    renumbers the hosts (host ``order[i]`` becomes host ``i``)."""
    total = sum(c for _, c in domains)
    if total != count:
        raise TopologyError(f"the domains hold {total:,} hosts, but the topology has "
                            f"{count:,} hosts")
    if order == list(range(count)):
        return domains
    per_host = [d for d, c in domains for _ in range(c)]  # count <= the runs: bounded
    return tuple((d, len(list(g))) for d, g in itertools.groupby(per_host[o] for o in order))


def canonical_domains(domains: Runs, hosts: int) -> Domains:
    """The domains of ``hosts`` hosts from runs of hosts: :class:`EvenDomains` when the runs
    are consecutive domains of equal size (the last may be smaller), else
    :class:`ListedDomains` with domains renumbered by first appearance, runs that continue
    merged; a domain index without hosts is refused."""
    total = sum(c for _, c in domains)
    if total != hosts:
        raise TopologyError(f"the domains hold {total:,} hosts, but the topology has "
                            f"{hosts:,} hosts")
    most = max(d for d, _ in domains)  # checked before any work that grows with it
    used = list(dict.fromkeys(d for d, _ in domains))
    if len(used) <= most:
        taken = set(used)
        idle = next(i for i in range(len(used) + 1) if i not in taken)  # bounded by the runs
        past = f" (a run of hosts is in domain {most:,}: {hosts:,} hosts have domains 0 <= " \
            f"domain < {hosts:,})" if most >= hosts else ""
        raise TopologyError(f"domain {idle:,} has no hosts: every domain holds at least "
                            f"one{past}")
    new = {old: i for i, old in enumerate(used)}
    runs: list[list[int]] = []
    for d, c in domains:
        if runs and runs[-1][0] == new[d]:
            runs[-1][1] += c
        else:
            runs.append([new[d], c])
    f = runs[0][1]
    if all(d == i for i, (d, _) in enumerate(runs)) and all(c == f for _, c in runs[:-1]) \
            and runs[-1][1] <= f:
        return EvenDomains(f, hosts)
    return ListedDomains(tuple(tuple(r) for r in runs))


def named_once(names: tuple[str, ...]) -> None:
    """Refuse a host name given twice (a name is a host)."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise TopologyError(f"host {n!r} is named twice ('hosts' names each host once)")
        seen.add(n)
