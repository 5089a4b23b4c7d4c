"""Topologies: which host (and fast domain) each rank runs on, and which groups cross hosts."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import attrs

from layout import complement

from .._core import (
    MAX_LISTED_RANKS,
    MAX_UNIVERSE,
    Dim,
    Family,
    MeshTypeError,
    MeshView,
    TooManyRanksError,
    TopologyError,
    as_int,
    as_size,
    check_limit,
    numpy,
    ordered,
    rank_rows,
    rank_table,
    show,
)
from ._blocks import most_blocks
from ._kinds import Domains, EvenDomains, EvenHosts, Hosts, ListedHosts, Runs, Stretch
from ._runs import (
    bounded_hosts,
    canonical_domains,
    checked_devices,
    checked_per_domain,
    checked_runs,
    domain_runs,
    host_domain_runs,
    host_label_text,
    merged_runs,
    named_once,
    one_rank_per_device,
    permuted_domains,
    run_length,
)
from ._topofile import Fields, data_of, fields_of

__all__ = ["Topology", "first_split"]

_SCANNED = 1 << 20  # the most ranks first_crossing reads group by group before it lists
_MOST_IN_PYTHON = 1 << 26  # the most ranks ranks_in_order lists, whatever its limit


@attrs.frozen(init=False, repr=False, eq=False)
class Topology:
    """Hosts × devices per host, optionally grouped into fast domains of hosts.

    A value separate from views: the same plan can be checked against several
    machines.  By default rank ``r`` runs on host ``r // devices_per_host`` (how
    ``torchrun`` numbers ranks node by node); :meth:`from_hosts` takes an explicit
    host per rank instead (hosts of differing sizes, ranks not numbered host by host),
    and :meth:`from_dict` reads what :meth:`to_dict` (or ``backend.discover_topology``)
    wrote.  ``hosts_per_domain`` groups consecutive hosts into fast domains (an NVLink
    domain spanning hosts, such as an NVL72 rack of 18 hosts): host ``h`` is in domain
    ``h // hosts_per_domain``; the last domain may be partial.  Domains may also be
    explicit (partial racks, a rack split between jobs): ``from_hosts(..., domains=...)``.
    :meth:`from_runs` takes runs of consecutive ranks on one host (what a launcher, a
    hosts file or discovery knows).

    A topology composes two small values (``_kinds``): how ranks sit on hosts (regular,
    or runs of consecutive ranks on one host: the data grows with the hosts when ranks
    are numbered host by host, not with the ranks) and how hosts sit in fast domains
    (regular, or runs of consecutive hosts); it asks them without branching on the form.
    Queries take a view and a dim and never list the world for a regular topology
    over an identity universe: :meth:`hosts_per_group` is O(ndim + devices per
    host**2) there (a group's host count depends only on where its first member
    sits within a host), and :meth:`hosts_of` is O(group size).  Explicit host lists,
    explicit domains and explicit universes list the dim's groups once (O(N)).

    >>> from mesh import MeshView, Topology
    >>> plan = MeshView.from_shape((4, 8, 4, 8), ("pp", "dp", "cp", "tp"))
    >>> topo = Topology(1024, 8)
    >>> [topo.hosts_per_group(plan, d) for d in plan.names], topo.is_intra_host(plan, "tp")
    ([4, 8, 4, 1], True)
    >>> topo.hosts_of(plan, 5, "cp"), topo.host(13)
    ((0, 1, 2, 3), 1)
    """

    world_size: int
    _hosts: Hosts  # how ranks sit on hosts: EvenHosts, or ListedHosts (runs of ranks)
    _domains: Domains  # how hosts sit in fast domains: EvenDomains, or ListedDomains
    _names: tuple[str, ...] | None  # each host's label, by index (None: host<i>)

    def __init__(self, world_size: object, devices_per_host: object, *,
                 hosts_per_domain: object = 1) -> None:
        """``world_size`` ranks on hosts of ``devices_per_host`` devices each."""
        n = as_size(world_size, "world_size")
        h = as_size(devices_per_host, "devices_per_host")
        f = checked_per_domain(hosts_per_domain)
        if n > MAX_UNIVERSE:
            raise TopologyError(f"a topology has at most 2**63 ranks, got {show(n)}")
        if n % h:
            raise TopologyError(
                f"world_size {n:,} is not a whole number of hosts of {show(h)} devices (valid: "
                f"a multiple of devices_per_host; use Topology.from_hosts for hosts of "
                "differing sizes)")
        self.__attrs_init__(n, EvenHosts(n, h), EvenDomains(f, n // h), None)

    @property
    def devices_per_host(self) -> int | None:
        """Devices per host, or None for an explicit host list (hosts of differing sizes, or
        ranks not numbered host by host)."""
        return self._hosts.per_host if isinstance(self._hosts, EvenHosts) else None

    @property
    def hosts_per_domain(self) -> int | None:
        """Hosts per fast domain (1: a domain is a host), or None for explicit domains."""
        return self._domains.per_domain if isinstance(self._domains, EvenDomains) else None

    @classmethod
    def from_hosts(cls, hosts: object, *, hosts_per_domain: object = 1,
                   domains: object = None, devices: object = None) -> Topology:
        """A topology from the host of every rank: ``hosts[r]`` is rank ``r``'s host label
        (a hostname or an int, compared as text: ``1`` and ``"1"`` are one host; an
        ordered sequence).  Hosts are numbered in order of first appearance; consecutive
        equal-sized hosts give the regular topology (and its fast queries).

        ``domains[r]``, if given, is rank ``r``'s fast domain label (every rank of a host
        in one domain; instead of ``hosts_per_domain``); ``devices[r]`` its device index
        on its host (default: the ranks of a host take devices 0, 1, ... in rank order;
        two ranks may not claim one device).

        >>> Topology.from_hosts(["a", "a", "b", "b"]) == Topology(4, 2)
        True
        >>> Topology.from_hosts(["a", "a", "b", "c"], domains=["r1"] * 3 + ["r2"]).num_domains
        2
        """
        labels = ordered(hosts, "hosts")
        if not labels:
            raise TopologyError("hosts must name the host of at least one rank, got none")
        f = checked_per_domain(hosts_per_domain)
        index: dict[str, int] = {}
        of = [index.setdefault(host_label_text(lab, f"hosts[{i}]"), len(index))
              for i, lab in enumerate(labels)]
        placed = checked_devices(devices, of)
        host_domains = None
        if domains is not None:
            if f != 1:
                raise TopologyError("give hosts_per_domain or domains, not both (domains "
                                    f"names each rank's domain), got hosts_per_domain={f}")
            host_domains = domain_runs(domains, of, len(index))
        runs = run_length([(h, d) for h, d in zip(of, placed)])
        return cls._from_runs(len(of), runs, tuple(index),
                              f if host_domains is None else host_domains)

    @classmethod
    def from_runs(cls, runs: object, *, hosts: object = None, hosts_per_domain: object = 1,
                  domains: object = None) -> Topology:
        """A topology from runs of consecutive ranks, in rank order: ``runs[i] = (host,
        count, first_device)`` puts the next ``count`` ranks on host index ``host`` (hosts
        numbered anyhow, renumbered by first appearance), at devices ``first_device``,
        ``first_device + 1``, ...; the world is the sum of the counts.  What a launcher, a
        hosts file or discovery knows, without one entry per rank.

        ``hosts``, if given, names each host index (``hosts[h]``: a str or an int label, each
        once); ``domains[h]``, if given, is host ``h``'s fast domain label (instead of
        ``hosts_per_domain``).  Every host index is bounded by the world, and every host
        runs at least one rank; anything else is a :class:`~mesh.TopologyError` naming it.

        >>> Topology.from_runs([(0, 4, 0), (1, 4, 0)]) == Topology(8, 4)
        True
        >>> t = Topology.from_runs([(0, 2, 0), (1, 3, 0), (0, 1, 2)], hosts=["a", "b"],
        ...                        domains=["r1", "r2"])
        >>> t.host(5), t.device(5), t.host_name(1), t.num_domains
        (0, 2, 'b', 2)
        """
        checked = checked_runs(runs)
        world = sum(c for _, c, _ in checked)
        f = checked_per_domain(hosts_per_domain)
        count = bounded_hosts(checked, world)
        names = None if hosts is None else tuple(
            host_label_text(n, f"hosts[{i}]") for i, n in enumerate(ordered(hosts, "hosts")))
        if names is not None and len(names) != count:
            raise TopologyError(f"hosts must name each of the {count:,} hosts the runs use, "
                                f"got {len(names):,} names")
        if domains is None:
            return cls._from_runs(world, checked, names, f)
        if f != 1:
            raise TopologyError("give hosts_per_domain or domains, not both (domains names "
                                f"each host's domain), got hosts_per_domain={f}")
        return cls._from_runs(world, checked, names, host_domain_runs(domains, count))

    @classmethod
    def from_dict(cls, d: object) -> Topology:
        """Inverse of :meth:`to_dict`; strict: anything else is a typed error.

        Refused with :class:`~mesh.InvalidMeshDataError`: a non-dict, a missing, unknown or
        wrongly typed key, a version other than 1; with :class:`~mesh.TopologyError`, data
        that does not fit together: ranks that do not add up to ``world`` (more ranks than
        the world declares, or fewer), a host index or domain index past the world's (before
        any work that grows with it), two ranks claiming one device, a host or a domain
        without ranks, a host named twice.
        """
        f = fields_of(d)
        if f.ranks is not None:
            return cls._from_runs(f.world, f.ranks, f.names, f.domains_given())
        per_host = f.devices_per_host
        if per_host is None:  # pragma: no cover - fields_of gives exactly one of the two
            raise AssertionError("fields_of gives devices_per_host or ranks")
        if f.world % per_host:
            raise TopologyError(f"'world' {f.world:,} is not a whole number of hosts of "
                                f"{per_host:,} devices")
        hosts = f.world // per_host
        if f.names is not None:
            if len(f.names) != hosts:
                raise TopologyError(f"'hosts' names {len(f.names):,} hosts, but {f.world:,} "
                                    f"ranks on hosts of {per_host:,} are {hosts:,} hosts")
            named_once(f.names)
        return cls._built(f.world, EvenHosts(f.world, per_host), f.names, f.domains_given())

    def to_dict(self) -> dict[str, Any]:
        """Plain, versioned JSON-able data (the file ``meshlayout --topology`` reads): the
        world, the hosts (regular, or runs of consecutive ranks on one host), the domains
        (regular, or runs of consecutive hosts), the hosts' names as a Slurm host list.

        >>> Topology(16, 4, hosts_per_domain=2).to_dict()
        {'version': 1, 'world': 16, 'devices_per_host': 4, 'ranks': None, \
'hosts_per_domain': 2, 'domains': None, 'hosts': None}
        >>> Topology.from_hosts(["n01", "n01", "n02", "n02", "n02"]).to_dict()["ranks"]
        [[0, 2, 0], [1, 3, 0]]
        """
        h, d = self._hosts, self._domains
        return data_of(Fields(self.world_size, self.devices_per_host,
                              None if isinstance(h, EvenHosts) else h.runs,
                              self.hosts_per_domain,
                              None if isinstance(d, EvenDomains) else d.runs, self._names))

    @classmethod
    def _from_runs(cls, world: int, runs: Runs, names: tuple[str, ...] | None,
                   domains: int | Runs) -> Topology:
        """A topology from runs of ranks ``(host, count, first device)`` in rank order (hosts
        numbered anyhow), checked and made canonical: hosts renumbered by first appearance,
        runs that continue merged, the regular form when the runs are one per host.  What
        :meth:`from_hosts`, :meth:`from_runs` and :meth:`from_dict` lower their input to."""
        order = _host_order(world, runs, names)
        new = {old: i for i, old in enumerate(order)}
        if names is not None:
            names = tuple(names[old] for old in order)
            named_once(names)
        merged = merged_runs([(new[h], c, d) for h, c, d in runs])
        one_rank_per_device(merged, names)
        size = merged[0][1]
        regular = len(merged) == len(order) and all(
            r == (i, size, 0) for i, r in enumerate(merged))
        if not isinstance(domains, int):
            domains = permuted_domains(domains, order, len(order))
        return cls._built(world, EvenHosts(world, size) if regular else ListedHosts(merged),
                          names, domains)

    @classmethod
    def _built(cls, world: int, hosts: Hosts, names: tuple[str, ...] | None,
               domains: int | Runs) -> Topology:
        """The one builder: a topology from its hosts (already canonical), their names and
        their domains, ``domains`` hosts per domain or runs of hosts ``(domain, hosts)`` in
        host order, made canonical here."""
        count = hosts.num_hosts
        kind = EvenDomains(domains, count) if isinstance(domains, int) else \
            canonical_domains(domains, count)
        made = cls.__new__(cls)
        made.__attrs_init__(world, hosts, kind, names)
        return made

    def with_domains(self, hosts_per_domain: object) -> Topology:
        """The same hosts grouped into fast domains of ``hosts_per_domain`` hosts."""
        return Topology._built(self.world_size, self._hosts, self._names,
                               checked_per_domain(hosts_per_domain))

    # ---- values ------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:  # unpickling goes through the checks
        return Topology.from_dict, (self.to_dict(),)

    def _key(self) -> tuple[Any, ...]:
        return self.world_size, self._hosts, self._domains.key  # kinds are canonical

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        f = self.hosts_per_domain
        dom = f", hosts_per_domain={f}" if f is not None and f > 1 else \
            f", <{self.num_domains} domains>" if f is None else ""
        if isinstance(self._hosts, EvenHosts):
            return f"Topology({self.world_size}, {self.devices_per_host}{dom})"
        return f"Topology.from_hosts(<{self.world_size} ranks on {self.num_hosts} hosts>{dom})"

    @property
    def num_hosts(self) -> int:
        """The number of hosts."""
        return self._hosts.num_hosts

    @property
    def num_domains(self) -> int:
        """The number of fast domains (with ``hosts_per_domain``, the last may hold fewer
        hosts)."""
        return self._domains.num_domains

    def host(self, rank: int) -> int:
        """The index of the host rank ``rank`` runs on."""
        return self._hosts.host(self._rank(rank))

    def device(self, rank: int) -> int:
        """The device index of rank ``rank`` on its host (its ``LOCAL_RANK`` under
        torchrun).

        >>> Topology(16, 4).device(6)
        2
        >>> Topology.from_hosts(["a", "a", "b"], devices=[1, 0, 3]).device(2)
        3
        """
        return self._hosts.device(self._rank(rank))

    def domain(self, rank: int) -> int:
        """The index of the fast domain rank ``rank`` runs in."""
        return self._domains.domain_of(self.host(rank))

    def _rank(self, rank: int) -> int:
        r = as_int(rank, "a rank")
        if not 0 <= r < self.world_size:
            raise TopologyError(f"rank {show(r)} is not on this topology {self!r} (valid: "
                                f"0 <= rank < {self.world_size:,})")
        return r

    def host_name(self, host: int) -> str:
        """A host's label: the one given to :meth:`from_hosts`, else ``"host<i>"``."""
        h = as_int(host, "a host index")
        if not 0 <= h < self.num_hosts:
            raise TopologyError(f"host {show(h)} is not on this topology (valid: 0 <= host < "
                                f"{self.num_hosts:,})")
        return self._names[h] if self._names is not None else f"host{h}"

    def ranks_on(self, host: int) -> tuple[int, ...]:
        """The ranks that run on host ``host``, ascending: arithmetic for hosts of
        ``devices_per_host`` ranks, one pass over the runs of an explicit topology; at
        most ``mesh.MAX_LISTED_RANKS``.

        >>> Topology(32, 8).ranks_on(1)
        (8, 9, 10, 11, 12, 13, 14, 15)
        """
        _check_listing(self.host_size(host), f"the ranks on host {host}", MAX_LISTED_RANKS)
        return self._hosts.ranks_on(as_int(host, "a host index"))

    def hosts_in(self, domain: int) -> tuple[int, ...]:
        """The hosts of fast domain ``domain``, ascending: arithmetic for domains of
        ``hosts_per_domain`` hosts, one pass over the runs of explicit domains.

        >>> Topology(64, 4, hosts_per_domain=3).hosts_in(5)
        (15,)
        >>> Topology.from_hosts(list("aabbcc"), domains=list("xxyyxx")).hosts_in(0)
        (0, 2)
        """
        d = as_int(domain, "a domain index")
        if not 0 <= d < self.num_domains:
            raise TopologyError(f"domain {show(d)} is not on this topology (valid: 0 <= domain "
                                f"< {self.num_domains:,})")
        return self._domains.hosts_in(d)

    def host_size(self, host: int) -> int:
        """How many ranks run on host ``host``: O(1), without listing them (an explicit
        topology's runs are counted once, for every host).

        >>> Topology.from_hosts(["a", "b", "b"]).host_size(1)
        2
        """
        self.host_name(host)  # on the topology, or a TopologyError naming the valid hosts
        return self._hosts.host_size(as_int(host, "a host index"))

    def sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(host sizes, domain sizes)``: the distinct numbers of ranks a host holds, and a
        fast domain holds, ascending (one each for a regular topology whose last domain is
        whole).  O(hosts) for an explicit topology, O(1) for a regular one.

        >>> Topology(40, 4, hosts_per_domain=4).sizes()
        ((4,), (8, 16))
        """
        return self._hosts.sizes(self._domains)

    @property
    def in_order(self) -> bool:
        """Whether ranks are numbered domain by domain and host by host: each host's ranks
        consecutive, hosts in index order, each domain's hosts consecutive (always so for
        a regular topology; what torchrun gives when nodes are listed rack by rack)."""
        return self._hosts.in_order and self._domains.in_order

    def ranks_in_order(self, *, limit: int = MAX_LISTED_RANKS) -> tuple[int, ...]:
        """Every rank, domain by domain, host by host (a host's ranks ascending): the
        order :attr:`in_order` topologies number them in.  Lists the world (at most
        ``limit`` ranks).

        >>> Topology.from_hosts(["a", "b", "a", "b"]).ranks_in_order()
        (0, 2, 1, 3)
        """
        check_limit(self.world_size, "ranks_in_order()", limit)
        if self.world_size > _MOST_IN_PYTHON:
            raise TooManyRanksError(f"ranks_in_order() lists in Python at most "
                                    f"{_MOST_IN_PYTHON:,} ranks, and the topology has "
                                    f"{self.world_size:,}")
        if self.in_order:
            return tuple(range(self.world_size))
        on = self._hosts.rank_lists()
        of = self._domains.domain_of
        hosts = sorted(range(self.num_hosts), key=lambda h: (of(h), h))
        return tuple([r for h in hosts for r in on[h]])

    # ---- queries ----------------------------------------------------------------------
    def hosts_of(self, view: MeshView, rank: int, dim: Dim) -> tuple[int, ...]:
        """The hosts ``rank``'s group along ``dim`` spans, in order of first member."""
        self._check(view)
        return tuple(dict.fromkeys([self.host(r) for r in view.group(rank, dim)]))

    def hosts_per_group(self, view: MeshView, dim: Dim) -> int:
        """The most hosts any group of ``view`` along ``dim`` spans."""
        self._check(view)
        return self._most(view.family(dim), False)

    def domains_per_group(self, view: MeshView, dim: Dim) -> int:
        """The most fast domains any group of ``view`` along ``dim`` spans."""
        self._check(view)
        return self._most(view.family(dim), True)

    def is_intra_host(self, view: MeshView, dim: Dim) -> bool:
        """Whether every group of ``view`` along ``dim`` stays inside one host."""
        return self.hosts_per_group(view, dim) == 1

    def is_intra_domain(self, view: MeshView, dim: Dim) -> bool:
        """Whether every group of ``view`` along ``dim`` stays inside one fast domain."""
        return self.domains_per_group(view, dim) == 1

    def first_crossing(self, view: MeshView, dim: Dim, *, level: str = "host"
                       ) -> tuple[int, ...] | None:
        """The first group of ``view`` along ``dim`` (in the order of ``view.groups(dim)``)
        that leaves one host (``level="domain"``: one fast domain), as its ranks; None when
        every group stays inside.  What a check of the plan against the machine names.

        >>> view = MeshView.from_shape((4, 3), ("dp", "tp"))
        >>> Topology(12, 4).first_crossing(view, "tp"), Topology(12, 3).first_crossing(view, "tp")
        ((3, 4, 5), None)
        """
        if level not in ("host", "domain"):
            raise MeshTypeError(f"level must be 'host' or 'domain', got {show(level)}")
        self._check(view)
        fam, domain = view.family(dim), level == "domain"
        if self._most(fam, domain) == 1:
            return None
        block = self.domain if domain else self.host
        mode = view.dim_layout(dim)  # the groups in view.groups' order: by first offset
        starts = complement(mode, view.ranks.size)
        _check_listing(mode.size, f"a group of dim {dim!r}", _SCANNED)
        image = [mode(i) for i in range(mode.size)]
        for j in range(min(starts.size, max(1, _SCANNED // len(image)))):
            group = tuple(view.ranks(starts(j) + x) for x in image)
            if len({block(r) for r in group}) > 1:
                return group
        _check_listing(view.ranks.size, f"the groups of dim {dim!r}", MAX_LISTED_RANKS)
        for group in view.groups(dim):  # a crossing group past the first million ranks
            if len({block(r) for r in group}) > 1:
                return group
        raise AssertionError("unreachable: a group crosses")  # pragma: no cover

    def _block_size(self, domains: bool) -> int | None:
        """The ranks of every host (``domains``: of every fast domain but a partial last one)
        when they are blocks of consecutive ranks of one size, else None."""
        h, d = self._hosts, self._domains
        if not isinstance(h, EvenHosts):
            return None
        if not domains:
            return h.per_host
        return h.per_host * d.key if isinstance(d, EvenDomains) else None

    def _regular(self) -> tuple[int, int] | None:
        """``(devices_per_host, hosts_per_domain)`` of a regular topology (even hosts in even
        domains: answered by arithmetic), else None."""
        h, d = self._hosts, self._domains
        if isinstance(h, EvenHosts) and isinstance(d, EvenDomains):
            return h.per_host, d.per_domain
        return None

    def _labelled_runs(self, domains: bool) -> Iterator[Stretch]:
        """``(first rank, end, host)`` (``domains``: domain) of every stretch of consecutive
        ranks on one host (domain), in rank order, each as long as it goes."""
        start, end, label = -1, -1, -1
        for s, e, here in self._hosts.stretches(self._domains if domains else None):
            if here == label:
                end = e
                continue
            if start >= 0:
                yield start, end, label
            start, end, label = s, e, here
        yield start, end, label

    def _check(self, view: MeshView) -> None:
        if not isinstance(view, MeshView):
            raise MeshTypeError(f"a topology query takes a mesh.MeshView, got {show(view)}")
        if view.ranks.max_rank >= self.world_size:
            raise TopologyError(
                f"{view!r} reaches rank {view.ranks.max_rank:,}, beyond this topology's "
                f"{self.world_size:,} ranks ({self!r})")

    def _most(self, fam: Family, domains: bool) -> int:
        """The most hosts (``domains``: fast domains) any group of ``fam`` spans."""
        regular = self._regular()
        if regular is not None and fam.ranks.is_identity:
            per_host, per_domain = regular
            return most_blocks(fam.layout, fam.ranks.size,
                               per_host * (per_domain if domains else 1))
        return self._most_listed(fam, domains)

    def _most_listed(self, fam: Family, domains: bool) -> int:
        """Count each group's blocks after listing the family (explicit hosts, domains or
        universe)."""
        starts = complement(fam.layout, fam.ranks.size)
        of = self._blocks_of_ranks(domains)  # first: it refuses a world too big to list
        np = numpy()
        if np is not None:
            rows = rank_table(fam.ranks, starts, fam.layout)
            b = rows // of if isinstance(of, int) else of[rows]
            b.sort(axis=1)
            return int(((b[:, 1:] != b[:, :-1]).sum(axis=1) + 1).max())
        rows_py = rank_rows(fam.ranks, starts, fam.layout)
        if isinstance(of, int):
            return max(len({r // of for r in row}) for row in rows_py)
        return max(len({of[r] for r in row}) for row in rows_py)

    def _blocks_of_ranks(self, domains: bool) -> Any:
        """The host (or domain) of every rank: an int ``per`` for blocks of ``per``
        consecutive ranks, else an array (a list without NumPy), one entry per rank (made
        once per topology)."""
        regular = self._regular()
        if regular is not None:
            return regular[0] * (regular[1] if domains else 1)
        _check_listing(self.world_size, "the ranks of an explicit topology", MAX_LISTED_RANKS)
        return self._domains_of_ranks if domains else self._hosts_of_ranks

    @functools.cached_property
    def _hosts_of_ranks(self) -> Any:
        return self._of_ranks(list(range(self.num_hosts)))

    @functools.cached_property
    def _domains_of_ranks(self) -> Any:
        return self._of_ranks([self._domains.domain_of(h) for h in range(self.num_hosts)])

    def _of_ranks(self, of_host: list[int]) -> Any:
        """``of_host[host(r)]`` for every rank ``r`` (an array, a list without NumPy)."""
        counts = list(self._hosts.host_counts())
        np = numpy()
        if np is not None:
            return np.asarray(of_host, dtype=np.int64)[np.repeat(
                np.asarray([h for h, _ in counts], dtype=np.int64), [c for _, c in counts])]
        return [of_host[h] for h, c in counts for _ in range(c)]


def first_split(a: Topology, b: Topology, *, domains: bool = False) -> int | None:
    """The first rank that runs on a different host (``domains``: fast domain) in ``a`` and
    in ``b`` (hosts and domains are numbered in order of first appearance, so equal numbers
    are the same partition so far), or the smaller world's size when one world is a prefix
    of the other; None when they agree everywhere.  Walks the runs of consecutive ranks of
    both in step: O(the runs before the first split), closed form for two regular ones."""
    ra, rb = a._block_size(domains), b._block_size(domains)
    if ra is not None and rb is not None:
        # rank r is on block r // p (a partial last domain too): blocks of p ranks
        common = min(a.world_size, b.world_size)
        if ra != rb and min(ra, rb) < common:
            return min(ra, rb)
        return None if a.world_size == b.world_size else common
    ia, ib = a._labelled_runs(domains), b._labelled_runs(domains)
    (sa, ea, la), (sb, eb, lb) = next(ia), next(ib)
    while True:
        at = max(sa, sb)
        if la != lb:
            return at
        end = min(ea, eb)
        if end == a.world_size or end == b.world_size:
            return None if a.world_size == b.world_size else end
        if ea == end:
            sa, ea, la = next(ia)
        if eb == end:
            sb, eb, lb = next(ib)


def _check_listing(count: int, what: str, most: int) -> None:
    """Refuse to list ``count`` ranks when that is more than ``most``: these queries take no
    ``limit=`` (unlike :meth:`Topology.ranks_in_order`), so the message offers none."""
    if count > most:
        raise TooManyRanksError(f"{what} would list {count:,} ranks, more than the {most:,} "
                                "a topology query lists (a regular topology over the identity "
                                "universe is answered by arithmetic, without listing)")


def _host_order(world: int, runs: Runs, names: tuple[str, ...] | None) -> list[int]:
    """The hosts of ``runs`` in order of first appearance, checked: the runs cover the world,
    every host index is bounded (by the world, and by ``names``) and every host runs a rank."""
    total = sum(c for _, c, _ in runs)
    if total != world:
        why = "more than the world declares" if total > world else "fewer"
        raise TopologyError(f"the runs of ranks cover {total:,} ranks, {why}: the world "
                            f"is {world:,} ranks")
    given = bounded_hosts(runs, world, names)
    if names is not None and given > len(names):
        raise TopologyError(f"a run of ranks is on host {given - 1:,}, but 'hosts' names "
                            f"only {len(names):,} hosts")
    count = len(names) if names is not None else given
    order = list(dict.fromkeys(h for h, _, _ in runs))
    if len(order) < count:
        taken = set(order)  # the least host without ranks is below len(order) + 1: bounded
        idle = next(i for i in range(len(order) + 1) if i not in taken)
        label = names[idle] if names is not None else f"host{idle}"
        raise TopologyError(f"host {idle:,} ({label}) has no ranks: every host of a "
                            "topology runs at least one rank")
    return order
