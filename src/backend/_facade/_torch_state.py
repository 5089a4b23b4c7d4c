"""A universe's and a layout's torch-side values: what torch's ``DeviceMesh`` keeps about
ranks, made from ours once (imports torch; the facade's torch wing and ``to_torch`` use
it)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import torch

from layout import Layout
from mesh import MeshView, RankMap

from .._c10d import ascending_groups
from ._binding import Binding
from ._torch_private import FlatLayout, MeshLayout

__all__ = ["FlatRanks", "keeps_unsorted_order", "torch_layout", "universe_ranks"]


class FlatRanks(Sequence[int]):
    """torch's ``_flatten_rank_map`` of a universe: its ranks in offset order, stored as
    the :class:`~mesh.RankMap` (O(1) memory for an identity universe).

    Equal to another ``FlatRanks`` exactly when the rank maps are equal (O(1) for two
    identity maps, and for the one object a universe shares), to a tuple when it lists
    the same ranks (O(size) the first time; the tuple found equal is remembered, so a
    torch mesh compared again, as DTensor's caches do, costs O(1)); its hash is the
    tuple's, computed once.  A deep copy (dynamo keeps a guard's values that way) is the
    object itself: it is immutable.

    >>> from mesh import MeshView, RankMap
    >>> FlatRanks(RankMap(4)) == (0, 1, 2, 3), hash(FlatRanks(RankMap(4))) == hash((0, 1, 2, 3))
    (True, True)
    >>> FlatRanks(RankMap(2**40))[-1], len(FlatRanks(RankMap.explicit([3, 1])))
    (1099511627775, 2)
    """

    __slots__ = ("_equal", "_hash", "ranks")

    def __init__(self, ranks: RankMap) -> None:
        self.ranks = ranks
        self._hash: int | None = None
        self._equal: tuple[int, ...] | None = None  # the last tuple found equal

    def __len__(self) -> int:
        return self.ranks.size

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...

    def __getitem__(self, i: int | slice) -> int | tuple[int, ...]:
        if isinstance(i, slice):
            return self.ranks.take(range(*i.indices(self.ranks.size)))
        n = self.ranks.size
        if not -n <= i < n:
            raise IndexError(f"rank map index {i} out of range for {n} ranks")
        return self.ranks(i % n)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks.ranks or range(self.ranks.size))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FlatRanks):
            return self is other or self.ranks == other.ranks
        if isinstance(other, tuple):
            if other is self._equal:
                return True
            if len(other) != self.ranks.size or tuple(self) != other:
                return False
            self._equal = other
            return True
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))
        return self._hash

    def __deepcopy__(self, memo: dict[int, Any]) -> FlatRanks:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return FlatRanks, (self.ranks,)

    def __repr__(self) -> str:
        return f"FlatRanks({self.ranks!r})"


def torch_layout(layout: Layout) -> MeshLayout:
    """torch's ``_MeshLayout`` with one axis per top-level mode of ``layout``."""
    return MeshLayout([FlatLayout(m.shape, m.stride) for m in layout])


def universe_ranks(mesh: Binding[Any]) -> tuple[torch.Tensor, FlatRanks]:
    """The mesh's universe as torch's ``_rank_map`` (an int tensor) and
    ``_flatten_rank_map`` (:class:`FlatRanks`): one pair per universe, made on first use."""
    ranks = mesh.view.ranks
    universe = mesh.backend.universe(ranks)
    with universe.lock:
        if universe.torch_ranks is None:
            tensor = torch.arange(ranks.size, dtype=torch.int) if ranks.ranks is None \
                else torch.tensor(ranks.ranks, dtype=torch.int)
            universe.torch_ranks = (tensor, FlatRanks(ranks))
        found: tuple[torch.Tensor, FlatRanks] = universe.torch_ranks
        return found


def keeps_unsorted_order(view: MeshView) -> bool:
    """torch 2.15's ``preserve_rank_order`` of a facade mesh over ``view``: whether one of its
    groups lists its ranks in an order that torch's default (sorted) groups would not.

    The facade's groups always keep the mesh's order (a group's rank is the coordinate), so
    where every group is ascending sorting changes nothing and the honest value is torch's
    default, False: the mesh equals a default torch mesh over the same ranks.  Where some
    group is not ascending (a permuted rank map, a transposed flatten) it is True: a default
    torch mesh would have sorted that group, so it is a different mesh, and equals a torch
    mesh made with ``preserve_rank_order=True``.  Arithmetic on the layout for an identity
    universe; an explicit universe's groups are listed once (it holds its ranks already).

    >>> from mesh import MeshView
    >>> keeps_unsorted_order(MeshView.from_shape((2, 4), ("dp", "tp")))
    False
    >>> keeps_unsorted_order(MeshView.from_shape((2, 2), ("dp", "tp"))["tp", "dp"].flatten())
    True
    >>> keeps_unsorted_order(MeshView.from_ranks([0, 2, 1, 3], ("w",)))
    True
    >>> keeps_unsorted_order(MeshView.from_ranks([[0, 1], [3, 2]], ("dp", "tp")))
    True
    """
    return not all(ascending_groups(view, k) for k in range(view.ndim))
