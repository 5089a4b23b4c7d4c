"""What pickles of an earlier release name: the machine model moved to ``mesh._topology``
(and a pickle now names ``mesh.Topology``).  Kept for one release; nothing imports it."""

from __future__ import annotations

from .._topology import Topology

__all__ = ["Topology"]


def _rebuild(world: int, per_host: int | None, per_domain: int, labels: list[str] | None,
             names: tuple[str, ...] | None) -> Topology:
    """Unpickles what the last release pickled (it pickled these fields)."""
    if labels is not None:
        return Topology.from_hosts(labels, hosts_per_domain=per_domain)
    if names is not None:  # regular hosts with labels
        return Topology.from_hosts([n for n in names for _ in range(per_host or 1)],
                                   hosts_per_domain=per_domain)
    return Topology(world, per_host, hosts_per_domain=per_domain)
