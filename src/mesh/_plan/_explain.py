"""Explaining a plan offline: per dim its groups, host crossings, shared communicators, cost.

:func:`explain` turns named views and a :class:`~mesh.Topology` into an
:class:`Explanation`: plain JSON-able data (:meth:`Explanation.to_dict`, the schema of
``meshlayout explain --format json``) and a text report (``str()``).  Pure: no torch, no
process group, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._core import (
    MAX_PLAN_DIMS,
    Family,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    RankMap,
    TopologyError,
    UnknownDimError,
    as_int,
    as_name,
    as_names,
    check_plan_dims,
    items_of,
    show,
)
from .._topology import Topology
from ._report import MIB, report

__all__ = ["DEFAULT_DEVICES_PER_HOST", "SCHEMA", "CommMemory", "Explanation", "explain",
           "machine_fields"]

SCHEMA = "meshlayout.explain/1"
"""The ``schema`` field of :meth:`Explanation.to_dict` (bumped on incompatible changes)."""

DEFAULT_DEVICES_PER_HOST = 8
"""Devices per host assumed when no topology is given (a common GPU node; reported)."""

_LISTED = 4096  # a --rank group lists its members in JSON up to this size (else null)


def _as_count(value: object) -> int:
    return as_int(value, "a CommMemory field")


def _at_least(least: int) -> Callable[[Any, Any, int], None]:
    def check(_: Any, field: Any, value: int) -> None:
        if value < least:
            raise InvalidSizeError(f"CommMemory.{field.name} must be an int >= {least}, got "
                                   f"{show(value)}")
    return check


@attrs.frozen
class CommMemory:
    """A first-order estimate of one communicator's device memory (NCCL-like).

    ``channels × 2 × buffsize + fixed`` bytes per communicator: each channel keeps a
    send and a receive buffer of ``buffsize`` (``NCCL_BUFFSIZE``, 4 MiB by default);
    ``channels`` depends on the machine (NCCL picks 2 to 32; 16 is typical within an
    NVLink node); ``fixed`` covers the rest (proxy state, work FIFOs).  Per rank, the
    estimate is that times the communicators the rank is a member of.

    >>> CommMemory().per_communicator // 2**20
    128
    """

    channels: int = attrs.field(default=16, converter=_as_count, validator=_at_least(1))
    buffsize: int = attrs.field(default=4 * MIB, converter=_as_count, validator=_at_least(1))
    fixed: int = attrs.field(default=0, converter=_as_count, validator=_at_least(0))

    @property
    def per_communicator(self) -> int:
        """Bytes per communicator."""
        return self.channels * 2 * self.buffsize + self.fixed

    FORMULA = "communicators * (channels * 2 * buffsize + fixed)"


_KEYS = frozenset({"schema", "world", "devices_per_host", "devices_per_host_assumed",
                   "num_hosts", "hosts_per_domain", "num_domains", "communicators_per_rank",
                   "memory", "families", "views"})


def _check_data(_: Any, __: Any, data: object) -> None:
    if not (isinstance(data, dict) and data.get("schema") == SCHEMA
            and _KEYS <= data.keys() <= _KEYS | {"rank"}):
        raise InvalidMeshDataError(f"an Explanation holds what mesh.explain computes (a dict "
                                   f"of schema {SCHEMA!r}), got {show(data)}")


@attrs.frozen
class Explanation:
    """What :func:`explain` found: ``to_dict()`` (JSON-able) and a text report (``str()``)."""

    data: dict[str, Any] = attrs.field(validator=_check_data)

    def to_dict(self) -> dict[str, Any]:
        """The explanation as plain JSON-able data (schema :data:`SCHEMA`, see docs/plans.md)."""
        return self.data

    def crossing(self, dims: object, *, level: str = "host") -> list[str]:
        """For each dim in ``dims`` (an ordered sequence of dim names, or ``view.dim`` for
        one view's), a line for every view whose groups along it leave one host
        (``level="domain"``: one fast domain); empty when all stay inside.  A dim no
        view has raises :class:`~mesh.UnknownDimError`."""
        if level not in ("host", "domain"):
            raise MeshTypeError(f"level must be 'host' or 'domain', got {show(level)}")
        flag, count = f"intra_{level}", f"{level}s_per_group"
        every = [(v, d) for v in self.data["views"] for d in v["dims"]]
        lines = []
        for want in as_names(dims, "dims"):
            hits = [(v, d) for v, d in every
                    if want in (d["name"], f"{v['name']}.{d['name']}")]
            if not hits:
                known = sorted({d["name"] for _, d in every})
                raise UnknownDimError(f"no view has a dim {want!r}; the dims are {known!r} "
                                      "(or view.dim for one view's)")
            lines += [f"{d['name']} (view {v['name']}): its groups span up to {d[count]} "
                      f"{level}s" for v, d in hits if not d[flag]]
        return lines

    def __str__(self) -> str:
        return report(self.data)


def explain(views: Mapping[str, MeshView], topology: Topology | None = None, *,
            world: int | None = None, rank: int | None = None,
            memory: CommMemory | None = None) -> Explanation:
    """Explain a plan: ``views`` (name → view) placed on ``topology``.

    For every dim of every view: its size and layout, its number of groups, the most
    hosts (and fast domains) one group spans, whether every group stays inside one
    host, and its *family* — an id equal for exactly the dims (of any views) whose
    groups are the same ordered rank tuples, so one communicator serves them all.
    Then communicators per rank (distinct families of size > 1 a rank is a member of,
    the most over ranks) and their memory by :class:`CommMemory`; with ``rank``, that
    rank's host, coordinates and groups.  Without a topology, ``world`` ranks (default:
    what the views reach) on hosts of :data:`DEFAULT_DEVICES_PER_HOST` devices are
    assumed (and reported); with one, ``world`` must be None or its ``world_size``.  A
    plan holds at most :data:`~mesh.MAX_PLAN_DIMS` dims in all its views (every dim lists
    the dims sharing its communicators): more are refused with
    :class:`~mesh.InvalidSizeError` before any work.

    >>> from mesh import MeshView, Topology, explain
    >>> world = MeshView.from_shape(16, ("world",))
    >>> views = {"dense": world.unflatten("world", (2, 8), ("dp", "tp")),
    ...          "sparse": world.unflatten("world", (2, 2, 4), ("dp", "efsdp", "ep"))}
    >>> data = explain(views, Topology(16, 4)).to_dict()
    >>> [(d["name"], d["hosts_per_group"], d["family"]) for d in data["views"][1]["dims"]]
    [('dp', 2, 0), ('efsdp', 2, 2), ('ep', 1, 3)]
    >>> data["communicators_per_rank"]
    4
    """
    named = _named(views)
    topology, assumed = _placed(named, topology, world)
    memory = CommMemory() if memory is None else memory
    if not isinstance(memory, CommMemory):
        raise MeshTypeError(f"memory must be a mesh.CommMemory or None, got {show(memory)}")
    r = None if rank is None else as_int(rank, "rank")
    if r is not None:
        topology.host(r)  # on the topology, or a TopologyError naming it
    families = _Families(named, topology)
    out_views = [families.view_data(vname) for vname in named]
    comms = families.communicators()
    per_rank = _most_memberships(list(comms.values()))
    data: dict[str, Any] = {
        "schema": SCHEMA, **machine_fields(topology, assumed), "communicators_per_rank": per_rank,
        "memory": {"formula": CommMemory.FORMULA, "channels": memory.channels,
                   "buffsize": memory.buffsize, "fixed": memory.fixed,
                   "bytes_per_communicator": memory.per_communicator,
                   "bytes_per_rank": per_rank * memory.per_communicator},
        "families": families.families_data(), "views": out_views}
    if r is not None:
        mine = [families.ids[fam] for fam, universe in comms.items()
                if universe.offset_of(r) is not None]
        data["rank"] = _rank_data(named, topology, r)
        data["rank"]["communicators"] = {"count": len(mine), "families": mine}
    return Explanation(data)


def _named(views: object) -> dict[str, MeshView]:
    """``views`` checked: a non-empty mapping of names (without '.') to views."""
    expected = "a non-empty mapping of names to mesh.MeshView"
    items = items_of(views, "explain's views", expected, limit=MAX_PLAN_DIMS)
    if not items:
        raise MeshTypeError(f"explain takes {expected}, got {show(views)}")
    named: dict[str, MeshView] = {}
    for name, view in items:
        if not isinstance(view, MeshView):
            raise MeshTypeError(f"view {name!r} must be a mesh.MeshView, got {show(view)}")
        key = as_name(name, "a view name")
        if "." in key:
            raise InvalidNameError(f"a view name may not contain '.' (the report names dims "
                                   f"view.dim), got {key!r}")
        named[key] = view
    check_plan_dims((v.ndim for v in named.values()), "explain's views")
    return named


def _placed(named: dict[str, MeshView], topology: object, world: object
            ) -> tuple[Topology, bool]:
    """The topology the views are placed on, and whether it was assumed (none given:
    ``world`` ranks, default what the views reach, on hosts of the default size)."""
    reach = max(v.ranks.max_rank for v in named.values()) + 1
    n = reach if world is None else as_int(world, "world")
    if topology is None:
        if n < 1 or n % DEFAULT_DEVICES_PER_HOST:
            raise TopologyError(
                f"{show(n)} ranks are not a whole number of hosts of "
                f"{DEFAULT_DEVICES_PER_HOST} devices (the default): give a Topology "
                "(--devices-per-host on the command line)")
        return Topology(n, DEFAULT_DEVICES_PER_HOST), True
    if not isinstance(topology, Topology):
        raise MeshTypeError(f"topology must be a mesh.Topology or None, got {show(topology)}")
    if world is not None and n != topology.world_size:
        raise TopologyError(f"world={show(n)} differs from the topology's {topology!r}")
    return topology, False


def machine_fields(topology: Topology, assumed: bool) -> dict[str, Any]:
    """The machine fields of the data, in the schema's order (explain's, place's)."""
    return {"world": topology.world_size, "devices_per_host": topology.devices_per_host,
            "devices_per_host_assumed": assumed, "num_hosts": topology.num_hosts,
            "hosts_per_domain": topology.hosts_per_domain,
            "num_domains": topology.num_domains}


class _Families:
    """The dims of named views on a topology, grouped by family: dims (of any views) whose
    groups are the same ordered rank tuples share a family, and so one communicator.
    Families are numbered in order of their first dim."""

    def __init__(self, named: dict[str, MeshView], topology: Topology) -> None:
        self.named, self.topology = named, topology
        self.family = {(vname, k): view.family(k) for vname, view in named.items()
                       for k in range(view.ndim)}
        self.members: dict[Family, list[tuple[str, int]]] = {}  # every family's dims
        for key, fam in self.family.items():
            self.members.setdefault(fam, []).append(key)
        self.ids = {fam: i for i, fam in enumerate(self.members)}
        self._spans: dict[Family, tuple[int, int]] = {}  # equal groups, equal spans

    def dotted(self, key: tuple[str, int]) -> str:
        """``view.dim``: a dim of one view, by name."""
        return f"{key[0]}.{self.named[key[0]].names[key[1]]}"

    def spans(self, vname: str, k: int) -> tuple[int, int]:
        """The most hosts, and fast domains, one group of the view's dim ``k`` spans."""
        fam = self.family[vname, k]
        if fam not in self._spans:
            view, top = self.named[vname], self.topology
            h = top.hosts_per_group(view, k)
            self._spans[fam] = h, (h if top.hosts_per_domain == 1
                                   else top.domains_per_group(view, k))
        return self._spans[fam]

    def view_data(self, vname: str) -> dict[str, Any]:
        """The data of one view and its dims."""
        view = self.named[vname]
        return {"name": vname, "shape": list(view.shape), "layout": str(view.layout),
                "universe": _universe(view), "universe_size": view.ranks.size,
                "universe_explicit": not view.ranks.is_identity,
                "num_instances": view.num_instances,
                "dims": [self.dim_data(vname, k) for k in range(view.ndim)]}

    def dim_data(self, vname: str, k: int) -> dict[str, Any]:
        """The data of dim ``k`` of a view: its groups, their spans, its family."""
        view, fam = self.named[vname], self.family[vname, k]
        hosts, domains = self.spans(vname, k)
        return {"name": view.names[k], "size": view.shape[k], "layout": str(view.dim_layout(k)),
                "num_groups": fam.num_groups, "hosts_per_group": hosts, "intra_host": hosts == 1,
                "domains_per_group": domains, "intra_domain": domains == 1,
                "family": self.ids[fam],
                "shared_with": [self.dotted(x) for x in self.members[fam] if x != (vname, k)]}

    def families_data(self) -> list[dict[str, Any]]:
        return [{"id": self.ids[fam], "group_size": fam.group_size,
                 "num_groups": fam.num_groups, "dims": [self.dotted(x) for x in keys]}
                for fam, keys in self.members.items()]

    def communicators(self) -> dict[Family, RankMap]:
        """The universe of every family of size > 1 (one communicator each): a rank is in a
        family's groups exactly when it is in the universe of the views with it."""
        return {fam: self.named[keys[0][0]].ranks for fam, keys in self.members.items()
                if fam.group_size > 1}


def _universe(view: MeshView) -> str:
    m = view.ranks
    return f"ranks 0..{m.size - 1}" if m.is_identity else f"{m.size:,} explicit ranks"


def _most_memberships(universes: list[RankMap]) -> int:
    """The most of these universes (one per family) a rank is in: every identity universe
    holds rank 0, so only rank 0 and the ranks of explicit universes are counted, once per
    distinct universe (O(sum of their sizes))."""
    weight: dict[RankMap, int] = {}
    for u in universes:
        weight[u] = weight.get(u, 0) + 1
    sizes = sorted((u.size, w) for u, w in weight.items() if u.is_identity)
    counts: dict[int, int] = {0: 0}
    for u, w in weight.items():
        if not u.is_identity:
            for r in u.ranks or ():
                counts[r] = counts.get(r, 0) + w
    return max((c + sum(w for size, w in sizes if size > r) for r, c in counts.items()),
               default=0)


def _rank_data(views: dict[str, MeshView], topology: Topology, rank: int) -> dict[str, Any]:
    out = []
    for vname, view in views.items():
        coord = view.coordinate(rank)
        groups = []
        if coord is not None:
            for k, dname in enumerate(view.names):
                size = view.shape[k]
                members = view.group(rank, k) if size <= _LISTED else None
                groups.append({"dim": dname, "size": size, "local_rank": coord[k],
                               "ranks": None if members is None else list(members),
                               "hosts": None if members is None else list(
                                   topology.hosts_of(view, rank, k))})
        out.append({"name": vname, "coordinate": None if coord is None else list(coord),
                    "groups": groups})
    return {"rank": rank, "host": topology.host(rank),
            "host_name": topology.host_name(topology.host(rank)), "domain": topology.domain(rank),
            "views": out}
