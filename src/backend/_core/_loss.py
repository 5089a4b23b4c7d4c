"""A backend's state after losing ranks: one value, replaced whole by each ``retire``.

It holds the ranks lost so far and the groups the last loss kept, by their members and
options; :meth:`CachedBackend.get_group <backend._core._base.CachedBackend.get_group>` asks
it one question (:meth:`Loss.serving`) before its cache: "is this request's group ended, or
does a kept group serve it?".  Before any loss the answer is "neither", in one test.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Generic, TypeVar

from mesh import MeshView

from ._cache import GroupKey
from ._errors import RankLostError
from ._members import holds_any, members
from ._options import GroupOptions

__all__ = ["Loss", "Members"]

G = TypeVar("G")

Members = tuple[tuple[int, ...], GroupOptions]  # a group's ranks in its order, its options


class Loss(Generic[G]):
    """Ranks ``lost`` so far; the groups kept by the last loss: ``carried`` (members and
    options given: groups its ending shrank to their survivors, which serve first) and
    ``kept`` (cache entries, indexed by members on the first question that needs them, so
    ``retire`` never lists a family's members).  Thread-safe: concurrent questions wait
    while the kept groups are indexed."""

    def __init__(self, lost: frozenset[int] = frozenset(),
                 carried: Sequence[tuple[Members, G]] = (),
                 kept: Sequence[tuple[GroupKey, G]] = ()) -> None:
        self.lost = lost
        self._by_members: dict[Members, G] = {}
        for found, group in carried:
            self._by_members.setdefault(found, group)
        self._kept = list(kept)
        self._lock = threading.Lock()
        self._none = not lost and not carried and not kept

    def serving(self, view: MeshView, dim: int, options: GroupOptions, key: GroupKey,
                rank: int) -> G | None:
        """The kept group that serves ``rank``'s request along ``dim`` of ``view`` (a group
        with the same members and options), or None: create it.  Raises
        :class:`~backend.RankLostError` when the request's family holds a lost rank (its
        group was ended; the caller must ask the mesh ``rebind`` returned)."""
        if self._none:
            return None
        if self.lost and holds_any(key.family, rank, self.lost):
            gone = sorted(r for r in self.lost if key.family.ranks.offset_of(r) is not None)
            raise RankLostError(
                f"rank {rank}'s group along {view.names[dim]!r} of {view!r} holds lost "
                f"ranks (among {gone[:8]}{' ...' if len(gone) > 8 else ''}): it was ended; "
                "ask the mesh rebind() returned")
        if self._kept:
            with self._lock:  # listed once, by the first question after the loss
                for k, group in self._kept:
                    self._by_members.setdefault((members(k.family, rank), k.options), group)
                self._kept = []
        if not self._by_members:
            return None
        return self._by_members.get((view.group(rank, dim), options))

    def without(self, groups: Sequence[G]) -> Loss[G]:
        """The same loss with ``groups`` (by identity) no longer kept: an aborted group serves
        no later request."""
        gone = {id(g) for g in groups}
        if not gone or self._none:
            return self
        with self._lock:
            carried = [(m, g) for m, g in self._by_members.items() if id(g) not in gone]
            kept = [(k, g) for k, g in self._kept if id(g) not in gone]
        return Loss(self.lost, carried=carried, kept=kept)
