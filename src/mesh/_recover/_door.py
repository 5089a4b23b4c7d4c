"""The recovery wing's door: views, failed ranks, spare ranks and limits, checked.

Each public function of the wing (:func:`~mesh.blast`, :func:`~mesh.drop`,
:func:`~mesh.substitute`, :func:`~mesh.survive`) checks its input here once, then calls a
core that trusts it (``blast_of``, ``dropped``, ``substituted``, ``survived``), as
``layout._door`` sits over ``layout._inttuple``; the plan wing's ``explain --fail`` checks
the failed set and the spares here once and calls the cores for every way.  Two helpers
read ranks of data already checked: :func:`offset` and :func:`row`.

Failed ranks are a *set* in meaning (the answer does not depend on their order, nor on a
rank reported twice), so they are returned ascending and distinct: two processes that
detected the same failures in different orders compute the same survivors.  Spares keep
their order: the lowest failed rank gets the first spare.
"""

from __future__ import annotations

from collections.abc import Sequence

from layout import Layout

from .._core import (
    MAX_PLAN_DIMS,
    MAX_UNIVERSE,
    InvalidRanksError,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    RankMap,
    RankNotInMeshError,
    SurvivalError,
    as_int,
    as_name,
    check_plan_dims,
    items_of,
    ordered,
    rank_rows,
    show,
)

__all__ = ["as_limit", "failed_ranks", "named_views", "offset", "row", "spare_ranks",
           "the_view"]


def the_view(view: object, what: str) -> MeshView:
    """``view`` if it is a :class:`~mesh.MeshView`, else :class:`~mesh.MeshTypeError`."""
    if not isinstance(view, MeshView):
        raise MeshTypeError(f"{what} must be a MeshView, got {show(view)}")
    return view


def named_views(views: object, what: str) -> tuple[tuple[str, MeshView], ...]:
    """One view (named ``"view"``) or a mapping of names to views, as ordered pairs: at most
    :data:`~mesh.MAX_PLAN_DIMS` dims in all (a longer or never-ending mapping is refused
    after that many entries, with :class:`~mesh.InvalidSizeError`)."""
    if isinstance(views, MeshView):
        out: tuple[tuple[str, MeshView], ...] = (("view", views),)
    else:
        items = items_of(views, what, "a MeshView or a mapping of names to MeshViews",
                         limit=MAX_PLAN_DIMS)
        out = tuple([(as_name(n, f"every view name in {what}"),
                      the_view(v, f"view {show(n)}")) for n, v in items])
    check_plan_dims((v.ndim for _, v in out), what)
    return out


def as_limit(limit: object, what: str = "limit") -> int:
    """A listing bound: an int >= 0."""
    n = as_int(limit, what)
    if n < 0:
        raise InvalidSizeError(f"{what} must be an int >= 0, got {show(n)}")
    return n


def failed_ranks(failed: object, universes: Sequence[RankMap]) -> tuple[int, ...]:
    """The failed ranks, ascending and distinct; each must be in one of ``universes``."""
    ranks = sorted({as_int(r, "every failed rank") for r in ordered(failed, "failed ranks")})
    for r in ranks:
        if all(u.offset_of(r) is None for u in universes):
            where = ", ".join(repr(u) for u in universes[:4]) or "no view"
            raise RankNotInMeshError(f"failed rank {show(r)} is not in the universe of any "
                                     f"view given ({where}); failed ranks must be ranks of it")
    return tuple(ranks)


def spare_ranks(spares: object, needed: int, universe: RankMap) -> tuple[int, ...]:
    """The first ``needed`` of ``spares``: distinct ranks in [0, 2**63) outside ``universe``."""
    given = tuple([as_int(s, "every spare rank", error=InvalidRanksError)
                   for s in ordered(spares, "spares")])
    seen: set[int] = set()
    for s in given:
        if not 0 <= s < MAX_UNIVERSE:
            raise InvalidRanksError(f"spare rank {show(s)} is not in [0, 2**63)")
        if s in seen:
            raise SurvivalError(f"spare rank {s} is listed twice in spares {show(spares)}")
        if universe.offset_of(s) is not None:
            raise SurvivalError(f"spare rank {s} is already in the view ({universe!r}); a "
                                "spare must be a rank outside it (a failed rank is no spare)")
        seen.add(s)
    if len(given) < needed:
        raise SurvivalError(f"{needed} failed ranks need {needed} spares, got {len(given)}: "
                            f"{show(spares)}")
    return given[:needed]


def offset(ranks: RankMap, rank: int) -> int:
    """The offset of a rank known to be in ``ranks``."""
    found = ranks.offset_of(rank)
    if found is None:
        raise RankNotInMeshError(f"rank {show(rank)} is not in {ranks!r}")
    return found


def row(ranks: RankMap, inner: Layout, base: int) -> list[int]:
    """The ranks ``ranks(base + inner(i))`` for every ``i``, in order (the caller checked
    the size)."""
    return list(rank_rows(ranks, Layout(1, 0), inner, base)[0])
