"""The checks every view's dims pass: one mode per name, names unique, dims that tile.

Shared by :class:`~mesh.MeshView` and :class:`~mesh.Family` (a family is checked as a
one-dim view), so both refuse the same layouts with the same messages.
"""

from __future__ import annotations

from layout import Layout, coalesce, flatten, is_tractable, make_layout

from ._errors import (
    DuplicateNameError,
    InvalidDimsError,
    InvalidSizeError,
    MeshTypeError,
    OverlapError,
)
from ._input import as_names, show
from ._rankmap import RankMap

__all__ = ["canonical_dims"]


def canonical_dims(layout: object, names: object, ranks: object
                   ) -> tuple[Layout, tuple[str, ...], RankMap]:
    """``(layout, names, ranks)`` checked and canonical (every mode coalesced), or the
    :class:`~mesh.MeshError` naming what is wrong: a non-layout or non-rank-map, names
    not unique or not one per mode, a stride-0 dim, dims that overlap or interleave, or
    dims whose span does not divide the universe.

    >>> print(canonical_dims(Layout((2, (2, 2)), (4, (2, 1))), ("dp", "tp"), RankMap(8))[0])
    (2,4):(4,1)
    """
    if not isinstance(layout, Layout):
        raise MeshTypeError(f"layout must be a layout.Layout, got {show(layout)}")
    if not isinstance(ranks, RankMap):
        raise MeshTypeError(f"ranks must be a mesh.RankMap, got {show(ranks)}")
    names_t = _unique(as_names(names))
    if not names_t:
        raise InvalidSizeError(f"a mesh needs at least one dim, got the layout {layout}")
    modes = [coalesce(m) for m in layout]
    if len(modes) != len(names_t):
        raise InvalidDimsError(f"the layout {layout} has {len(modes)} dims but "
                               f"{len(names_t)} names were given: {names_t!r}")
    _check_tiling(make_layout(*modes), names_t, ranks)
    return make_layout(*modes), names_t, ranks


def _check_tiling(canonical: Layout, names: tuple[str, ...], ranks: RankMap) -> None:
    """No dim repeats a rank, and the dims' instances tile the universe."""
    for name, m in zip(names, canonical):
        if _repeats(m):
            raise OverlapError(f"dim {name!r} has the stride-0 layout {m}: it would repeat "
                               "ranks")
    if not is_tractable(canonical):
        raise OverlapError(f"the dims {_dims(canonical, names)} overlap or interleave (layout "
                           f"{canonical}), so their instances cannot tile the {ranks.size} "
                           "ranks of the universe")
    span = _span(canonical)
    if ranks.size % span:
        raise OverlapError(f"the dims {_dims(canonical, names)} (layout {canonical}) span "
                           f"{show(span)} offsets, which does not divide the universe of "
                           f"{ranks.size} ranks")


def _dims(canonical: Layout, names: tuple[str, ...]) -> str:
    """``dp=2, tp=4``: the dims, for the error messages only."""
    return ", ".join(f"{n}={show(m.size)}" for n, m in zip(names, canonical))


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise DuplicateNameError(f"dim name {n!r} appears twice in {names!r}; names must "
                                     "be unique")
        seen.add(n)
    return names


def _repeats(mode: Layout) -> bool:
    """Whether a mode has a stride-0 part of size > 1 (it would repeat ranks).

    >>> _repeats(Layout((2, 2), (0, 1))), _repeats(Layout((1, 2), (0, 1)))
    (True, False)
    """
    return any([s > 1 and d == 0 for s, d in zip(flatten(mode.shape), flatten(mode.stride))])


def _span(L: Layout) -> int:
    return max([s * d for s, d in zip(flatten(L.shape), flatten(L.stride)) if s > 1],
               default=1)
