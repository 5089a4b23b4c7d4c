"""Comparing plans side by side: each plan explained on its own, then one row per fact.

:func:`compare` explains every plan separately (so each plan's communicator budget is its
own, never a sum over the plans) and lines the results up in rows: per dim name its size,
the most hosts (and fast domains) a group spans, whether groups stay inside a host, and,
with ``traffic``, an estimated communication time per step (:class:`~mesh.Links`); then
per plan its communicators per rank, their memory and the total time.  The better value
of each row is marked; dims whose groups are equal in several plans are reported as
shared.  Pure: no torch, no process group, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._core import (
    MAX_PLAN_DIMS,
    DuplicateNameError,
    Family,
    InvalidMeshDataError,
    MeshTypeError,
    MeshView,
    UnknownDimError,
    as_name,
    check_plan_dims,
    items_of,
    show,
)
from .._topology import Topology
from ._explain import CommMemory, explain
from ._report import compare_report
from ._traffic import Links, traffic_bytes

__all__ = ["COMPARE_SCHEMA", "Comparison", "compare", "compare_placed"]

COMPARE_SCHEMA = "meshlayout.compare/1"
"""The ``schema`` field of :meth:`Comparison.to_dict`."""

_KEYS = frozenset({"schema", "names", "plans", "rows", "traffic", "ranking"})

# (metric, label, which value is better) of the rows per dim name, then per plan
_DIM_ROWS = (("size", "size", None), ("hosts_per_group", "hosts/group", "lower"),
             ("intra_host", "intra-host", "higher"))
_DOMAIN_ROWS = (("domains_per_group", "domains/group", "lower"),
                ("intra_domain", "intra-domain", "higher"))
_TIME_ROW = ("seconds", "est. time/step", "lower")
_PLAN_ROWS = (("communicators_per_rank", "communicators per rank", "lower"),
              ("bytes_per_rank", "comm. memory per rank", "lower"))


def _check_data(_: Any, __: Any, data: object) -> None:
    if not (isinstance(data, dict) and data.get("schema") == COMPARE_SCHEMA
            and data.keys() == _KEYS):
        raise InvalidMeshDataError(f"a Comparison holds what mesh.compare computes (a dict of "
                                   f"schema {COMPARE_SCHEMA!r}), got {show(data)}")


@attrs.frozen
class Comparison:
    """What :func:`compare` found: ``to_dict()`` (JSON-able), ``ranking`` and a text table
    (``str()``)."""

    data: dict[str, Any] = attrs.field(validator=_check_data)

    def to_dict(self) -> dict[str, Any]:
        """The comparison as plain JSON-able data (schema :data:`COMPARE_SCHEMA`, see
        docs/plans.md): ``{"plans": [<explain document of each plan>, ...], "rows": [...],
        ...}``."""
        return self.data

    @property
    def ranking(self) -> list[str] | None:
        """The plan names, best first by estimated communication time per step (then by
        communicator memory, then in the order given); None without traffic."""
        ranking: list[str] | None = self.data["ranking"]
        return ranking

    def __str__(self) -> str:
        return compare_report(self.data)


def compare(plans: Mapping[str, MeshView | Mapping[str, MeshView]],
            topology: Topology | None = None, *, world: int | None = None,
            memory: CommMemory | None = None, traffic: Mapping[str, int] | None = None,
            links: Links | None = None, rank: int | None = None) -> Comparison:
    """Compare ``plans`` (plan name → its views, as :func:`explain` takes them, or one
    :class:`~mesh.MeshView`, a plan of one view named ``mesh``) placed on ``topology``.

    Each plan is explained on its own (``topology``, ``world``, ``memory`` and ``rank`` as
    in :func:`explain`), so its communicators per rank and their memory are its own.  Rows
    go per dim name (in the order the plans first name them): size, hosts per group and
    intra-host (domains too when the topology has fast domains of several hosts); where
    several views of one plan have a dim of that name, the cell is the largest size and
    span of them.  ``traffic`` maps dim names to bytes per step per rank that dim's
    collective carries; each such row gets an estimated time (:class:`~mesh.Links`' ring
    all-reduce over the dim's slowest group, once per distinct communicator of that name),
    the plans a total, and :attr:`Comparison.ranking` orders them by it.  The plans hold
    at most :data:`~mesh.MAX_PLAN_DIMS` dims together (one row per dim name, one column
    per plan): more are refused with :class:`~mesh.InvalidSizeError` before any work.

    >>> from mesh import MeshView, Topology, compare
    >>> inside = MeshView.from_shape((64, 8), ("dp", "tp"))        # tp groups: 8 in a row
    >>> across = MeshView.from_shape((8, 64), ("tp", "dp"))        # tp groups: stride 64
    >>> found = compare({"inside": inside, "across": across}, Topology(512, 8),
    ...                 traffic={"tp": 2**30, "dp": 2**28})
    >>> found.ranking
    ['inside', 'across']
    >>> [(r["dim"], r["metric"], r["values"], r["best"]) for r in found.to_dict()["rows"]
    ...  if r["metric"] == "hosts_per_group"]
    [('dp', 'hosts_per_group', [64, 8], ['across']), ('tp', 'hosts_per_group', [1, 8], ['inside'])]
    """
    if topology is not None and not isinstance(topology, Topology):
        raise MeshTypeError(f"topology must be a mesh.Topology or None, got {show(topology)}")
    return compare_placed([(name, views, topology) for name, views in _plans(plans).items()],
                          world=world, memory=memory, traffic=traffic, links=links, rank=rank)


def compare_placed(plans: list[tuple[str, dict[str, MeshView], Topology | None]], *,
                   world: int | None = None, memory: CommMemory | None = None,
                   traffic: Mapping[str, int] | None = None, links: Links | None = None,
                   rank: int | None = None) -> Comparison:
    """:func:`compare` of plans each on its own topology (``meshlayout compare`` reads one
    from each plan file): ``(name, views, topology or None)`` per plan."""
    nbytes = traffic_bytes(traffic)
    links = _checked(plans, links)
    placed = [_Placed(name, views, explain(views, topology, world=world, memory=memory,
                                           rank=rank).to_dict())
              for name, views, topology in plans]
    dims = list(dict.fromkeys(d for p in placed for d in p.by_name))
    unknown = [d for d in nbytes if d not in dims]
    if unknown:
        raise UnknownDimError(f"traffic names dims {unknown!r} that no plan has; the plans' "
                              f"dims are {dims!r}")
    domains = any(p.data["hosts_per_domain"] != 1 for p in placed)
    rows = [row for d in dims for row in _dim_rows(placed, d, nbytes.get(d), links, domains)]
    rows += _plan_rows(placed, nbytes, links)
    return Comparison({"schema": COMPARE_SCHEMA, "names": [p.name for p in placed],
                       "plans": [p.data for p in placed], "rows": rows,
                       "traffic": None if not nbytes else {"bytes": nbytes, **links.to_dict()},
                       "ranking": _ranking(placed, rows[-1]["values"]) if nbytes else None})


def _checked(plans: list[tuple[str, dict[str, MeshView], Topology | None]],
             links: Links | None) -> Links:
    """``links`` (default ``Links()``) checked, the plans' dims bounded before any work and
    their names unique: else the typed error."""
    if links is None:
        links = Links()
    elif not isinstance(links, Links):
        raise MeshTypeError(f"links must be a mesh.Links or None, got {show(links)}")
    check_plan_dims((v.ndim if isinstance(v, MeshView) else 1 for _, views, _ in plans
                     for v in views.values()),  # rows x plans: bounded before any work
                    "compare's plans, counted together")
    names = [name for name, _, _ in plans]
    if len(set(names)) < len(names):
        raise DuplicateNameError(f"plan names must be unique, got {names!r}")
    return links


def _ranking(placed: list[_Placed], totals: list[Any]) -> list[str]:
    """The plans' names, cheapest traffic first (ties: less memory per rank, then order)."""
    order = sorted(range(len(placed)), key=lambda i: (
        totals[i], placed[i].data["memory"]["bytes_per_rank"], i))
    return [placed[i].name for i in order]


def _plans(plans: object) -> dict[str, dict[str, MeshView]]:
    """``plans`` checked: a non-empty mapping of plan names to views or mappings of views."""
    expected = ("a non-empty mapping of plan names to a mesh.MeshView or a mapping of view "
                "names to views")
    items = items_of(plans, "compare's plans", expected, limit=MAX_PLAN_DIMS)
    if not items:
        raise MeshTypeError(f"compare takes {expected}, got {show(plans)}")
    out: dict[str, dict[str, MeshView]] = {}
    for name, plan in items:
        key = as_name(name, "a plan name")
        if isinstance(plan, MeshView):
            out[key] = {"mesh": plan}
        elif isinstance(plan, Mapping):
            out[key] = dict(items_of(plan, f"plan {key!r}", "a mapping",  # explain checks
                                     limit=MAX_PLAN_DIMS))
        else:
            raise MeshTypeError(f"plan {key!r} must be a mesh.MeshView or a mapping of view "
                                f"names to views, got {show(plan)}")
    return out


class _Placed:
    """One plan: its name, views, explain document, and its dims by name (each dim's
    family and its data in the document)."""

    def __init__(self, name: str, views: dict[str, MeshView], data: dict[str, Any]) -> None:
        self.name, self.data = name, data
        self.by_name: dict[str, list[tuple[Family, dict[str, Any]]]] = {}
        for view, doc in zip(views.values(), data["views"]):
            for k, dim in enumerate(doc["dims"]):
                self.by_name.setdefault(dim["name"], []).append((view.family(k), dim))

    def families(self, dim: str) -> frozenset[Family]:
        return frozenset(fam for fam, _ in self.by_name.get(dim, ()))

    def cell(self, dim: str, metric: str) -> Any:
        """The plan's value of ``metric`` for ``dim`` (None: no dim of that name)."""
        values = [d[metric] for _, d in self.by_name.get(dim, ())]
        if not values:
            return None
        return all(values) if metric.startswith("intra_") else max(values)

    def seconds(self, dim: str, nbytes: int, links: Links) -> float | None:
        """The estimated time of ``dim``'s traffic: once per distinct communicator."""
        if dim not in self.by_name:
            return None
        slowest = {fam: d for fam, d in self.by_name[dim]}
        return sum(links.allreduce_seconds(nbytes, d["size"], inside=d["intra_domain"])
                   for d in slowest.values())


def _row(placed: list[_Placed], dim: str | None, metric: tuple[str, str, str | None],
         values: list[Any]) -> dict[str, Any]:
    """One row: its values per plan, which plans have the better value (none when the
    values do not differ), and which plans share the dim's groups."""
    name, label, better = metric
    # times are sums of floats: equal to 9 digits is equal (no mark for rounding noise)
    keys = [float(f"{v:.9g}") if isinstance(v, float) else v for v in values]
    present = [v for v in keys if v is not None]
    best: list[str] = []
    if better is not None and len(set(present)) > 1:
        top = min(present) if better == "lower" else max(present)
        best = [p.name for p, v in zip(placed, keys) if v == top]
    shared: list[list[str]] = []
    if dim is not None:
        same: dict[frozenset[Family], list[str]] = {}
        for p in placed:
            if p.families(dim):
                same.setdefault(p.families(dim), []).append(p.name)
        shared = [names for names in same.values() if len(names) > 1]
    return {"dim": dim, "metric": name, "label": label, "values": values, "better": better,
            "best": best, "shared": shared}


def _dim_rows(placed: list[_Placed], dim: str, nbytes: int | None, links: Links,
              domains: bool) -> list[dict[str, Any]]:
    rows = [_row(placed, dim, m, [p.cell(dim, m[0]) for p in placed])
            for m in (*_DIM_ROWS, *(_DOMAIN_ROWS if domains else ()))]
    if nbytes is not None:
        rows.append(_row(placed, dim, _TIME_ROW,
                         [p.seconds(dim, nbytes, links) for p in placed]))
    return rows


def _plan_rows(placed: list[_Placed], nbytes: dict[str, int], links: Links
               ) -> list[dict[str, Any]]:
    rows = [_row(placed, None, _PLAN_ROWS[0],
                 [p.data["communicators_per_rank"] for p in placed]),
            _row(placed, None, _PLAN_ROWS[1],
                 [p.data["memory"]["bytes_per_rank"] for p in placed])]
    if nbytes:
        totals = [sum(s for d, b in nbytes.items()
                      if (s := p.seconds(d, b, links)) is not None) for p in placed]
        rows.append(_row(placed, None, ("seconds", "est. comm. time/step", "lower"), totals))
    return rows
