"""Re-deriving a whole plan from the survivors: :func:`survive` and its :class:`Survival`.

Views do not record how they were derived, so :func:`survive` takes the plan's
:data:`Derivation`, a function of the world (``plan(world) -> {name: view}``, the way a
torchtitan-style script builds its meshes): it is called on the old world and on the
surviving one, and each new group is compared with the old group of the same view and dim
holding the same rank.  A new group is *intact* when it is exactly an old group (same
members, same order, so no failed rank): its communicator can be kept.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from layout import complement, show_error

from .._core import (
    MAX_LISTED_RANKS,
    Dim,
    MeshError,
    MeshTypeError,
    MeshView,
    SurvivalError,
    UnknownViewError,
    check_limit,
    numpy,
    rank_table,
    show,
)
from ._blast import SHOWN, Blast, blast_of
from ._door import as_limit, failed_ranks, named_views, spare_ranks, the_view
from ._made import Made
from ._ways import dropped, refactored, substituted

__all__ = ["Derivation", "Survival", "Tables", "counted_groups", "derived", "survive", "survived"]

Derivation = Callable[[MeshView], Mapping[str, MeshView]]
"""How a program derives its named views (its plan) from its world view: what
:func:`survive` calls on the old world and on the surviving one."""

Groups = tuple[tuple[int, ...], ...]


def _frozen(views: Mapping[str, MeshView]) -> Mapping[str, MeshView]:
    return types.MappingProxyType(dict(views))


@attrs.frozen(init=False, hash=False)
class Survival(Made):
    """A plan re-derived from the survivors of ``failed`` ranks (made by :func:`survive`).

    ``world`` and ``views`` are the surviving world and plan; ``old_world`` and
    ``old_views`` the plan before.  ``dropped`` names the world dim whose slices were
    dropped (None when spares were substituted); ``spares`` are the spares used, the i-th
    in place of the i-th failed rank (``failed`` is ascending).  A rank in neither world is
    in no view; a healthy rank dropped with its slice is in the old world only.
    """

    failed: tuple[int, ...]
    dropped: str | None
    spares: tuple[int, ...]
    old_world: MeshView
    world: MeshView
    old_views: Mapping[str, MeshView] = attrs.field(converter=_frozen)
    views: Mapping[str, MeshView] = attrs.field(converter=_frozen)

    MADE_BY = "mesh.survive(plan, world, failed, ...)"

    def __hash__(self) -> int:
        return hash((self.failed, self.dropped, self.spares, self.world,
                     tuple(self.views.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return Survival._trusted, (self.failed, self.dropped, self.spares, self.old_world,
                              self.world, dict(self.old_views), dict(self.views))

    def _pair(self, view: str, dim: Dim) -> tuple[MeshView, MeshView, int]:
        """(old view, new view, dim index) of a view name and dim (same names in both)."""
        if not isinstance(view, str) or view not in self.views:
            raise UnknownViewError(f"no view {show(view)} in this plan; the views are "
                                  f"{list(self.views)!r}")
        new = self.views[view]
        return self.old_views[view], new, new.index(dim)

    def is_intact(self, view: str, dim: Dim, rank: int) -> bool:
        """Whether ``rank``'s new group along ``dim`` of ``view`` is exactly its old group
        there (so its communicator can be kept): O(ndim + group size).  Per view and dim: a
        backend's ``rebind`` also keeps an old group with the same members that served
        another dim, so this is a lower bound of what it reuses.  ``rank`` must be in
        the surviving world (else :class:`~mesh.RankNotInMeshError`)."""
        old, new, k = self._pair(view, dim)
        mine = new.group(rank, k, limit=new.ranks.size)
        if old.shape[k] != new.shape[k] or old.ranks.offset_of(rank) is None:
            return False
        return old.group(rank, k, limit=old.ranks.size) == mine

    def intact_groups(self, view: str, dim: Dim, *, limit: int = MAX_LISTED_RANKS) -> Groups:
        """Every new group along ``dim`` of ``view`` that is exactly an old one (lists the
        universe: at most ``limit`` ranks), in the order of ``views[view].groups(dim)``."""
        return self._split(view, dim, limit)[0]

    def new_groups(self, view: str, dim: Dim, *, limit: int = MAX_LISTED_RANKS) -> Groups:
        """Every new group along ``dim`` of ``view`` that is no old group (it needs a new
        communicator), in the order of ``views[view].groups(dim)``."""
        return self._split(view, dim, limit)[1]

    def _split(self, view: str, dim: Dim, limit: int) -> tuple[Groups, Groups]:
        old, new, k = self._pair(view, dim)
        lim = as_limit(limit)
        before = set(old.groups(k, limit=lim))
        after = new.groups(k, limit=lim)
        return (tuple([g for g in after if g in before]),
                tuple([g for g in after if g not in before]))

    def group_counts(self, view: str, dim: Dim, *, limit: int = MAX_LISTED_RANKS
                     ) -> tuple[int, int]:
        """``(intact, new)``: how many of :meth:`intact_groups` and :meth:`new_groups` there
        are, without building them (a dim whose size changed has no intact group; else one
        array comparison over both universes, at most ``limit`` ranks each, with NumPy)."""
        old, new, k = self._pair(view, dim)
        return counted_groups(old, new, k, as_limit(limit), f"group_counts({view!r}, {dim!r})")

    @functools.cached_property
    def blast(self) -> Blast:
        """The blast radius of the failed ranks over the old plan."""
        return blast_of(tuple(self.old_views.items()), self.failed, SHOWN)

    def to_dict(self, *, limit: int = MAX_LISTED_RANKS) -> dict[str, Any]:
        """Plain JSON-able data: the failure, the way to continue, the surviving world and
        views (``MeshView.to_dict``), and per view and dim the count of intact and new
        groups (lists each universe: at most ``limit`` ranks)."""
        dims = []
        for name, v in self.views.items():
            for d in v.names:
                kept, made = self.group_counts(name, d, limit=limit)
                dims.append({"view": name, "dim": d, "intact_groups": kept,
                             "new_groups": made})
        return {"failed": list(self.failed), "dropped": self.dropped,
                "spares": list(self.spares), "world": self.world.to_dict(),
                "views": {n: v.to_dict() for n, v in self.views.items()}, "groups": dims}


def _table(view: MeshView, k: int) -> Any:
    """Every group along dim ``k`` as a row of a NumPy array, ordered by first offset."""
    mode = view.layout[k]
    return rank_table(view.ranks, complement(mode, view.ranks.size), mode)


Tables = dict[tuple[MeshView, int], tuple[Any, Any]]
"""Old views' group tables and their indexes, by (view, dim index), shared by the counts
of several survivals of one old plan."""


def counted_groups(old: MeshView, new: MeshView, k: int, limit: int, what: str,
                   tables: Tables | None = None) -> tuple[int, int]:
    """:meth:`Survival.group_counts` of dim ``k`` of ``old`` and ``new`` (``limit`` checked
    against both universes, ``what`` naming the call in a refusal); ``tables`` keeps the
    old side's table and index for the next count of the same old view."""
    total = new.ranks.size // new.shape[k]
    np = numpy()
    if old.shape[k] != new.shape[k]:
        return 0, total
    if np is None:
        before = set(old.groups(k, limit=limit))
        same = sum(1 for g in new.groups(k, limit=limit) if g in before)
        return same, total - same
    for v in (old, new):
        check_limit(v.ranks.size, what, limit)
    got = None if tables is None else tables.get((old, k))
    if got is None:
        table = _table(old, k)
        got = (table, _index(np, table, dense=old.ranks.is_identity))
        if tables is not None:
            tables[(old, k)] = got
    same = _same_rows(np, got[0], got[1], _table(new, k))
    return same, total - same


def _index(np: Any, before: Any, *, dense: bool) -> Any:
    """Where each rank of ``before`` (a table of distinct ranks) sits in it, flattened: a
    table over ``[0, N)`` when ``dense`` (it holds exactly those ranks), else the sorted
    ranks and their places."""
    flat = before.ravel()
    if dense:
        where = np.empty(flat.size, dtype=np.intp)
        where[flat] = np.arange(flat.size)
        return where
    order = np.argsort(flat, kind="stable")
    return flat[order], order


def _same_rows(np: Any, before: Any, index: Any, after: Any) -> int:
    """How many rows of ``after`` are rows of ``before`` (both of one width, rows of
    distinct ranks, no rank in two rows; ``index`` is :func:`_index` of ``before``): each
    row is compared with the row of ``before`` holding its first rank.  ``before = [[0, 1],
    [2, 3]]``, ``after = [[2, 3], [1, 4]]``: rank 2 is in row 1, equal to ``[2, 3]``; rank
    1 in row 0, ``[0, 1] != [1, 4]``: 1."""
    first = after[:, 0]
    if isinstance(index, tuple):
        keys, order = index
        pos = np.searchsorted(keys, first).clip(0, keys.size - 1)
        held, at = keys[pos] == first, order[pos]
    else:
        held = first < index.size
        at = index[np.where(held, first, 0)]
    rows = before[at // before.shape[1]]
    return int((held & _rows_all(np, rows == after)).sum())


def _rows_all(np: Any, table: Any) -> Any:
    """``table.all(axis=1)`` of a boolean table: rows under 256 wide summed as bytes by one
    matmul (exact below 256; ``all(axis=1)`` walks short rows several times slower)."""
    width = table.shape[1]
    if width >= 256 or not table.flags.c_contiguous:
        return table.all(axis=1)
    return (table.view(np.uint8) @ np.ones(width, dtype=np.uint8)) == width


def survive(plan: Derivation, world: MeshView, failed: Sequence[int], *,
            drop: Dim | None = None, spares: Sequence[int] | None = None,
            limit: int = MAX_LISTED_RANKS) -> Survival:
    """Re-derive ``plan`` (a function of a world view returning named views) from the
    survivors of ``failed``: ``drop=`` a dim of ``world`` (see :func:`~mesh.drop`), or
    ``spares=`` (see :func:`~mesh.substitute`); exactly one of the two.

    Cost: the plan runs twice (on ``world`` and on the surviving world), and the survivors'
    universe is listed once (at most ``limit`` ranks, refused before listing); the plan's
    result is read up to :data:`~mesh.MAX_PLAN_DIMS` entries (a longer or never-ending
    mapping is refused with :class:`~mesh.InvalidSizeError`).  Its queries:
    :meth:`Survival.is_intact` O(ndim + group size), :meth:`Survival.group_counts` one array
    comparison over both universes, :meth:`Survival.intact_groups` lists them.

    >>> from mesh import MeshView, survive
    >>> def plan(world):
    ...     return {"world": world, "dp_cp": world.flatten(("dp", "cp"), "dp_cp")}
    >>> world = MeshView.from_shape((4, 2, 2), ("dp", "cp", "tp"))
    >>> after = survive(plan, world, [5], drop="dp")
    >>> after.world.shape, after.views["dp_cp"].group(9, "dp_cp")
    ((3, 2, 2), (1, 3, 9, 11, 13, 15))
    >>> after.is_intact("world", "tp", 9), after.is_intact("dp_cp", "dp_cp", 9)
    (True, False)
    """
    if not callable(plan):
        raise MeshTypeError(f"plan must be a function of a world view returning named views, "
                            f"got {show(plan)}")
    w = the_view(world, "survive's world")
    if (drop is None) == (spares is None):
        raise SurvivalError(f"survive takes exactly one way to continue: drop=<a dim of "
                            f"{list(w.names)!r}> or spares=[...]; got drop={show(drop)}, "
                            f"spares={show(spares)}")
    old = derived(plan, w, "world")
    dead = failed_ranks(failed, (w.ranks,))
    if drop is not None:
        return survived(plan, w, old, dead, w.index(drop), (), as_limit(limit))
    return survived(plan, w, old, dead, None, spare_ranks(spares, len(dead), w.ranks),
                    as_limit(limit))


def survived(plan: Derivation, world: MeshView, old: dict[str, MeshView],
             failed: tuple[int, ...], drop: int | None, spares: tuple[int, ...],
             limit: int, *, size: int | None = None) -> Survival:
    """:func:`survive` of input already checked (no checks): ``old`` is
    ``derived(plan, world, ...)``, ``failed`` ascending and distinct, each in ``world``'s
    universe; ``drop`` a dim index of ``world``, or None to substitute ``spares`` (one per
    failed rank, distinct, outside the universe); ``limit >= 0``.  With ``size``, dim
    ``drop`` is re-factored to that size instead (the survivors packed row-major, see
    ``refactored``).  A way that is impossible raises :class:`~mesh.SurvivalError`."""
    if drop is not None and size is not None:
        new_world = refactored(world, failed, drop, size, limit)
    elif drop is not None:
        new_world = dropped(world, failed, drop, limit)
    else:
        new_world = substituted(world, failed, spares, limit)
    new = derived(plan, new_world, "surviving world")
    _same_shape(old, new)
    name = None if drop is None else world.names[drop]
    return Survival._trusted(failed, name, spares, world, new_world, old, new)


def derived(plan: Derivation, world: MeshView, which: str) -> dict[str, MeshView]:
    """The plan's views of ``world`` (the ``which`` world), each over its universe, checked
    (at most :data:`~mesh.MAX_PLAN_DIMS` dims); any failure a SurvivalError."""
    try:
        out: object = plan(world)
    except MeshError as e:
        raise SurvivalError(f"the plan cannot be derived from the {which} {world!r}: "
                            f"{show_error(e)}") from e
    except Exception as e:  # the plan is the caller's code
        raise SurvivalError(f"the plan raised {show_error(e)} on the {which} {world!r}"
                            ) from e
    views = named_views(out, "the plan's result")
    for name, v in views:
        if v.ranks != world.ranks:
            raise SurvivalError(f"the plan's view {name!r} is over {v.ranks!r}, not over the "
                                f"{which} it was given ({world.ranks!r}): derive every view "
                                "from the world argument")
    return dict(views)


def _same_shape(old: dict[str, MeshView], new: dict[str, MeshView]) -> None:
    """The plan gives the same view names, and the same dim names per view, both times."""
    if list(old) != list(new):
        raise SurvivalError(f"the plan gave the views {list(old)!r} for the old world but "
                            f"{list(new)!r} for the surviving one")
    for name, v in new.items():
        if v.names != old[name].names:
            raise SurvivalError(f"the plan's view {name!r} has dims {old[name].names!r} for "
                                f"the old world but {v.names!r} for the surviving one")
