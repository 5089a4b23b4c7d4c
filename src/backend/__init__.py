"""Binding mesh views to communication: lazy, cached, shared process groups.

A :class:`Backend` hands out this process's group along one dim of a
:class:`~mesh.MeshView`, creating it the first time it is asked for and keying
it by (rank map, the dim's layout, options) so that views reaching the same
groups by different paths share one communicator.  :class:`DeviceMesh` has the
surface of torch's ``DeviceMesh`` (torch code switches by changing one import:
``from backend import init_device_mesh, DeviceMesh``) and converts to a real one
with :meth:`DeviceMesh.to_torch` for DTensor, FSDP2 and DCP.

**Creating a group is collective among its members** (every member must ask for it;
members must not ask for shared groups in orders that wait on each other).  Groups are
named from their family, so a late or failed rank never breaks later groups among
others, and a creation that cannot complete fails in bounded time saying why;
:func:`check_spmd` checks a program's requests offline, and
:meth:`DeviceMesh.materialize` creates all of a mesh's groups in a fixed order.

>>> from backend import FakeBackend
>>> from mesh import MeshView
>>> fb = FakeBackend(world_size=8, rank=5)
>>> world = MeshView.from_shape(8, ("world",))
>>> a = fb.bind(world.unflatten("world", (2, 2, 2), ("dp", "cp", "tp")))
>>> b = fb.bind(world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp")))
>>> a.get_group("dp") is b.get_group("dp"), len(fb.created)
(True, 1)

Public names:

- the facade: :class:`DeviceMesh`, :func:`init_device_mesh`, :func:`current_mesh`;
- backends: the :class:`Backend` protocol, :class:`CachedBackend` (the shared base),
  :class:`FakeBackend` (no torch at all; groups are :class:`FakeGroup`),
  :class:`TorchFakeBackend` (real groups of torch's fake c10d backend, one process),
  :class:`GlooBackend`, :class:`NcclBackend` and :class:`C10dBackend` (over whatever
  default group is initialized); the last four load torch on first use;
- options: :class:`GroupOptions`; the cache's :class:`GroupKey` and
  :class:`CreationRecord`; one group request described once: :class:`GroupSpec` (its
  family, members, :class:`Plan` from :func:`plan_creation`, torch name and barrier);
- the offline check of a program's group requests: :func:`check_spmd` and its
  :class:`SpmdReport`;
- errors: :class:`BackendError` and its subclasses (:class:`BackendConfigError`,
  :class:`NotInMeshError`, :class:`GroupCreationError` with
  :class:`MembersMissingError` and :class:`ReentrantCreationError`, :class:`PeerLostError`).
"""

import sys
from typing import TYPE_CHECKING, Any

from . import _registry
from ._base import CachedBackend
from ._cache import CreationRecord, GroupKey
from ._device_mesh import DeviceMesh, current_mesh, init_device_mesh
from ._errors import (
    BackendConfigError,
    BackendError,
    GroupCreationError,
    MembersMissingError,
    NotInMeshError,
    PeerLostError,
    ReentrantCreationError,
)
from ._fake import FakeBackend, FakeGroup
from ._options import GroupOptions
from ._protocol import Backend
from ._spec import GroupSpec, Plan, plan_creation
from ._spmd import SpmdReport, check_spmd

if TYPE_CHECKING:
    from ._c10d import C10dBackend, GlooBackend, NcclBackend, TorchFakeBackend

_TORCH_BACKENDS = ("C10dBackend", "GlooBackend", "NcclBackend", "TorchFakeBackend")


def __getattr__(name: str) -> object:
    # The c10d backends import torch.distributed: load them on first use.
    if name in _TORCH_BACKENDS:
        from . import _c10d

        return getattr(_c10d, name)
    raise AttributeError(f"module 'backend' has no attribute {name!r}")


def _process_default(device_type: str, current: Any) -> Any:
    # The default backends need torch (in _c10d): plugged into the registry here, so the
    # facade module never imports them (no import cycle).  A process that never imported
    # torch.distributed has no torch world: its bound backend stands, without importing torch.
    if current is not None and "torch.distributed" not in sys.modules:
        return current
    from ._c10d import process_default

    return process_default(device_type, current)


_registry.set_factory(_process_default)

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
    "GroupSpec",
    "MembersMissingError",
    "NcclBackend",
    "NotInMeshError",
    "PeerLostError",
    "Plan",
    "ReentrantCreationError",
    "SpmdReport",
    "TorchFakeBackend",
    "check_spmd",
    "current_mesh",
    "init_device_mesh",
    "plan_creation",
]
