"""Families: the ordered groups of one dim, as a canonical value (one communicator each)."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from layout import Layout, LayoutError, coalesce, complement, flatten, make_layout

from ._dims import canonical_dims
from ._listing import py_offsets, rank_rows
from ._rankmap import RankMap

__all__ = ["Family", "family_of"]


@attrs.frozen(init=False, repr=False)
class Family:
    """The groups along one dim of a view, canonically.

    ``ranks`` and ``layout`` (coalesced) are a universe and a dim layout whose
    groups are the family's: group ``j`` is ``ranks(C(j) + layout(i))`` for
    ``i < size(layout)``, with ``C`` the layout's complement.  Two dims, of any
    views, have equal families exactly when their groups are the same ordered
    rank tuples; a backend creates one communicator per family (and options).

    Over an identity universe the family is ``(universe, coalesced dim layout)``,
    computed in O(ndim).  Over an explicit universe the groups are listed once
    (memoized): if they are an identity family's, the family is that one;
    otherwise it is the groups sorted by first member, laid end to end
    (``RankMap.explicit(...)`` with layout ``group size:1``).

    >>> from mesh import MeshView
    >>> mesh = MeshView.from_shape((2, 2), ("dp", "tp"))
    >>> swapped = MeshView.from_ranks([[0, 2], [1, 3]], ("tp", "dp"))
    >>> mesh.family("tp") == swapped.family("tp"), mesh.family("tp")
    (True, Family(2:1 over RankMap.identity(4)))
    """

    ranks: RankMap
    layout: Layout

    def __init__(self, ranks: RankMap, layout: Layout) -> None:
        """The family of the dim ``layout`` over the universe ``ranks``, canonicalized;
        ``layout`` must be a valid one-dim view over ``ranks`` (else a MeshError)."""
        if isinstance(layout, Layout):
            layout = make_layout(layout)  # one dim, whatever the nesting
        dim, _, _ = canonical_dims(layout, ("dim",), ranks)  # types, overlap and tiling
        found = family_of(ranks, dim[0])
        self.__attrs_init__(found.ranks, found.layout)

    @classmethod
    def _trusted(cls, ranks: RankMap, layout: Layout) -> Family:
        """A family from a universe and a canonical dim layout already known valid (no checks)."""
        made = cls.__new__(cls)
        made.__attrs_init__(ranks, layout)
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return Family, (self.ranks, self.layout)  # unpickling checks again

    @property
    def group_size(self) -> int:
        """The number of ranks in each group."""
        return self.layout.size

    @property
    def num_groups(self) -> int:
        """The number of groups (they partition the universe)."""
        return self.ranks.size // self.layout.size

    def __repr__(self) -> str:
        return f"Family({self.layout} over {self.ranks!r})"


def family_of(ranks: RankMap, dim: Layout) -> Family:
    """The family of the groups of the dim layout ``dim`` (one mode of a valid view) over
    the universe ``ranks``."""
    mode = coalesce(dim)
    if ranks.is_identity:
        return Family._trusted(ranks, mode)
    return _canonical(ranks, mode)


@functools.lru_cache(maxsize=256)
def _canonical(ranks: RankMap, mode: Layout) -> Family:
    """The family of ``mode`` over an explicit universe (lists its ranks once)."""
    n = ranks.size
    groups = _listed(ranks, mode)
    if ranks.max_rank == n - 1:  # the universe is a permutation of [0, n): maybe an identity
        first = next(g for g in groups if 0 in g)
        e = _layout_of(first)
        if e is not None:
            try:
                same = set(_listed(RankMap(n), e)) == set(groups)
            except LayoutError:  # no complement in [0, n): not an identity family
                same = False
            if same:
                return Family._trusted(RankMap(n), e)
    groups.sort()
    laid = [r for g in groups for r in g]
    return Family._trusted(RankMap(n, laid), coalesce(Layout(mode.size, 1)))


def _listed(ranks: RankMap, mode: Layout) -> list[tuple[int, ...]]:
    return rank_rows(ranks, complement(mode, ranks.size), mode)


def _layout_of(seq: tuple[int, ...]) -> Layout | None:
    """The coalesced flat layout ``E`` with ``E(i) = seq[i]`` for every ``i``, or None.

    Row-major: the innermost mode's stride is ``seq[1]`` and its size the length of
    the arithmetic run from 0; a coalesced layout's next mode breaks the run (its
    stride is not ``size * stride``), so the modes are found one by one, then checked.
    """
    n = len(seq)
    if seq[0] != 0:
        return None
    shapes: list[int] = []
    strides: list[int] = []
    step = 1
    while step < n:
        d = seq[step]
        s = 1
        while s * step < n and seq[s * step] == s * d:
            s += 1
        if n % (s * step):
            return None
        shapes.append(s)
        strides.append(d)
        step *= s
    e = coalesce(Layout(tuple(reversed(shapes)), tuple(reversed(strides)))) if shapes else (
        Layout(1, 0))
    return e if tuple(py_offsets(flatten(e.shape), flatten(e.stride), 0)) == seq else None
