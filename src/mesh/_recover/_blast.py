"""The blast radius of failed ranks: which groups and instances they break, per view and dim.

A group (or instance) is named by its *leader*, the rank at its first coordinate:
``view.group(leader, dim)`` (``view.instance(leader)``) lists it.  Everything is found from
the failed ranks alone: each one's group along each dim is located by arithmetic through the
layout (``group_offset``), so the cost is O(ndim + |failed| × group size) at most, and only
the first ``limit`` ranks of broken groups and of stranded ranks are ever listed.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from .._core import Dim, MeshView, RankMap, UnknownViewError, show
from ._door import as_limit, failed_ranks, named_views, row
from ._made import Made

__all__ = ["SHOWN", "Blast", "DimBlast", "ViewBlast", "blast", "blast_of"]

SHOWN = 64
"""The default ``limit`` of :func:`blast`: how many ranks each listing of a dim shows."""


@attrs.frozen(init=False)
class DimBlast(Made):
    """What failed ranks do to one dim of one view.

    ``broken_leaders`` are the leaders of every group that lost a member, in the order of
    ``view.groups(dim)``; ``first_broken_groups`` lists as many of those groups, whole, as
    fit in ``limit`` ranks; ``stranded_ranks`` counts the healthy members of broken groups
    and ``first_stranded_ranks`` lists the first ``limit`` of them, group by group.
    """

    view: str
    dim: str
    group_size: int
    groups: int
    broken_leaders: tuple[int, ...]
    stranded_ranks: int
    first_broken_groups: tuple[tuple[int, ...], ...]
    first_stranded_ranks: tuple[int, ...]

    MADE_BY = "mesh.blast(views, failed)"

    @property
    def broken_groups(self) -> int:
        """How many groups lost a member."""
        return len(self.broken_leaders)

    @property
    def intact_groups(self) -> int:
        """How many groups lost no member."""
        return self.groups - len(self.broken_leaders)

    @functools.cached_property
    def _broken(self) -> frozenset[int]:
        return frozenset(self.broken_leaders)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the counts and the first broken groups and stranded ranks."""
        return {"view": self.view, "dim": self.dim, "group_size": self.group_size,
                "groups": self.groups, "broken_groups": self.broken_groups,
                "intact_groups": self.intact_groups, "stranded_ranks": self.stranded_ranks,
                "first_broken_groups": [list(g) for g in self.first_broken_groups],
                "first_stranded_ranks": list(self.first_stranded_ranks)}


@attrs.frozen(init=False)
class ViewBlast(Made):
    """What failed ranks do to one view: its broken instances and, per dim, a
    :class:`DimBlast` (``view_blast[dim]``, by name or index)."""

    name: str
    view: MeshView
    broken_instance_leaders: tuple[int, ...]
    dims: tuple[DimBlast, ...]

    MADE_BY = "mesh.blast(views, failed)"

    @property
    def instances(self) -> int:
        """How many instances the view stands for."""
        return self.view.num_instances

    @property
    def broken_instances(self) -> int:
        """How many instances hold a failed rank."""
        return len(self.broken_instance_leaders)

    def __getitem__(self, dim: Dim) -> DimBlast:
        return self.dims[self.view.index(dim)]

    def is_broken(self, dim: Dim, rank: int) -> bool:
        """Whether ``rank``'s group along ``dim`` lost a member: O(ndim), no listing."""
        k = self.view.index(dim)
        return self.view.ranks(self.view.group_offset(rank, k)) in self.dims[k]._broken

    def to_dict(self, limit: int = SHOWN) -> dict[str, Any]:
        """The view's entry: instance counts and the first ``limit`` broken ones' leaders."""
        return {"view": self.name, "instances": self.instances,
                "broken_instances": self.broken_instances,
                "first_broken_instances": list(self.broken_instance_leaders[:as_limit(limit)])}


@attrs.frozen(init=False)
class Blast(Made):
    """The blast radius of ``failed`` ranks over named views: ``blast[name]`` is a
    :class:`ViewBlast`, ``blast[name][dim]`` a :class:`DimBlast`."""

    failed: tuple[int, ...]
    views: tuple[ViewBlast, ...]

    MADE_BY = "mesh.blast(views, failed)"

    def __getitem__(self, name: str) -> ViewBlast:
        if isinstance(name, str):  # anything else (an array, a float) names no view
            for v in self.views:
                if v.name == name:
                    return v
        raise UnknownViewError(f"no view {show(name)} in this blast; the views are "
                              f"{[v.name for v in self.views]!r}")

    def is_broken(self, view: str, dim: Dim, rank: int) -> bool:
        """Whether ``rank``'s group along ``dim`` of ``view`` lost a member (O(ndim))."""
        return self[view].is_broken(dim, rank)

    @property
    def entries(self) -> tuple[DimBlast, ...]:
        """One :class:`DimBlast` per view and dim, views in order, dims in order."""
        return tuple([d for v in self.views for d in v.dims])

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: ``failed``, ``views`` (one entry per view: instances) and
        ``blast`` (one entry per view and dim: ``{"view", "dim", "broken_groups",
        "stranded_ranks", ...}``)."""
        return {"failed": list(self.failed), "views": [v.to_dict() for v in self.views],
                "blast": [d.to_dict() for d in self.entries]}

    def __str__(self) -> str:
        lines = [f"failed ranks: {list(self.failed[:SHOWN])}"]
        for d in self.entries:
            lines.append(f"{d.view}.{d.dim}: {d.broken_groups} of {d.groups} groups broken "
                         f"{list(d.first_broken_groups)}, {d.stranded_ranks} ranks stranded")
        return "\n".join(lines)


def blast(views: object, failed: object, *, limit: object = SHOWN) -> Blast:
    """The blast radius of ``failed`` ranks over ``views`` (a view, or a mapping of names
    to views), per view and dim, without listing any universe.

    A rank outside every view's universe is refused (:class:`~mesh.RankNotInMeshError`);
    one outside some view's universe leaves that view alone.  ``limit`` bounds each listing.

    Cost: O(ndim) arithmetic per failed rank, view and dim, plus the listings (at most
    ``limit`` ranks each, and ``limit + len(failed)`` looked at for the stranded ranks); a
    mapping of views is read up to :data:`~mesh.MAX_PLAN_DIMS` entries.

    >>> from mesh import MeshView, blast
    >>> hit = blast({"world": MeshView.from_shape((4, 8), ("dp", "tp"))}, [13])
    >>> hit["world"]["tp"].first_broken_groups, hit["world"]["dp"].broken_groups
    (((8, 9, 10, 11, 12, 13, 14, 15),), 1)
    >>> hit["world"]["tp"].stranded_ranks, hit.is_broken("world", "dp", 5)
    (7, True)
    """
    named = named_views(views, "blast's views")
    lim = as_limit(limit)
    return blast_of(named, failed_ranks(failed, [v.ranks for _, v in named]), lim)


def blast_of(named: tuple[tuple[str, MeshView], ...], failed: tuple[int, ...],
             limit: int) -> Blast:
    """:func:`blast` of input already checked (no checks): ``named`` views (at most
    :data:`~mesh.MAX_PLAN_DIMS` dims), ``failed`` ascending and distinct, each in some
    view's universe, ``limit >= 0``."""
    return Blast._trusted(failed, tuple([_view_blast(n, v, failed, limit) for n, v in named]))


def _view_blast(name: str, view: MeshView, failed: tuple[int, ...], limit: int) -> ViewBlast:
    mine = tuple([r for r in failed if view.ranks.offset_of(r) is not None])
    whole = view.flatten(name="instance")  # its groups are the view's instances
    starts = sorted({whole.group_offset(r, 0) for r in mine})
    dims = tuple([_dim_blast(name, view, k, mine, limit) for k in range(view.ndim)])
    return ViewBlast._trusted(name, view, view.ranks.take(starts), dims)


def _dim_blast(name: str, view: MeshView, k: int, failed: tuple[int, ...],
               limit: int) -> DimBlast:
    mode, size = view.layout[k], view.shape[k]
    starts = sorted({view.group_offset(r, k) for r in failed})
    shown = tuple([tuple(row(view.ranks, mode, s)) for s in starts[:limit // size]])
    stranded = _stranded(view.ranks, view, k, starts, frozenset(failed), limit)
    return DimBlast._trusted(name, view.names[k], size, view.ranks.size // size,
                             view.ranks.take(starts), len(starts) * size - len(failed), shown,
                             stranded)


def _stranded(ranks: RankMap, view: MeshView, k: int, starts: list[int],
              failed: frozenset[int], limit: int) -> tuple[int, ...]:
    """The first ``limit`` healthy members of the groups at ``starts``, group by group: at
    most ``limit + len(failed)`` ranks are looked at."""
    mode = view.layout[k]
    out: list[int] = []
    for s in starts:
        for i in range(view.shape[k]):
            if len(out) >= limit:
                return tuple(out)
            r = ranks(s + mode(i))
            if r not in failed:
                out.append(r)
    return tuple(out)
