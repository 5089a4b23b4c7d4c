"""Backends over ``torch.distributed`` c10d: Gloo and NCCL (shared code lives here, once)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist

from mesh import Dim, MeshView

from ._base import CachedBackend
from ._cache import GroupKey
from ._errors import BackendConfigError
from ._options import GroupOptions, as_options
from ._torch import create_torch_group

__all__ = ["C10dBackend", "GlooBackend", "NcclBackend"]

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

B = TypeVar("B", bound="C10dBackend")


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise BackendConfigError(
            f"environment variable {name} is not set; launch with torchrun (which sets "
            f"{', '.join(_ENV)}) or initialize torch.distributed yourself"
        )
    try:
        return int(raw)
    except ValueError:
        raise BackendConfigError(
            f"environment variable {name} must be an int, got {raw!r}") from None


class C10dBackend(CachedBackend[Any]):
    """Groups are ``torch.distributed`` process groups over the initialized default group.

    Each dim's group is created lazily with ``new_group(ranks, sort_ranks=False,
    use_local_synchronization=True)`` (only members take part), unless the
    dim is the whole world in natural order with default options (then the
    default group is reused), or NCCL can split (see :func:`plan_creation`).
    Groups use this backend's c10d backend (``gloo``/``nccl``) and ``timeout``
    unless a dim's options say otherwise.

    Views over part of the world (torch 2.13): torch names a locally
    synchronized group by hashing its ranks *and the number of groups this
    process already has*, so every process must keep the same count.  Every
    rank is in exactly one group of a family over the whole world; for a view
    whose universe leaves some ranks out, the processes outside it must still
    ask for its groups in the same order (the SPMD contract): they create a
    one-rank placeholder group, which keeps the counts in step at no
    communication cost, and then get :class:`~backend.NotInMeshError`.  A
    process that skips the call leaves the counts out of step, and a later
    group spanning both sides would wait for a rendezvous that never comes.
    """

    name = "c10d"
    torch_backend: ClassVar[str] = ""

    def __init__(self, *, timeout: timedelta | None = None) -> None:
        if not dist.is_initialized():
            raise BackendConfigError(
                f"{type(self).__name__}() needs an initialized torch.distributed default group; "
                f"use {type(self).__name__}.from_env() under torchrun"
            )
        super().__init__(dist.get_world_size(), dist.get_rank())
        self._owns_default = False
        self._timeout = GroupOptions(timeout=timeout).timeout  # validated

    @classmethod
    def from_env(cls: type[B], *, timeout: timedelta | None = None) -> B:
        """Read torchrun's environment and initialize the default group if needed.

        ``timeout`` applies to the default group (when this call creates it) and
        to every group this backend creates whose options set no timeout.
        """
        if not dist.is_initialized():
            rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
            for name in ("MASTER_ADDR", "MASTER_PORT"):
                if name not in os.environ:
                    _env_int(name)  # raises the explanatory error
            kwargs: dict[str, Any] = cls._init_kwargs()
            if timeout is not None:
                kwargs["timeout"] = timeout
            dist.init_process_group(cls.torch_backend, init_method="env://", rank=rank,
                                    world_size=world, **kwargs)
            backend = cls(timeout=timeout)
            backend._owns_default = True
            return backend
        return cls(timeout=timeout)

    @classmethod
    def _init_kwargs(cls) -> dict[str, Any]:
        return {}

    def _can_split(self) -> bool:
        return False

    def _create(self, view: MeshView, dim: Dim, options: GroupOptions) -> Any:
        return create_torch_group(view, dim, self.rank, self.world_size, options,
                                  can_split=self._can_split(), default_backend=self.torch_backend,
                                  default_timeout=self._timeout)

    def _outside(self, key: GroupKey, dim: str) -> None:
        self._cache.get_or_create(key, dim, lambda: dist.new_group(
            [self.rank], backend=self.torch_backend, use_local_synchronization=True,
            group_desc=f"meshlayout:placeholder:{dim}"))

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """The same as :meth:`get_group`: c10d groups are torch process groups."""
        return self.get_group(view, dim, as_options(options))

    def shutdown(self) -> None:
        """Destroy every group this backend created (and the default group if it started it)."""
        groups = self._cache.clear()
        if not dist.is_initialized():
            return
        for g in reversed(groups):
            if g is not None and g is not dist.group.WORLD:
                dist.destroy_process_group(g)
        if self._owns_default:
            dist.destroy_process_group()
            self._owns_default = False


class GlooBackend(C10dBackend):
    """Gloo process groups (CPU); groups are created by their members only."""

    name = "gloo"
    torch_backend = "gloo"


class NcclBackend(C10dBackend):
    """NCCL process groups (CUDA).

    ``from_env`` selects the CUDA device ``LOCAL_RANK`` unless the user already
    chose one, and binds the default group to it (eager init), which lets a
    family of ascending groups be created with one ``split_group`` call.
    """

    name = "nccl"
    torch_backend = "nccl"
    default_device_type = "cuda"

    @classmethod
    def _init_kwargs(cls) -> dict[str, Any]:
        if not torch.cuda.is_available():
            raise BackendConfigError("NcclBackend needs CUDA, but torch.cuda.is_available() is "
                                     "False; use GlooBackend on CPU")
        if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.set_device(_env_int("LOCAL_RANK"))
        return {"device_id": torch.device("cuda", torch.cuda.current_device())}

    def _can_split(self) -> bool:
        default = dist.distributed_c10d._get_default_group()
        return getattr(default, "bound_device_id", None) is not None
