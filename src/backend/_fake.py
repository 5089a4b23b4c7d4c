"""A backend with no communication: groups are small values computed from layouts."""

from __future__ import annotations

import threading
from typing import Any

import attrs

from layout import Layout
from mesh import Dim, MeshView

from ._base import CachedBackend
from ._cache import GroupCache
from ._options import GroupOptions

__all__ = ["FakeBackend", "FakeGroup"]


@attrs.frozen(eq=False, repr=False)
class FakeGroup:
    """One group of a :class:`FakeBackend`: a dim's layout at an offset, no rank list.

    ``size()`` and ``rank()`` cost O(1); only :attr:`ranks` lists members.
    """

    family: MeshView
    member: int
    name: str
    _local: int

    @classmethod
    def of(cls, view: MeshView, dim: Dim, rank: int, name: str) -> FakeGroup:
        """The group of ``rank`` along ``dim`` of ``view``."""
        family = view[dim]
        return cls(family, rank, name, family.local_rank(rank, 0))

    def size(self) -> int:
        """The number of ranks in the group."""
        return self.family.size()

    def rank(self) -> int:
        """This process's index in the group."""
        return self._local

    @property
    def layout(self) -> Layout:
        """The layout of the group's offsets, relative to :attr:`offset`."""
        return self.family.layout

    @property
    def offset(self) -> int:
        """The offset of the group's first member in the universe."""
        return self.family.group_offset(self.member, 0)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The global ranks in group order (costs O(size))."""
        return self.family.group(self.member, 0)

    def __repr__(self) -> str:
        return f"FakeGroup({self.name!r}, size={self.size()}, rank={self._local})"


class FakeBackend(CachedBackend[FakeGroup]):
    """No communication and no ``torch.distributed``: for plans, tests and audits.

    >>> from mesh import MeshView
    >>> fb = FakeBackend(world_size=8, rank=5)
    >>> mesh = fb.bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")))
    >>> len(fb.created)
    0
    >>> tp = mesh.get_group("tp")
    >>> tp.ranks, tp.size(), tp.rank(), len(fb.created)
    ((4, 5), 2, 1, 1)
    """

    name = "fake"

    def __init__(self, world_size: int, rank: int) -> None:
        super().__init__(world_size, rank)
        self._torch_cache: GroupCache[Any] = GroupCache()
        self._owns_default = False
        self._world: Any = None  # the torch fake world this backend started, if any
        self._init_lock = threading.Lock()

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> FakeGroup:
        return FakeGroup.of(view, dim, self.rank, options.group_desc or view.names[dim])

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """A torch ``"fake"`` process group for ``dim`` (initializes torch's fake world once).

        Lets :meth:`DeviceMesh.to_torch` and DTensor code run without GPUs or peers.
        These torch groups are cached (and shared) like the fake groups, in a cache
        of their own: :attr:`created` lists only the :class:`FakeGroup` creations.
        """
        from ._spec import GroupSpec
        from ._torch_groups import create_torch_group

        k, opts, key = self._member_key(view, dim, options, "torch_group")
        self._ensure_fake_world()
        return self._torch_cache.get_or_create(
            key, view.names[k],
            lambda: create_torch_group(GroupSpec.of(view, k, opts, rank=self.rank,
                                                    world_size=self.world_size,
                                                    can_split=False)))

    def started_torch_world(self, world: Any) -> bool:
        """Whether ``world`` (torch's default group) is the fake world this backend started."""
        return self._owns_default and world is self._world

    def _ensure_fake_world(self) -> None:
        from ._torch_groups import start_fake_world

        with self._init_lock:
            if start_fake_world(self.world_size, self.rank, self):
                import torch.distributed as dist

                self._owns_default = True
                self._world = dist.group.WORLD

    def shutdown(self) -> None:
        """Forget every group; destroy torch's fake world if this backend started it."""
        from ._torch_groups import destroy_groups

        self._cache.clear()
        destroy_groups(self._torch_cache.clear(), self._owns_default)
        self._owns_default = False
