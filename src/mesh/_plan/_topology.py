"""Topologies: which host (and fast domain) each rank runs on, and which groups cross hosts."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from layout import complement

from .._core import (
    MAX_UNIVERSE,
    Dim,
    Family,
    MeshTypeError,
    MeshView,
    TopologyError,
    as_int,
    as_size,
    numpy,
    ordered,
    rank_rows,
    rank_table,
    show,
)
from ._blocks import most_blocks

__all__ = ["Topology"]


@attrs.frozen(init=False, repr=False, eq=False)
class Topology:
    """Hosts × devices per host, optionally grouped into fast domains of hosts.

    A value separate from views: the same plan can be checked against several
    machines.  By default rank ``r`` runs on host ``r // devices_per_host`` (how
    ``torchrun`` numbers ranks node by node); :meth:`from_hosts` takes an explicit
    host per rank instead.  ``hosts_per_domain`` groups consecutive hosts into fast
    domains (an NVLink domain spanning hosts, such as an NVL72 rack of 18 hosts):
    host ``h`` is in domain ``h // hosts_per_domain``; the last domain may be partial.

    Queries take a view and a dim and never list the world for a regular topology
    over an identity universe: :meth:`hosts_per_group` is O(ndim + devices per
    host**2) there (a group's host count depends only on where its first member
    sits within a host), and :meth:`hosts_of` is O(group size).  Explicit host lists
    and explicit universes list the dim's groups once (O(N)).

    >>> from mesh import MeshView, Topology
    >>> plan = MeshView.from_shape((4, 8, 4, 8), ("pp", "dp", "cp", "tp"))
    >>> topo = Topology(1024, 8)
    >>> [topo.hosts_per_group(plan, d) for d in plan.names], topo.is_intra_host(plan, "tp")
    ([4, 8, 4, 1], True)
    >>> topo.hosts_of(plan, 5, "cp"), topo.host(13)
    ((0, 1, 2, 3), 1)
    """

    world_size: int
    devices_per_host: int | None
    """Devices per host, or None for an explicit host list with hosts of differing sizes."""
    hosts_per_domain: int
    _hosts: tuple[int, ...] | None  # explicit: the host index of every rank
    _names: tuple[str, ...] | None  # explicit: each host's label, by index

    def __init__(self, world_size: object, devices_per_host: object, *,
                 hosts_per_domain: object = 1) -> None:
        """``world_size`` ranks on hosts of ``devices_per_host`` devices each."""
        n = as_size(world_size, "world_size")
        h = as_size(devices_per_host, "devices_per_host")
        f = _per_domain(hosts_per_domain)
        if n > MAX_UNIVERSE:
            raise TopologyError(f"a topology has at most 2**63 ranks, got {show(n)}")
        if n % h:
            raise TopologyError(
                f"world_size {n:,} is not a whole number of hosts of {show(h)} devices (valid: "
                f"a multiple of devices_per_host; use Topology.from_hosts for hosts of "
                "differing sizes)")
        self.__attrs_init__(n, h, f, None, None)

    @classmethod
    def from_hosts(cls, hosts: object, *, hosts_per_domain: object = 1) -> Topology:
        """A topology from the host of every rank: ``hosts[r]`` is rank ``r``'s host label
        (a hostname or an int, compared as text: ``1`` and ``"1"`` are one host; an
        ordered sequence).  Hosts are numbered in order of first appearance; consecutive
        equal-sized hosts give the regular topology (and its fast queries).

        >>> Topology.from_hosts(["a", "a", "b", "b"]) == Topology(4, 2)
        True
        """
        labels = ordered(hosts, "hosts")
        if not labels:
            raise TopologyError("hosts must name the host of at least one rank, got none")
        f = _per_domain(hosts_per_domain)
        index: dict[str, int] = {}
        for i, lab in enumerate(labels):
            index.setdefault(_label(lab, i), len(index))
        of = tuple([index[_label(lab, i)] for i, lab in enumerate(labels)])
        names = tuple(index)
        n, k = len(of), len(index)
        if n % k == 0 and of == tuple([r // (n // k) for r in range(n)]):
            return cls._trusted(n, n // k, f, None, names)
        return cls._trusted(n, None, f, of, names)

    @classmethod
    def _trusted(cls, world_size: int, devices_per_host: int | None, hosts_per_domain: int,
                 hosts: tuple[int, ...] | None, names: tuple[str, ...] | None) -> Topology:
        """A topology from fields already known valid (no checks)."""
        made = cls.__new__(cls)
        made.__attrs_init__(world_size, devices_per_host, hosts_per_domain, hosts, names)
        return made

    def with_domains(self, hosts_per_domain: object) -> Topology:
        """The same hosts grouped into fast domains of ``hosts_per_domain`` hosts."""
        return Topology._trusted(self.world_size, self.devices_per_host,
                                 _per_domain(hosts_per_domain), self._hosts, self._names)

    # ---- values ------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:  # unpickling goes through the constructors
        labels = None if self._hosts is None else [self.host_name(h) for h in self._hosts]
        return _rebuild, (self.world_size, self.devices_per_host, self.hosts_per_domain,
                          labels if self.devices_per_host is None else None, self._names)

    def _key(self) -> tuple[Any, ...]:
        return (self.world_size, self.devices_per_host, self.hosts_per_domain, self._hosts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        dom = f", hosts_per_domain={self.hosts_per_domain}" if self.hosts_per_domain > 1 else ""
        if self._hosts is None:
            return f"Topology({self.world_size}, {self.devices_per_host}{dom})"
        return f"Topology.from_hosts(<{self.world_size} ranks on {self.num_hosts} hosts>{dom})"

    @functools.cached_property
    def num_hosts(self) -> int:
        """The number of hosts."""
        if self._hosts is None:
            assert self.devices_per_host is not None
            return self.world_size // self.devices_per_host
        return max(self._hosts) + 1

    @property
    def num_domains(self) -> int:
        """The number of fast domains (the last may hold fewer hosts)."""
        return -(-self.num_hosts // self.hosts_per_domain)

    def host(self, rank: int) -> int:
        """The index of the host rank ``rank`` runs on."""
        r = as_int(rank, "a rank")
        if not 0 <= r < self.world_size:
            raise TopologyError(f"rank {show(r)} is not on this topology {self!r} (valid: "
                                f"0 <= rank < {self.world_size:,})")
        if self._hosts is None:
            assert self.devices_per_host is not None
            return r // self.devices_per_host
        return self._hosts[r]

    def domain(self, rank: int) -> int:
        """The index of the fast domain rank ``rank`` runs in."""
        return self.host(rank) // self.hosts_per_domain

    def host_name(self, host: int) -> str:
        """A host's label: the one given to :meth:`from_hosts`, else ``"host<i>"``."""
        h = as_int(host, "a host index")
        if not 0 <= h < self.num_hosts:
            raise TopologyError(f"host {show(h)} is not on this topology (valid: 0 <= host < "
                                f"{self.num_hosts:,})")
        return self._names[h] if self._names is not None else f"host{h}"

    def ranks_on(self, host: int) -> tuple[int, ...]:
        """The ranks that run on host ``host``, ascending: arithmetic for hosts of
        ``devices_per_host`` ranks, one pass over an explicit host list.

        >>> Topology(32, 8).ranks_on(1)
        (8, 9, 10, 11, 12, 13, 14, 15)
        """
        self.host_name(host)  # on the topology, or a TopologyError naming the valid hosts
        h = as_int(host, "a host index")
        if self._hosts is None:
            assert self.devices_per_host is not None
            return tuple(range(h * self.devices_per_host, (h + 1) * self.devices_per_host))
        return tuple([r for r, on in enumerate(self._hosts) if on == h])

    def host_size(self, host: int) -> int:
        """How many ranks run on host ``host``: O(1), without listing them (an explicit host
        list is counted once, for every host).

        >>> Topology.from_hosts(["a", "b", "b"]).host_size(1)
        2
        """
        self.host_name(host)  # on the topology, or a TopologyError naming the valid hosts
        if self._hosts is None:
            assert self.devices_per_host is not None
            return self.devices_per_host
        return self._host_sizes[as_int(host, "a host index")]

    @functools.cached_property
    def _host_sizes(self) -> tuple[int, ...]:
        sizes = [0] * self.num_hosts
        for h in self._hosts or ():
            sizes[h] += 1
        return tuple(sizes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data describing the topology (not a serialization format)."""
        return {"world": self.world_size, "devices_per_host": self.devices_per_host,
                "num_hosts": self.num_hosts, "hosts_per_domain": self.hosts_per_domain}

    # ---- queries ----------------------------------------------------------------------
    def hosts_of(self, view: MeshView, rank: int, dim: Dim) -> tuple[int, ...]:
        """The hosts ``rank``'s group along ``dim`` spans, in order of first member."""
        self._check(view)
        return tuple(dict.fromkeys([self.host(r) for r in view.group(rank, dim)]))

    def hosts_per_group(self, view: MeshView, dim: Dim) -> int:
        """The most hosts any group of ``view`` along ``dim`` spans."""
        self._check(view)
        return self._most(view.family(dim), 1)

    def domains_per_group(self, view: MeshView, dim: Dim) -> int:
        """The most fast domains any group of ``view`` along ``dim`` spans."""
        self._check(view)
        return self._most(view.family(dim), self.hosts_per_domain)

    def is_intra_host(self, view: MeshView, dim: Dim) -> bool:
        """Whether every group of ``view`` along ``dim`` stays inside one host."""
        return self.hosts_per_group(view, dim) == 1

    def is_intra_domain(self, view: MeshView, dim: Dim) -> bool:
        """Whether every group of ``view`` along ``dim`` stays inside one fast domain."""
        return self.domains_per_group(view, dim) == 1

    def _check(self, view: MeshView) -> None:
        if not isinstance(view, MeshView):
            raise MeshTypeError(f"a topology query takes a mesh.MeshView, got {show(view)}")
        if view.ranks.max_rank >= self.world_size:
            raise TopologyError(
                f"{view!r} reaches rank {view.ranks.max_rank:,}, beyond this topology's "
                f"{self.world_size:,} ranks ({self!r})")

    def _most(self, fam: Family, hosts_per_block: int) -> int:
        """The most blocks of ``hosts_per_block`` hosts any group of ``fam`` spans."""
        if self._hosts is None and fam.ranks.is_identity:
            assert self.devices_per_host is not None
            return most_blocks(fam.layout, fam.ranks.size,
                                self.devices_per_host * hosts_per_block)
        return self._most_listed(fam, hosts_per_block)

    def _most_listed(self, fam: Family, hosts_per_block: int) -> int:
        """Count each group's blocks after listing the family (explicit hosts or universe)."""
        np = numpy()
        starts = complement(fam.layout, fam.ranks.size)
        rows: Any = rank_rows(fam.ranks, starts, fam.layout) if np is None else \
            rank_table(fam.ranks, starts, fam.layout)
        hosts = self._hosts
        per = (self.devices_per_host or 1) * hosts_per_block
        if np is not None:
            b = rows // per if hosts is None else np.asarray(hosts)[rows] // hosts_per_block
            b.sort(axis=1)
            return int(((b[:, 1:] != b[:, :-1]).sum(axis=1) + 1).max())
        if hosts is None:
            return max(len({r // per for r in row}) for row in rows)
        return max(len({hosts[r] // hosts_per_block for r in row}) for row in rows)


def _per_domain(value: object) -> int:
    """``hosts_per_domain`` checked: a positive int below 2**63."""
    f = as_size(value, "hosts_per_domain")
    if f > MAX_UNIVERSE:
        raise TopologyError(f"hosts_per_domain must be below 2**63, got {show(f)}")
    return f


def _rebuild(world: int, per_host: int | None, per_domain: int, labels: list[str] | None,
             names: tuple[str, ...] | None) -> Topology:
    if labels is not None:
        return Topology.from_hosts(labels, hosts_per_domain=per_domain)
    if names is not None:  # regular hosts with labels
        return Topology.from_hosts([n for n in names for _ in range(per_host or 1)],
                                   hosts_per_domain=per_domain)
    return Topology(world, per_host, hosts_per_domain=per_domain)


def _label(lab: object, i: int) -> str:
    """A host label as text: a str, or an int in int64 (NumPy and torch ints too)."""
    if isinstance(lab, str):
        return str(lab)
    try:
        v = as_int(lab, f"hosts[{i}]", "a host label (a str or an int)")
    except MeshTypeError:
        raise MeshTypeError(f"hosts[{i}] must be a host label (a str or an int), got "
                            f"{show(lab)}") from None
    if not -MAX_UNIVERSE <= v < MAX_UNIVERSE:
        raise TopologyError(f"hosts[{i}] must be an int in int64 or a str, got {show(v)}")
    return str(v)
