"""A backend with no communication: groups are small values computed from layouts."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from layout import Layout
from mesh import Dim, MeshView

from . import _registry
from ._base import CachedBackend, Retired
from ._options import GroupOptions
from ._reform import Onward

__all__ = ["FakeBackend", "FakeGroup"]


@attrs.frozen(eq=False, repr=False)
class FakeGroup:
    """One group of a :class:`FakeBackend`: a dim's layout at an offset, no rank list.

    ``dim_view`` is the one-dim view of the dim (its groups are the group's family);
    ``size()`` and ``rank()`` cost O(1); only :attr:`ranks` lists members.
    """

    dim_view: MeshView
    member: int
    name: str
    _local: int

    @classmethod
    def of(cls, view: MeshView, dim: Dim, rank: int, name: str) -> FakeGroup:
        """The group of ``rank`` along ``dim`` of ``view``."""
        dim_view = view[dim]
        return cls(dim_view, rank, name, dim_view.local_rank(rank, 0))

    def size(self) -> int:
        """The number of ranks in the group."""
        return self.dim_view.size()

    def rank(self) -> int:
        """This process's index in the group."""
        return self._local

    @property
    def layout(self) -> Layout:
        """The layout of the group's offsets, relative to :attr:`offset`."""
        return self.dim_view.layout

    @property
    def offset(self) -> int:
        """The offset of the group's first member in the universe."""
        return self.dim_view.group_offset(self.member, 0)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The global ranks in group order (costs O(size))."""
        return self.dim_view.group(self.member, 0)

    def __repr__(self) -> str:
        return f"FakeGroup({self.name!r}, size={self.size()}, rank={self._local})"


class FakeBackend(CachedBackend[FakeGroup]):
    """No communication and no ``torch.distributed``: for plans, tests and audits.

    >>> from mesh import MeshView
    >>> fb = FakeBackend(world_size=8, rank=5)
    >>> from backend import bind
    >>> mesh = bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")), fb)
    >>> len(fb.created)
    0
    >>> tp = mesh.get_group("tp")
    >>> tp.ranks, tp.size(), tp.rank(), len(fb.created)
    ((4, 5), 2, 1, 1)
    """

    name = "fake"

    def __init__(self, world_size: int, rank: int) -> None:
        super().__init__(world_size, rank)
        self._torch: Any = None  # the torch fake backend behind torch_group, made on first use
        self._torch_lock = threading.Lock()

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> FakeGroup:
        return FakeGroup.of(view, dim, self.rank, options.group_desc or view.names[dim])

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """A torch ``"fake"`` process group for ``dim``, from a ``TorchFakeBackend`` of this
        backend's world and rank made on first use (it starts torch's fake world).

        Lets :meth:`DeviceMesh.to_torch` and DTensor code run without GPUs or peers.
        That backend caches (and shares) the torch groups like this one caches the fake
        groups: :attr:`created` lists only the :class:`FakeGroup` creations.
        """
        self._member_key(view, dim, options, "torch_group")  # this backend's checks first
        with self._torch_lock:
            if self._torch is None:
                self._torch = _registry.plugged("torch_fake")(self.world_size, self.rank)
            torch = self._torch
        return torch.get_group(view, dim, options)

    def started_torch_world(self) -> bool:
        """Whether torch's current default group is the fake world this backend's
        :meth:`torch_group` started."""
        torch = self._torch
        return torch is not None and torch.is_current and torch.owns_world

    def retire(self, lost: Iterable[int], *, among: Sequence[int] | None = None,
               onward: Onward | None = None) -> Retired:
        """See :meth:`CachedBackend.retire`; the torch groups of :meth:`torch_group` too."""
        gone = self._checked_ranks(lost)  # read once
        done = super().retire(gone, among=among, onward=onward)
        if self._torch is not None:
            self._torch.retire(gone, among=among, onward=onward)
        return done

    def abort_groups(self, view: MeshView, options: Sequence[GroupOptions]) -> int:
        """See :meth:`CachedBackend.abort_groups`; the torch groups of :meth:`torch_group`
        too (counted there, not here)."""
        done = super().abort_groups(view, options)
        if self._torch is not None:
            self._torch.abort_groups(view, options)
        return done

    def shutdown(self) -> None:
        """Forget every group; shut down the torch fake backend :meth:`torch_group` made
        (its groups, and torch's fake world if it started it)."""
        self._cache.clear()
        with self._torch_lock:
            torch, self._torch = self._torch, None
        if torch is not None:
            torch.shutdown()
