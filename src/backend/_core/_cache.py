"""The one group cache every backend shares: lazy, deduplicated, thread-safe."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import attrs

from mesh import Family, MeshView

from ._errors import GroupCreationError, ReentrantCreationError
from ._options import GroupOptions

__all__ = ["CacheObserver", "CreationRecord", "GroupCache", "GroupKey", "group_key"]


def _wait(fut: Future[G], dim: str) -> G:
    """The result another thread's creation gave, or a copy of its exception chained to it."""
    error = fut.exception()
    if error is None:
        return fut.result()
    try:
        mine = copy.copy(error)  # same type and message, a traceback of its own
    except Exception:
        mine = GroupCreationError(f"creating the group of {dim!r} failed in another thread: "
                                  f"{error}")
    raise mine from error

G = TypeVar("G")


@attrs.frozen
class GroupKey:
    """The canonical key of a family of groups: the family and the options.

    Two views, of any universes, reach the same key along a dim exactly when
    their groups are the same ordered rank tuples (:meth:`mesh.MeshView.family`):
    O(ndim) over an identity universe; an explicit universe's groups are listed
    once per (universe, dim layout) and remembered.
    """

    family: Family
    options: GroupOptions


def group_key(view: MeshView, dim: int, options: GroupOptions) -> GroupKey:
    """The key of ``view``'s groups along dim ``dim`` (an index) created with ``options``."""
    return GroupKey(view.family(dim), options)


@attrs.frozen
class CreationRecord:
    """One group creation: its key, the dim name that first asked, and the group."""

    key: GroupKey
    dim: str
    group: Any


class CacheObserver:
    """Told what a :class:`GroupCache` does, after it did it (outside its lock; a hook must
    not ask the cache to create).  The hooks do nothing here: an observer overrides those
    it needs (the offline check's recorder hears which groups a ``retire`` ended)."""

    def created(self, record: CreationRecord) -> None:
        """A creation succeeded."""

    def evicted(self, key: GroupKey, value: Any) -> None:
        """An entry was forgotten by :meth:`GroupCache.evict` (created or adopted)."""


class GroupCache(Generic[G]):
    """Create each key's value once, on first request; concurrent requests wait for it.

    A failed creation leaves no entry and a later request tries again; each
    thread that waited on it gets its own copy of the exception, chained to the
    original (so tracebacks do not pile up on one object).  A creation that asks
    the cache for its own key (in the creating thread) raises
    :class:`~backend.ReentrantCreationError` instead of waiting on itself forever.
    ``records`` lists every successful creation in order; :meth:`adopt` stores a value
    made elsewhere (``from_group``'s groups), which is no creation: :meth:`clear` forgets it
    without returning it, so whoever made it ends it.  :meth:`observe` adds a
    :class:`CacheObserver`, told of creations and evictions.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[GroupKey, G] = {}
        self._pending: dict[GroupKey, tuple[Future[G], int]] = {}
        self._records: list[CreationRecord] = []
        self._observers: tuple[CacheObserver, ...] = ()

    def observe(self, observer: CacheObserver) -> None:
        """Tell ``observer`` of every creation and eviction from now on."""
        with self._lock:
            self._observers = (*self._observers, observer)

    def get_or_create(self, key: GroupKey, dim: str, create: Callable[[], G]) -> G:
        """The value for ``key``, calling ``create()`` if no one has yet."""
        me = threading.get_ident()
        with self._lock:
            if key in self._entries:
                return self._entries[key]
            pending = self._pending.get(key)
            if pending is None:
                fut: Future[G] = Future()
                self._pending[key] = (fut, me)
            elif pending[1] == me:
                raise ReentrantCreationError(
                    f"creating the group of {dim!r} asked for that same group again (a "
                    f"creation that needs itself): {key!r}")
        if pending is not None:
            return _wait(pending[0], dim)
        try:
            value = create()
        except BaseException as e:
            with self._lock:
                del self._pending[key]
            fut.set_exception(e)
            raise
        self._store(CreationRecord(key, dim, value), fut)
        return value

    def _store(self, record: CreationRecord, fut: Future[G]) -> None:
        """A creation succeeded: keep it, wake the threads waiting on it, tell observers."""
        with self._lock:
            self._entries[record.key] = record.group
            del self._pending[record.key]
            self._records.append(record)
            observers = self._observers
        fut.set_result(record.group)
        for observer in observers:
            observer.created(record)

    def adopt(self, key: GroupKey, value: G) -> G:
        """``value`` for ``key``, unless the cache holds one already (then that one)."""
        with self._lock:
            return self._entries.setdefault(key, value)

    def snapshot(self) -> list[tuple[GroupKey, G]]:
        """Every (key, value) the cache holds now."""
        with self._lock:
            return list(self._entries.items())

    def evict(self, keys: Iterable[GroupKey]) -> list[CreationRecord]:
        """Forget ``keys``; return the records of those this cache created, in creation
        order (they leave :attr:`records`)."""
        gone = set(keys)
        with self._lock:
            left = [(k, self._entries[k]) for k in self._entries if k in gone]  # in order
            for key, _ in left:
                del self._entries[key]
            created = [r for r in self._records if r.key in gone]
            self._records = [r for r in self._records if r.key not in gone]
            observers = self._observers
        for observer in observers:
            for key, value in left:
                observer.evicted(key, value)
        return created

    @property
    def records(self) -> tuple[CreationRecord, ...]:
        """Every creation so far, in order."""
        with self._lock:
            return tuple(self._records)

    def clear(self) -> list[G]:
        """Forget every entry; return the values this cache created, in creation order."""
        with self._lock:
            values = [r.group for r in self._records]
            self._entries.clear()
            self._records.clear()
            return values
