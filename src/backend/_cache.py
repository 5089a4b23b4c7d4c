"""The one group cache every backend shares: lazy, deduplicated, thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import attrs

from layout import Layout
from mesh import MeshView, RankMap

from ._options import GroupOptions

__all__ = ["CreationRecord", "GroupCache", "GroupKey", "group_key"]

G = TypeVar("G")


@attrs.frozen
class GroupKey:
    """The canonical key of a family of groups: universe, dim layout, options.

    Within one universe (rank map), two views reach the same groups along a
    dim exactly when that dim's coalesced layouts are equal; computing the key
    costs O(ndim), it never lists ranks.  Across universes the key is not
    canonical: an explicit rank map and the identity map can describe the
    same family (``from_ranks([[0, 2], [1, 3]])["dim1"]`` and
    ``from_shape((2, 2))["dim0"]``) and get two groups; deciding that would
    mean listing the family.
    """

    ranks: RankMap
    layout: Layout
    options: GroupOptions


def group_key(view: MeshView, dim: int, options: GroupOptions) -> GroupKey:
    """The key of ``view``'s groups along dim ``dim`` (an index) created with ``options``."""
    return GroupKey(view.ranks, view.layout[dim], options)


@attrs.frozen
class CreationRecord:
    """One group creation: its key, the dim name that first asked, and the group."""

    key: GroupKey
    dim: str
    group: Any


class GroupCache(Generic[G]):
    """Create each key's value once, on first request; concurrent requests wait for it.

    A failed creation leaves no entry (waiters see the same exception) and a
    later request tries again.  ``records`` lists every successful creation in
    order.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, G] = {}
        self._pending: dict[Hashable, Future[G]] = {}
        self._records: list[CreationRecord] = []

    def get_or_create(self, key: GroupKey, dim: str, create: Callable[[], G]) -> G:
        """The value for ``key``, calling ``create()`` if no one has yet."""
        with self._lock:
            if key in self._entries:
                return self._entries[key]
            fut = self._pending.get(key)
            owner = fut is None
            if fut is None:
                fut = self._pending[key] = Future()
        if not owner:
            return fut.result()
        try:
            value = create()
        except BaseException as e:
            with self._lock:
                del self._pending[key]
            fut.set_exception(e)
            raise
        with self._lock:
            self._entries[key] = value
            del self._pending[key]
            self._records.append(CreationRecord(key, dim, value))
        fut.set_result(value)
        return value

    @property
    def records(self) -> tuple[CreationRecord, ...]:
        """Every creation so far, in order."""
        with self._lock:
            return tuple(self._records)

    def clear(self) -> list[G]:
        """Forget every entry; return the values in creation order."""
        with self._lock:
            values = [r.group for r in self._records]
            self._entries.clear()
            self._records.clear()
            return values
