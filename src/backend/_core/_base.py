"""The part every backend shares: rank checks, the group cache, universes, and losing
ranks (:meth:`CachedBackend.retire`; the state it leaves is one :class:`~._loss.Loss`)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from layout import show
from mesh import Dim, MeshView, RankMap

from ._cache import CacheObserver, CreationRecord, GroupCache, GroupKey, group_key
from ._errors import BackendConfigError, NotAMemberError, RankLostError
from ._loss import Loss, Members
from ._members import holds_any
from ._options import GroupOptions, as_options
from ._reform import Onward, Reformed
from ._universe import Universe

__all__ = ["CachedBackend", "Retired"]

G = TypeVar("G")


@attrs.frozen
class Retired:
    """What :meth:`CachedBackend.retire` did: groups ended (they held a lost rank) and kept;
    ``reformed``: what became of each broken group this rank held (reconfigured in place,
    shrunk, or ended, with why not in place), in the order they were handled."""

    ended: int
    kept: int
    reformed: tuple[Reformed, ...] = ()


class CachedBackend(Generic[G]):
    """The shared part of every backend: rank checks, the group cache, universes.

    Subclasses implement :meth:`_create`, called at most once per family key.
    """

    name: ClassVar[str] = "abstract"
    default_device_type: ClassVar[str] = "cpu"
    torch_groups: ClassVar[bool] = False  # whether get_group returns torch process groups

    def __init__(self, world_size: int, rank: int) -> None:
        for what, v in (("world_size", world_size), ("rank", rank)):
            if type(v) is not int:
                raise BackendConfigError(f"{what} must be an int, got {show(v)}")
        if world_size < 1:
            raise BackendConfigError(f"world_size must be >= 1, got {show(world_size)}")
        if not 0 <= rank < world_size:
            raise BackendConfigError(f"rank must be in [0, {show(world_size)}), got {show(rank)}")
        self._world_size = world_size
        self._rank = rank
        self._cache: GroupCache[G] = GroupCache()
        self._universes: dict[RankMap, Universe] = {}
        self._universe_lock = threading.Lock()
        self._loss: Loss[G] = Loss()  # what the ranks lost so far ended and kept
        self._reformed: tuple[Reformed, ...] = ()  # what the last retire did to broken groups

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of processes."""
        return self._world_size

    @property
    def created(self) -> tuple[CreationRecord, ...]:
        """Every group this backend created, in order (for audits and tests)."""
        return self._cache.records

    def observe(self, observer: CacheObserver) -> None:
        """Tell ``observer`` what this backend's group cache creates and evicts."""
        self._cache.observe(observer)

    def universe(self, ranks: RankMap) -> Universe:
        """This backend's state for the universe ``ranks`` (made on first use).

        A universe must fit in the world: its largest rank is checked once, here.
        """
        with self._universe_lock:
            found = self._universes.get(ranks)
            if found is None:
                if ranks.max_rank >= self._world_size:
                    raise BackendConfigError(
                        f"a universe reaching rank {ranks.max_rank} ({ranks!r}) does not fit the "
                        f"{self.name} backend's {self._world_size} ranks")
                found = self._universes[ranks] = Universe()
            return found

    def get_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> G:
        """This process's group along ``dim`` of ``view``, created on first request.

        Views that reach the same family of groups (same rank map, same dim
        layout) with equal options share one group.
        """
        k, opts, key = self._member_key(view, dim, options, "get_group")
        kept = self._loss.serving(view, k, opts, key, self._rank)  # after a loss: ended, kept?
        if kept is not None:
            return self._cache.adopt(key, kept)
        return self._cache.get_or_create(key, view.names[k],
                                         lambda: self._create(view, k, opts))

    @property
    def lost(self) -> frozenset[int]:
        """The ranks :meth:`retire` was told are lost, so far."""
        return self._loss.lost

    @property
    def reformed(self) -> tuple[Reformed, ...]:
        """What the last :meth:`retire` did to each broken group this rank held (empty before
        any loss)."""
        return self._reformed

    def retire(self, lost: Iterable[int], *, among: Sequence[int] | None = None,
               onward: Onward | None = None) -> Retired:
        """Ranks ``lost`` are gone (failed, or left the mesh): end every group of this backend
        that holds one, and keep the others for the views that follow.

        A group holding a lost rank is forgotten and ended (aborted where the backend can:
        NCCL; its peers may be dead, so nothing waits on them).  Every other group is kept:
        a later request along any view whose group for this rank has the same members and
        options gets it (no creation), since each of its members holds it too.  Collective
        in spirit: every surviving member must retire the same ranks before asking for new
        groups.  Where members meet in a store (c10d), the ranks ``among`` (default: every
        rank not lost) first meet and tell each other which groups they saw fail
        (:meth:`diagnose`); those are ended too.  ``among=()``: this rank alone (it is not
        in the mesh that continues).  ``onward``: the mesh the survivors go on with
        (:meth:`DeviceMesh.rebind <backend.DeviceMesh.rebind>` gives it); where the backend
        can, a broken group whose survivors, in its order, are this rank's group along a dim
        of it with the same options is re-formed in place rather than ended (Gloo's
        reconfigure on torch >= 2.14), and serves that request.  Returns how many groups
        were ended and kept, and what became of each broken group (:attr:`reformed`).

        Cost: reading ``lost`` (at most ``world_size + 1`` items), then per group this
        backend holds, O(min(its size, len(lost))) look-ups; the kept groups' members are
        listed on the next :meth:`get_group`, not here.  Never O(world).
        """
        gone = self._checked_ranks(lost)
        if onward is not None and not isinstance(onward, Onward):
            raise BackendConfigError(f"retire: onward must be a backend Onward (the mesh that "
                                     f"goes on), got {show(onward)}")
        failed = self._failed_groups(gone, among)
        broken = [k for k, g in self._cache.snapshot()
                  if holds_any(k.family, self._rank, gone) or self._named_in(g, failed)]
        for universe in list(self._universes.values()):
            universe.forget()  # no mesh's memo hands out an ended group
        shrunk, self._reformed = self._end_groups(self._cache.evict(broken), gone, onward)
        kept = self._cache.snapshot()  # what a previous loss kept may have broken now
        self._loss = Loss(self._loss.lost | gone, carried=shrunk, kept=kept)
        return Retired(ended=len(broken), kept=len(kept), reformed=self._reformed)

    def abort_groups(self, view: MeshView, options: Sequence[GroupOptions]) -> int:
        """End this rank's groups along every dim of ``view`` (dim ``k`` with ``options[k]``)
        that this backend holds, without waiting on any peer (aborted where the backend can:
        NCCL), and forget them; a later request creates a fresh group.  Creates nothing: a
        family never asked for is left alone.  Groups adopted with ``from_group`` are
        forgotten, not ended (they are the caller's).  Returns how many groups were ended.

        What :meth:`backend.DeviceMesh.abort` runs (torch 2.15's ``DeviceMesh.abort()``).
        """
        if not isinstance(view, MeshView):
            raise BackendConfigError(f"abort_groups takes a mesh.MeshView, got {show(view)}")
        if len(options) != view.ndim:
            raise BackendConfigError(f"abort_groups: {len(options)} options for the "
                                     f"{view.ndim} dims of {view!r}")
        opts = [as_options(o) for o in options]
        keys = {group_key(view, k, o) for k, o in enumerate(opts)}
        held = self._cache.snapshot()
        doomed = [g for k, g in held if k in keys] + self._served(view, opts)
        ids = {id(g) for g in doomed}
        for universe in list(self._universes.values()):
            universe.forget()  # no mesh's memo hands out an ended group
        # every entry holding one of them: a group kept by a rebind sits under its old key too
        ended = self._cache.evict([k for k, g in held if k in keys or id(g) in ids])
        self._loss = self._loss.without(doomed)
        created = {id(r.group) for r in ended}
        kept_elsewhere = [g for g in doomed if id(g) not in created and self._ended_later(g)]
        self._abort([r.group for r in ended] + kept_elsewhere)
        return len(created | {id(g) for g in kept_elsewhere})

    def _served(self, view: MeshView, options: list[GroupOptions]) -> list[G]:
        """The groups a previous loss kept that serve this rank along ``view``'s dims."""
        if view.ranks.offset_of(self._rank) is None:
            return []
        found = []
        for k, o in enumerate(options):
            try:
                kept = self._loss.serving(view, k, o, group_key(view, k, o), self._rank)
            except RankLostError:
                continue
            if kept is not None:
                found.append(kept)
        return found

    def _ended_later(self, group: G) -> bool:
        """Whether this backend ends ``group`` itself at shutdown although the cache holds no
        record of creating it (a group its loss shrank); value groups: never."""
        return False

    def _abort(self, groups: list[G]) -> None:
        """End ``groups`` without waiting on peers (value groups need nothing)."""

    def _checked_ranks(self, ranks: Iterable[int]) -> frozenset[int]:
        try:  # never more than the world: a huge iterable is refused after world + 1 items
            read = list(itertools.islice(iter(ranks), self._world_size + 1))
        except Exception:
            raise BackendConfigError(f"lost ranks must be an iterable of ranks, got "
                                     f"{show(ranks)}") from None
        if len(read) > self._world_size:
            raise BackendConfigError(f"more lost ranks than the world's {self._world_size}: "
                                     f"{show(ranks)}")
        bad = [r for r in read if type(r) is not int or not 0 <= r < self._world_size]
        if bad:
            raise BackendConfigError(f"lost ranks must be ints in [0, {self._world_size}), got "
                                     f"{show(bad[0])}")
        out = frozenset(read)
        if self._rank in out:
            raise BackendConfigError(f"rank {self._rank} cannot retire itself (lost {sorted(out)})")
        return out

    def _failed_groups(self, lost: frozenset[int], among: Sequence[int] | None
                       ) -> frozenset[str]:
        """The groups some survivor saw a collective fail on (value groups: none)."""
        return frozenset()

    @staticmethod
    def _named_in(group: Any, names: frozenset[str]) -> bool:
        return bool(names) and getattr(group, "group_name", None) in names

    def _end_groups(self, ended: list[CreationRecord], lost: frozenset[int],
                    onward: Onward | None
                    ) -> tuple[list[tuple[Members, G]], tuple[Reformed, ...]]:
        """End the groups of ``ended`` (they hold a lost rank or failed; value groups need
        nothing); returns the groups made from them that serve their survivors (shrunk or
        reconfigured groups, by members and options), and what became of each."""
        return [], ()

    def _member_key(self, view: MeshView, dim: Dim, options: GroupOptions | None, what: str
                    ) -> tuple[int, GroupOptions, GroupKey]:
        """(dim index, options, cache key) of this rank's group along ``dim`` of ``view``,
        after the checks every lookup makes: a view, a universe that fits the world, and
        this rank in it (:class:`~backend.NotAMemberError` otherwise)."""
        if not isinstance(view, MeshView):
            raise BackendConfigError(f"{what} takes a mesh.MeshView, got {show(view)}")
        opts = as_options(options)
        k = view.index(dim)
        key = group_key(view, k, opts)
        self.universe(view.ranks)
        if view.ranks.offset_of(self._rank) is None:
            raise NotAMemberError(f"rank {self._rank} is not in the universe of {view!r} "
                                 f"({view.ranks!r}); it has no group along {view.names[k]!r}")
        return k, opts, key

    def adopt(self, view: MeshView, dim: Dim, options: GroupOptions, group: G) -> G:
        """Use ``group`` as this rank's group along ``dim`` of ``view`` (``from_group``).

        Returns the group the cache holds for that family: ``group``, unless one was
        created or adopted before.  An adopted group is the caller's: it is not listed in
        :attr:`created`, and ``shutdown()`` forgets it without destroying it.
        """
        k = view.index(dim)
        self.universe(view.ranks)
        return self._cache.adopt(group_key(view, k, as_options(options)), group)

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> G:
        raise NotImplementedError

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None
                    ) -> Any:
        """This process's group along ``dim`` as a ``torch.distributed.ProcessGroup``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self._world_size}, rank={self._rank})"
