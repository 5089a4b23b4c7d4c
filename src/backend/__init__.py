"""Binding mesh views to communication: lazy, cached, shared process groups.

Module map (for readers of the code), bottom-up; a package imports only those below it,
and another sub-package only through its ``__init__``, whose ``__all__`` is what it offers
(every wing imports ``_core``, :mod:`mesh` and :mod:`layout` too):

| sub-package | what it holds | it imports |
|---|---|---|
| ``_core`` | torch-free: the :class:`Backend` protocol (``_protocol``), the shared base | no wing |
| | (``_base``), group options, the group cache, the errors, :class:`FakeBackend`, | |
| | per-universe state, the state after losing ranks (``_loss``), the plug slots | |
| | the wings fill (``_registry``) | |
| ``_c10d`` | creating torch process groups: one request as a value (``GroupSpec``), | ``_core`` |
| | the creation barrier in the store (``_rendezvous``), torch group creation and | |
| | teardown (``_torch_groups``), losing ranks (``_loss``), the c10d backends | |
| ``_spmd`` | :func:`check_spmd`, the offline check of a program on a recorder | ``_c10d`` |
| ``_tensor`` | torch's placements as :mod:`mesh`'s and back; executing a | ``_core`` |
| | :class:`mesh.Reshard` plan with point-to-point batches | |
| ``_facade`` | torch's ``DeviceMesh`` surface: :class:`DeviceMesh`, ``to_torch``, | ``_c10d``, |
| | :func:`init_device_mesh`, :func:`bind`, ``redistribute``, ``apply_recovery`` | ``_tensor`` |
| ``_deprecated`` | names the last release moved, working for this one with a warning | |

This ``__init__`` holds the public names and the plugs: it fills the core's slots with
the wings (importing the c10d wing, and torch, on first use).  A newcomer reads first
``_core/_protocol.py`` (what a backend answers), then ``_core/_base.py`` (lazy groups,
shared per layout) and ``_facade/_device_mesh.py`` (the surface torch code calls).

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

>>> from backend import FakeBackend, bind
>>> from mesh import MeshView
>>> fb = FakeBackend(world_size=8, rank=5)
>>> world = MeshView.from_shape(8, ("world",))
>>> a = bind(world.unflatten("world", (2, 2, 2), ("dp", "cp", "tp")), fb)
>>> b = bind(world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp")), fb)
>>> a.get_group("dp") is b.get_group("dp"), len(fb.created)
(True, 1)
>>> record = fb.created[0]   # a CreationRecord: the GroupKey (family, options), dim, group
>>> record.dim, record.key.family == a.view.family("dp"), record.group.ranks
('dp', True, (1, 5))

Public names:

- the facade: :class:`DeviceMesh` (one :class:`Binding` value plus memos; ``rebind``
  goes on after lost ranks), :func:`init_device_mesh`, :func:`bind` (a view to a mesh),
  :func:`current_mesh`; :func:`read_flight_records` (a hung job's flight-recorder dumps
  read in the coordinates of a mesh or a plan: :func:`mesh.read_flight_records`);
  :func:`apply_recovery` (a :class:`mesh.Way` acted on, on a live job: the mesh rebound,
  the state moved in one batch, what no rank up holds read from a checkpoint; returns
  :class:`Recovered`, whose ``groups`` say per broken group, as a :class:`Reformed`, whether
  it was reconfigured in place or ended, and why: a :class:`How`); ``rebind`` tells the
  backend the :class:`Onward` mesh, so it can re-form broken groups in place;
- backends: the :class:`Backend` protocol, :class:`FakeBackend` (no torch at all; groups
  are :class:`FakeGroup`), :class:`TorchFakeBackend` (real groups of torch's fake c10d
  backend, one process), :class:`GlooBackend`, :class:`NcclBackend` and
  :class:`C10dBackend` (over whatever default group is initialized); the last four load
  torch on first use;
- options: :class:`GroupOptions`; what a backend's ``created`` lists:
  :class:`CreationRecord` with its :class:`GroupKey`; one group request described once:
  :class:`GroupSpec` (its family, members, :class:`Plan`, torch name and barrier);
- the offline check of a program (its group requests, the calls on its groups, the
  backend's creation, lifecycle and machine contracts): :func:`check_spmd`, its
  :class:`SpmdReport` of :class:`Finding` values (kinds: :data:`FINDING_KINDS`), and
  :class:`SpmdBackend`, the torch-free backend a program runs on under it;
- the job's machine: :func:`discover_topology` (every rank's host, device and NVLink
  domain, gathered through the store into a :class:`mesh.Topology`) from each rank's
  :class:`DiscoveryRecord`; ``bind`` and ``init_device_mesh`` check a plan against it
  (``expect_intra_host=``, ``expect_intra_domain=``) before any group is made;
- tensors between meshes: :func:`redistribute` (a DTensor to another facade or torch
  mesh, over any ranks: what torch refuses), :func:`reshard_tensor` (a
  :func:`mesh.reshard` plan executed over point-to-point batches), :func:`reshard_state`
  (many tensors' plans in one batch, one message each way per pair of ranks; or a
  :func:`mesh.reshard_state` plan, bucket by bucket under its memory cap; with
  ``async_op=True`` in the background, a :class:`StateWork` to wait on), and
  :func:`from_torch_placements` / :func:`to_torch_placements`, :func:`sharding_of` (a
  DTensor's placement as a :class:`mesh.Sharding`);
- errors: :class:`BackendError` and its subclasses (:class:`BackendConfigError`,
  :class:`NotAMemberError`, :class:`GroupCreationError` with
  :class:`MembersMissingError` and :class:`ReentrantCreationError`, :class:`PeerLostError`,
  :class:`RankLostError`, :class:`DiscoveryError`, :class:`StoreRecordError` (a value in
  the job's store that its writer did not write), :class:`ExpectationError` (a
  :class:`BackendConfigError`), :class:`TorchMissingError`, also a ``ModuleNotFoundError``,
  raised by what needs PyTorch when it is not installed, and :class:`UnsupportedTorchError`,
  also an ``ImportError``, which making a mesh over torch process groups raises on a torch
  outside the supported range).

**Installing.** Process groups need PyTorch, meshlayout's ``torch`` extra (from a
checkout's root: ``pip install -e '.[torch]'``); the offline tools (:mod:`layout`,
:mod:`mesh`, the ``meshlayout`` command) do not, nor does this package's torch-free core:
without torch, ``import backend`` works and :class:`FakeBackend`, :func:`bind` and
:func:`check_spmd` (without ``torch=True``) run; what needs torch (the c10d backends,
:class:`TorchFakeBackend`, a mesh without a bound backend, ``to_torch``) raises
:class:`TorchMissingError` naming the extra.
"""

import sys as _sys
import typing as _typing
from typing import Any as _Any

from layout import __version__ as __version__

from ._c10d import DiscoveryRecord, GroupSpec, Plan, discover_topology
from ._core import (
    Backend,
    BackendConfigError,
    BackendError,
    CreationRecord,
    DiscoveryError,
    ExpectationError,
    FakeBackend,
    FakeGroup,
    GroupCreationError,
    GroupKey,
    GroupOptions,
    How,
    MembersMissingError,
    NotAMemberError,
    Onward,
    PeerLostError,
    RankLostError,
    ReentrantCreationError,
    Reformed,
    StoreRecordError,
    TorchMissingError,
    UnsupportedTorchError,
)
from ._core import need_torch as _need_torch
from ._core import plug as _plug
from ._core import require_tested_torch as _require_tested_torch
from ._core import warn_if_untested_torch as _warn_if_untested_torch
from ._deprecated import MOVED as _MOVED
from ._deprecated import moved as _moved
from ._facade import (
    Binding,
    DeviceMesh,
    Recovered,
    apply_recovery,
    bind,
    current_mesh,
    init_device_mesh,
    read_flight_records,
    redistribute,
    sharding_of,
)
from ._spmd import FINDING_KINDS, Finding, SpmdBackend, SpmdReport, check_spmd
from ._tensor import (
    StateWork,
    from_torch_placements,
    reshard_state,
    reshard_tensor,
    to_torch_placements,
)

_warn_if_untested_torch()  # once: outside the tested torch releases, say so

if _typing.TYPE_CHECKING:
    from ._c10d import C10dBackend, GlooBackend, NcclBackend, TorchFakeBackend

_TORCH_BACKENDS = ("C10dBackend", "GlooBackend", "NcclBackend", "TorchFakeBackend")


def __getattr__(name: str) -> object:
    # The c10d backends import torch.distributed: load them on first use.
    if name in _TORCH_BACKENDS:
        _need_torch(f"backend.{name}")
        _require_tested_torch()
        from . import _c10d

        return _by_public_name(getattr(_c10d, name))
    if name in _MOVED:
        new, value = _MOVED[name]
        _moved(f"backend.{name}", new)
        return value
    raise AttributeError(f"module 'backend' has no attribute {name!r}")


# ---- the plugs: the core's slots filled with the wings, each loaded on first use ----------

def _process_default(device_type: str, current: _Any) -> _Any:
    # A process that never imported torch.distributed has no torch world: its bound
    # backend stands, without importing torch.
    if current is not None and "torch.distributed" not in _sys.modules:
        return current
    _need_torch(f"a {device_type!r} mesh without a backend (bind one, e.g. FakeBackend)")
    _require_tested_torch()
    from ._c10d import process_default

    return process_default(device_type, current)


def _torch_fake(world_size: int, rank: int) -> _Any:
    _need_torch("torch's fake world (to_torch, torch_group)")
    _require_tested_torch()
    from ._c10d import torch_fake

    return torch_fake(world_size, rank)


def _torch_facade() -> type:
    _need_torch("a mesh over torch process groups")
    _require_tested_torch()  # before the facade reads torch's private names
    from . import _facade

    found: type = _facade.TorchFacadeMesh
    return found


_plug("process_default", _process_default)
_plug("torch_fake", _torch_fake)
_plug("torch_facade", _torch_facade)

__all__ = [
    "Backend",
    "BackendConfigError",
    "BackendError",
    "Binding",
    "C10dBackend",
    "CreationRecord",
    "DeviceMesh",
    "DiscoveryError",
    "DiscoveryRecord",
    "ExpectationError",
    "FakeBackend",
    "FINDING_KINDS",
    "FakeGroup",
    "Finding",
    "GlooBackend",
    "GroupCreationError",
    "GroupKey",
    "GroupOptions",
    "GroupSpec",
    "How",
    "MembersMissingError",
    "NcclBackend",
    "NotAMemberError",
    "Onward",
    "PeerLostError",
    "Plan",
    "RankLostError",
    "ReentrantCreationError",
    "StoreRecordError",
    "SpmdBackend",
    "SpmdReport",
    "TorchFakeBackend",
    "TorchMissingError",
    "UnsupportedTorchError",
    "bind",
    "check_spmd",
    "current_mesh",
    "discover_topology",
    "init_device_mesh",
    "from_torch_placements",
    "read_flight_records",
    "redistribute",
    "Recovered",
    "Reformed",
    "apply_recovery",
    "reshard_state",
    "reshard_tensor",
    "sharding_of",
    "StateWork",
    "to_torch_placements",
]


def _by_public_name(cls: type) -> type:
    """Pin ``cls.__module__`` to this package (as torch pins ``Placement.__module__``), so a
    pickle names ``backend.X``, not the private file ``X`` is written in, and moving a file
    breaks no saved value; doctest still finds the class in its file (its ``__test__``)."""
    if cls.__module__ != __name__:
        vars(_sys.modules[cls.__module__]).setdefault("__test__", {})[cls.__name__] = cls
        cls.__module__ = __name__
    return cls


for _cls in [v for v in map(globals().get, __all__) if isinstance(v, type)]:
    _by_public_name(_cls)
del _cls

