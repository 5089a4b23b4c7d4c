"""Binding mesh views to communication: lazy, cached, shared process groups.

A :class:`Backend` hands out this process's group along one dim of a
:class:`~mesh.MeshView`, creating it the first time it is asked for and keying
it by (rank map, the dim's layout, options) so that views reaching the same
groups by different paths share one communicator.  :class:`FakeBackend` needs
no communication at all; :class:`GlooBackend` and :class:`NcclBackend` create
``torch.distributed`` groups.  :class:`DeviceMesh` (from :func:`init_device_mesh`
or ``backend.bind(view)``) has the surface of torch's DeviceMesh and converts
to a real one with :meth:`DeviceMesh.to_torch` for DTensor and FSDP2.

**SPMD contract:** every process must ask for groups in the same order;
:meth:`DeviceMesh.materialize` creates all of a mesh's groups in a fixed order.

>>> from backend import FakeBackend
>>> from mesh import MeshView
>>> fb = FakeBackend(world_size=8, rank=5)
>>> world = MeshView.from_shape(8, ("world",))
>>> a = fb.bind(world.unflatten("world", (2, 2, 2), ("dp", "cp", "tp")))
>>> b = fb.bind(world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp")))
>>> a.get_group("dp") is b.get_group("dp"), len(fb.created)
(True, 1)
"""

from typing import TYPE_CHECKING

from ._base import Backend, CachedBackend
from ._cache import CreationRecord, GroupKey
from ._device_mesh import DeviceMesh, current_mesh, init_device_mesh
from ._errors import BackendConfigError, BackendError, GroupCreationError, NotInMeshError
from ._fake import FakeBackend, FakeGroup
from ._options import GroupOptions
from ._torch import Plan, plan_creation

if TYPE_CHECKING:
    from ._c10d import C10dBackend, GlooBackend, NcclBackend


def __getattr__(name: str) -> object:
    # GlooBackend and NcclBackend import torch.distributed; load them on first use.
    if name in ("GlooBackend", "NcclBackend", "C10dBackend"):
        from . import _c10d

        return getattr(_c10d, name)
    raise AttributeError(f"module 'backend' has no attribute {name!r}")


__all__ = [
    "Backend",
    "BackendConfigError",
    "BackendError",
    "C10dBackend",
    "CachedBackend",
    "CreationRecord",
    "DeviceMesh",
    "FakeBackend",
    "FakeGroup",
    "GlooBackend",
    "GroupCreationError",
    "GroupKey",
    "GroupOptions",
    "NcclBackend",
    "NotInMeshError",
    "Plan",
    "current_mesh",
    "init_device_mesh",
    "plan_creation",
]
