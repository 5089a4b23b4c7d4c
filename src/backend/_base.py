"""The :class:`Backend` protocol and the shared implementation every backend builds on."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from mesh import Dim, MeshView, RankMap

from ._cache import CreationRecord, GroupCache, GroupKey, group_key
from ._errors import BackendConfigError, NotInMeshError
from ._options import GroupOptions, Override, as_options

if TYPE_CHECKING:
    from ._device_mesh import DeviceMesh

__all__ = ["Backend", "CachedBackend"]

G = TypeVar("G")


@runtime_checkable
class Backend(Protocol):
    """What a mesh needs from communication: this process's rank and lazy groups per dim.

    **SPMD contract.** Creating a group is collective among its members (for
    NCCL's ``split_group``, among the whole world), so every process must ask
    for groups in the same order.  :meth:`DeviceMesh.materialize` asks for
    every dim of a mesh in a fixed order for users who want creation up front.
    """

    @property
    def name(self) -> str:
        """The backend's name: ``"fake"``, ``"gloo"`` or ``"nccl"``."""

    @property
    def rank(self) -> int:
        """This process's global rank."""

    @property
    def world_size(self) -> int:
        """The number of processes."""

    def get_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """This process's group along ``dim`` of ``view`` (created on first request)."""

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None
                    ) -> Any:
        """Like :meth:`get_group`, as a ``torch.distributed.ProcessGroup``."""

    def bind(self, view: MeshView, *, device_type: str | None = None,
             backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh:
        """``view`` bound to this backend (creates no group)."""


class CachedBackend(Generic[G]):
    """The shared part of every backend: rank checks, the group cache and binding.

    Subclasses implement :meth:`_create`, called at most once per family key.
    """

    name: ClassVar[str] = "abstract"
    default_device_type: ClassVar[str] = "cpu"

    def __init__(self, world_size: int, rank: int) -> None:
        for what, v in (("world_size", world_size), ("rank", rank)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise BackendConfigError(f"{what} must be an int, got {v!r}")
        if world_size < 1:
            raise BackendConfigError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise BackendConfigError(f"rank must be in [0, {world_size}), got {rank}")
        self._world_size = world_size
        self._rank = rank
        self._cache: GroupCache[G] = GroupCache()
        self._universes: set[RankMap] = set()
        self._universe_lock = threading.Lock()

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

    def _check_universe(self, view: MeshView) -> None:
        ranks = view.ranks
        with self._universe_lock:
            known = ranks in self._universes
        if not known:
            top = ranks.size - 1 if ranks.ranks is None else max(ranks.ranks)
            if top >= self._world_size:
                raise BackendConfigError(
                    f"{view!r} reaches rank {top} but the {self.name} backend has only "
                    f"{self._world_size} ranks"
                )
            with self._universe_lock:
                self._universes.add(ranks)
        if ranks.offset_of(self._rank) is None:
            raise NotInMeshError(f"rank {self._rank} is not in the universe of {view!r} "
                                 f"({ranks!r}); it has no group there")

    def get_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> G:
        """This process's group along ``dim`` of ``view``, created on first request.

        Views that reach the same family of groups (same rank map, same dim
        layout) with equal options share one group.
        """
        opts = as_options(options)
        name = view[dim].names[0]
        key = group_key(view, dim, opts)
        try:
            self._check_universe(view)
        except NotInMeshError:
            self._outside(key, name)
            raise
        return self._cache.get_or_create(key, name, lambda: self._create(view, dim, opts))

    def _outside(self, key: GroupKey, dim: str) -> None:
        """Called when this process asks for a group of a view it is not in (then it raises)."""

    def _create(self, view: MeshView, dim: Dim, options: GroupOptions) -> G:
        raise NotImplementedError

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None
                    ) -> Any:
        """This process's group along ``dim`` as a ``torch.distributed.ProcessGroup``."""
        raise NotImplementedError

    def bind(self, view: MeshView, *, device_type: str | None = None,
             backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh:
        """``view`` bound to this backend, as a :class:`~backend.DeviceMesh`; creates no group."""
        from ._device_mesh import DeviceMesh
        from ._options import normalize_overrides

        if not isinstance(view, MeshView):
            raise BackendConfigError(f"bind takes a mesh.MeshView, got {view!r}")
        return DeviceMesh(view, self, device_type or self.default_device_type,
                          normalize_overrides(view.names, backend_override))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self._world_size}, rank={self._rank})"
