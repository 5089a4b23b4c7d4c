"""Placement: the rank order whose estimated communication time per step is least.

:meth:`Placement.find` (and :func:`place`, its view) answers the inverse of
:func:`~mesh.compare`: given dims, the bytes each carries per step and a
:class:`~mesh.Topology`, it chooses which dims go inside a host, which inside a fast
domain and which across, and the rank order that does it.

**Why choosing levels is enough, and exact.**  The estimate (compare's, :class:`~mesh.Links`)
charges each dim a ring all-reduce over intra-host links when every one of its groups stays
inside one fast domain (a domain of one host is a host), else over inter-host links: it
depends only on the set S of dims whose groups all stay inside a domain.  Whatever the rank
order, the ranks that share every coordinate but those of S (an *S-block*, ``prod(S)``
ranks) are joined by steps along dims of S, each inside one domain, so a whole S-block lies
in one domain: every domain is a union of S-blocks and ``prod(S)`` divides every domain's
size.  Conversely, when it does, the row-major order with the dims of S innermost, over
ranks listed domain by domain, cuts the world into consecutive S-blocks, each inside one
domain.  The same holds one level down for the dims H (a subset of S) inside a host.  So
the admissible ``(S, H)`` are exactly those with ``prod(H) | gcd(host sizes)`` and
``prod(S) | gcd(domain sizes)``; each is realized by one permutation of the dims (across
dims outermost, then domain dims, then host dims, each level in the given order) over the
identity universe when the topology numbers ranks domain by domain and host by host
(:attr:`~mesh.Topology.in_order`), over that order as an explicit universe otherwise; and
the least estimate over every rank order is the least over these (S, H), which are
enumerated (at most 3**k for k dims of size > 1, k <= :data:`MAX_PLACED_DIMS`) in O(k)
arithmetic each, without listing the world.  This assumes inside links are no slower than
inter-host ones (a dim placed inside by accident then only helps); ``tests/test_place.py``
checks it against a brute force over every rank order.

Ties on the estimate go to the estimate as if only hosts were fast (the heaviest dims
inside hosts, then domains), then to later dims deeper (the row-major custom: tp last and
innermost).  The runner-up is the best order whose estimate is worse (not a tie).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from .._core import (
    InvalidMeshDataError,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    RankMap,
    TopologyError,
    UnknownDimError,
    as_names,
    as_size,
    ordered,
    show,
)
from .._topology import Topology
from ._explain import machine_fields
from ._report import place_report
from ._traffic import Links, traffic_bytes

__all__ = ["MAX_PLACED_DIMS", "PLACE_SCHEMA", "Placement", "place"]

PLACE_SCHEMA = "meshlayout.place/1"
"""The ``schema`` field of :meth:`Placement.to_dict`."""

MAX_PLACED_DIMS = 10
"""The most dims of size > 1 a placement weighs (3**10 = 59,049 choices of levels)."""

_LEVELS = ("host", "domain", "across")
_KEYS = frozenset({"schema", "world", "devices_per_host", "devices_per_host_assumed",
                   "num_hosts", "hosts_per_domain", "num_domains", "shape", "names",
                   "traffic", "choices", "chosen", "runner_up", "as_given"})


def _check_data(_: Any, __: Any, data: object) -> None:
    if not (isinstance(data, dict) and data.get("schema") == PLACE_SCHEMA
            and data.keys() == _KEYS):
        raise InvalidMeshDataError(f"a Placement holds what Placement.find computes (a dict of "
                                   f"schema {PLACE_SCHEMA!r}), got {show(data)}")


def _a_view(_: Any, field: Any, view: Any) -> None:
    if not (isinstance(view, MeshView) or (view is None and field.name == "runner_up")):
        raise MeshTypeError(f"Placement.{field.name} is a mesh.MeshView, got {show(view)}")


@attrs.frozen
class Placement:
    """The rank order :meth:`find` chose: :attr:`view` (bind it), the :attr:`runner_up`,
    ``to_dict()`` (JSON-able: each order's layout, its dims' hosts and domains per group,
    level and estimated time; schema :data:`PLACE_SCHEMA`) and a text report (``str()``)."""

    data: dict[str, Any] = attrs.field(validator=_check_data, repr=False)
    view: MeshView = attrs.field(validator=_a_view)
    runner_up: MeshView | None = attrs.field(validator=_a_view)

    @classmethod
    def find(cls, shape: object, names: object, topology: Topology, *,
             traffic: Mapping[str, int] | None = None, links: Links | None = None) -> Placement:
        """The rank order of a mesh of ``shape`` (dims ``names``, in that order) over the
        whole of ``topology`` whose estimated communication time per step is least.

        ``traffic`` maps dim names to the bytes per step per rank each dim's collective
        carries (as in :func:`~mesh.compare`; a dim left out carries 0 bytes, so only its
        latency counts); ``links`` are the estimate's parameters.  The view has the dims
        in the given order; its layout (over the identity universe when the topology is
        :attr:`~mesh.Topology.in_order`, else over that order) puts the dims chosen to be
        inside hosts innermost, then those inside fast domains, then the rest.

        >>> from mesh import Placement, Topology
        >>> found = Placement.find((8, 4, 2), ("dp", "tp", "cp"), Topology(64, 4),
        ...                        traffic={"tp": 2**30, "dp": 2**28})
        >>> str(found.view.layout), [d["level"] for d in found.to_dict()["chosen"]["dims"]]
        ('(8,4,2):(8,1,4)', ['across', 'host', 'across'])
        """
        sizes, dims, nbytes, links = _checked(shape, names, topology, traffic, links)
        costs = [(links.allreduce_seconds(nbytes.get(d, 0), s, inside=True),
                  links.allreduce_seconds(nbytes.get(d, 0), s, inside=False))
                 for s, d in zip(sizes, dims)]
        host_sizes, domain_sizes = topology.sizes()
        choices = _choices(sizes, math.gcd(*host_sizes), math.gcd(*domain_sizes))
        ranked = sorted((_key(levels, costs), levels) for levels in choices)
        best = ranked[0]
        universe = None if topology.in_order else RankMap.explicit(topology.ranks_in_order())
        view = _view(sizes, dims, best[1], universe)
        chosen = _order(view, topology, nbytes, links)
        runner, runner_data = None, None
        # a choice whose dims land inside a domain anyway ties the chosen estimate: the
        # runner-up is the first choice whose view's estimate is worse (none with one domain)
        for key, levels in ranked if topology.num_domains > 1 else ():
            if key[0] > best[0][0]:
                runner, runner_data = _worse(_view(sizes, dims, levels, universe), topology,
                                             nbytes, links, chosen)
                if runner is not None:
                    break
        given = MeshView.from_shape(sizes, dims)
        data = {"schema": PLACE_SCHEMA, **machine_fields(topology, False),
                "shape": list(sizes), "names": list(dims),
                "traffic": {"bytes": nbytes, **links.to_dict()}, "choices": len(ranked),
                "chosen": {**chosen, "view": view.to_dict()},
                "runner_up": runner_data,
                "as_given": _order(given, topology, nbytes, links)}
        return cls(data, view, runner)

    @property
    def seconds(self) -> float:
        """The chosen order's estimated communication time per step, in seconds."""
        seconds: float = self.data["chosen"]["seconds"]
        return seconds

    def to_dict(self) -> dict[str, Any]:
        """The placement as plain JSON-able data (schema :data:`PLACE_SCHEMA`, see
        docs/plans.md); ``["chosen"]["view"]`` is the chosen view's ``to_dict()``."""
        return self.data

    def __str__(self) -> str:
        return place_report(self.data)


def place(shape: object, names: object, topology: Topology, *,
          traffic: Mapping[str, int] | None = None, links: Links | None = None) -> MeshView:
    """The view :meth:`Placement.find` chooses: the rank order of a mesh of ``shape``
    (dims ``names``) over ``topology`` whose estimated communication time per step is
    least, keeping the heaviest dims inside hosts, then fast domains.

    >>> from mesh import Topology, place
    >>> view = place((4, 8), ("dp", "tp"), Topology(32, 8), traffic={"tp": 2**30})
    >>> Topology(32, 8).is_intra_host(view, "tp"), view.group(9, "tp")
    (True, (8, 9, 10, 11, 12, 13, 14, 15))
    """
    return Placement.find(shape, names, topology, traffic=traffic, links=links).view


def _shape(shape: object, names: object) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The sizes and names checked: as many names as sizes, unique, at most
    :data:`MAX_PLACED_DIMS` sizes > 1."""
    sizes = tuple(as_size(s, "every size of shape") for s in ordered(shape, "shape", 256))
    dims = as_names(names, "names")
    if not sizes or len(dims) != len(sizes):
        raise InvalidSizeError(f"a placement takes one name per size (at least one), got shape "
                               f"{show(shape)} and names {show(names)}")
    if len(set(dims)) < len(dims):
        raise InvalidSizeError(f"dim names must be unique, got {list(dims)!r}")
    if sum(s > 1 for s in sizes) > MAX_PLACED_DIMS:
        raise InvalidSizeError(f"a placement weighs at most {MAX_PLACED_DIMS} dims of size > 1 "
                               f"(3**{MAX_PLACED_DIMS} choices), got {sum(s > 1 for s in sizes)}")
    return sizes, dims


def _shown(sizes: tuple[int, ...], dims: tuple[str, ...]) -> str:
    return ", ".join(f"{d}={s:,}" for s, d in zip(sizes, dims))


def _choices(sizes: tuple[int, ...], host: int, domain: int) -> list[tuple[int, ...]]:
    """Every admissible choice of levels (0 host, 1 domain, 2 across) per dim: the host
    dims' sizes multiply to a divisor of ``host`` (the gcd of the host sizes), the host and
    domain dims' to a divisor of ``domain``; a dim of size 1 is at level 0."""
    out: list[tuple[int, ...]] = []

    def extend(i: int, hosts: int, inside: int, levels: tuple[int, ...]) -> None:
        if i == len(sizes):
            out.append(levels)
            return
        s = sizes[i]
        if s == 1:
            extend(i + 1, hosts, inside, (*levels, 0))
            return
        if host % (hosts * s) == 0 and domain % (inside * s) == 0:
            extend(i + 1, hosts * s, inside * s, (*levels, 0))
        if domain % (inside * s) == 0:
            extend(i + 1, hosts, inside * s, (*levels, 1))
        extend(i + 1, hosts, inside, (*levels, 2))

    extend(0, 1, 1, ())
    return out


def _key(levels: tuple[int, ...], costs: list[tuple[float, float]]
         ) -> tuple[float, float, tuple[int, ...]]:
    """``(estimate, estimate if only hosts were fast, levels from the last dim)``: the
    estimates to 12 significant digits (sums of floats in different orders are equal)."""
    seconds = sum(inside if lv <= 1 else outside for lv, (inside, outside) in zip(levels, costs))
    hosts = sum(inside if lv == 0 else outside for lv, (inside, outside) in zip(levels, costs))
    return float(f"{seconds:.12g}"), float(f"{hosts:.12g}"), levels[::-1]


def _view(sizes: tuple[int, ...], dims: tuple[str, ...], levels: tuple[int, ...],
          universe: RankMap | None) -> MeshView:
    """The view realizing ``levels``: dims across outermost, then domain, then host dims
    (each level in the given order), over the topology's order of ranks (``universe``;
    None: the identity)."""
    order = [i for lv in (2, 1, 0) for i in range(len(sizes)) if levels[i] == lv]
    permuted = MeshView.from_shape(tuple(sizes[i] for i in order),
                                   tuple(dims[i] for i in order))
    view = permuted[dims]
    return view if universe is None else MeshView(view.layout, view.names, universe)


def _order(view: MeshView, topology: Topology, nbytes: dict[str, int], links: Links
           ) -> dict[str, Any]:
    """An order's data: its layout and universe, and per dim its hosts and domains per
    group (null where they cannot be counted without enumerating too much), level and
    estimated time (a dim not counted is charged as crossing)."""
    dims = []
    for k, name in enumerate(view.names):
        hosts = _span(topology.hosts_per_group, view, k)
        domains = hosts if topology.hosts_per_domain == 1 else _span(
            topology.domains_per_group, view, k)
        level = "host" if hosts == 1 else "domain" if domains == 1 else "across"
        dims.append({"name": name, "size": view.shape[k], "layout": str(view.dim_layout(k)),
                     "level": level, "hosts_per_group": hosts, "domains_per_group": domains,
                     "seconds": links.allreduce_seconds(nbytes.get(name, 0), view.shape[k],
                                                        inside=domains == 1)})
    explicit = not view.ranks.is_identity
    return {"layout": str(view.layout), "universe_explicit": explicit,
            "universe": f"{view.ranks.size:,} explicit ranks" if explicit else
            f"ranks 0..{view.ranks.size - 1}", "dims": dims,
            "seconds": sum(d["seconds"] for d in dims)}


def _span(count: Any, view: MeshView, k: int) -> int | None:
    try:
        found: int = count(view, k)
        return found
    except TopologyError:  # a huge placement that does not align: not counted
        return None


def _checked(shape: object, names: object, topology: object, traffic: object, links: object
             ) -> tuple[tuple[int, ...], tuple[str, ...], dict[str, int], Links]:
    """:meth:`Placement.find`'s arguments, checked: sizes, names, bytes per dim, links."""
    sizes, dims = _shape(shape, names)
    if not isinstance(topology, Topology):
        raise MeshTypeError(f"topology must be a mesh.Topology, got {show(topology)}")
    world = math.prod(sizes)
    if world != topology.world_size:
        raise TopologyError(f"the dims ({_shown(sizes, dims)}) hold {world:,} ranks, but "
                            f"the topology has {topology.world_size:,} ({topology!r}): a "
                            "placement covers the whole machine")
    nbytes = traffic_bytes(traffic)
    unknown = [d for d in nbytes if d not in dims]
    if unknown:
        raise UnknownDimError(f"traffic names dims {unknown!r} the plan does not have; its "
                              f"dims are {list(dims)!r}")
    if links is None:
        links = Links()
    elif not isinstance(links, Links):
        raise MeshTypeError(f"links must be a mesh.Links or None, got {show(links)}")
    return sizes, dims, nbytes, links


def _worse(candidate: MeshView, topology: Topology, nbytes: dict[str, int], links: Links,
           chosen: dict[str, Any]) -> tuple[MeshView | None, dict[str, Any] | None]:
    """``candidate`` and its estimate if that is worse than ``chosen``'s (to 12 digits),
    else (None, None)."""
    found = _order(candidate, topology, nbytes, links)
    if float(f"{found['seconds']:.12g}") > float(f"{chosen['seconds']:.12g}"):
        return candidate, found
    return None, None
