"""The facade mesh as torch's own ``DeviceMesh``: what torch's code takes unchanged, eager
and under ``torch.compile``.

For a backend whose groups are torch process groups (Gloo, NCCL, torch's fake backend),
every facade mesh is an instance of :class:`TorchFacadeMesh`: a
:class:`backend.DeviceMesh` (our methods come first: lazy, order-safe groups from the
backend, transforms over the view) that is also a
``torch.distributed.device_mesh.DeviceMesh``, so ``fully_shard``, ``parallelize_module``,
``DTensor``, FSDP1, DCP and compiled functions accept it as it is.

**What torch reads, and what it gets.**  Torch 2.13 registers ``DeviceMesh`` as an
opaque reference type for ``torch.compile`` (``torch/distributed/device_mesh.py``,
``_register_distributed_opaque_types``); the registration covers its subclasses, so it
covers this class.  Tracing reads every registered member on the real mesh, and inlines
the bodies of ``get_group``, ``_flatten``, ``_get_root_mesh``, ``__getitem__``, ...,
which may touch registered members only.  So every member torch reads is a plain
attribute here, computed once from the view on first read and then stored on the mesh
(no lock, no side effect but the first read of ``_dim_group_names``):

- ``_layout`` (torch's ``_MeshLayout`` of the view's layout), ``_device_type``,
  ``_mesh_dim_names``, ``_thread_id`` (None), ``_rank``, ``_coordinate_on_dim``;
- ``_rank_map``: the universe's ranks as a tensor, made once per universe and shared;
- ``_flatten_rank_map``: ``FlatRanks`` (``_torch_state``), the universe's ranks as a
  sequence that compares in O(1) within a universe (torch's is a tuple of every rank,
  compared at every call of a compiled function by its guard: here the guard costs the
  same at 8 and 2**20 ranks) and hashes as torch's tuple does;
- ``_root_mesh``, ``_flatten_mapping``, ``_pg_registry``: the mesh the program made,
  the meshes ``_flatten`` made from it, and the groups its meshes were given, by name
  (see :class:`~backend._facade._binding.Root`);
- ``_preserve_rank_order`` (torch 2.15): the root's, as torch propagates it: whether a group
  of the root keeps an order torch's default would sort; False where every group is
  ascending, so such a mesh equals torch's default mesh over the same ranks;
- ``_dim_group_names``: this mesh's groups' names, in dim order, created by the backend
  on first read (torch's mesh creates them when it is built) and then a plain list;
- ``_hash``: torch's hash, computed once; ``mesh``: the instance tensor, once.

``get_group`` and ``_flatten`` are ours, eager, with nothing added for the compiler: no
"are we tracing" check, no wrapper (a per-step ``get_group`` is the plain facade's memo
hit).  The trace inlines torch's own bodies over this state instead: each is a copy of our
function that names torch's as the one to trace (``_torch_private.traced_as``).  Equality
and hashing follow torch's for torch meshes and ours between facade meshes; the hash is
torch's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import torch
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

from .._core import Override, as_options
from ._device_mesh import DeviceMesh
from ._torch_private import (
    opaque_types,
    register_opaque_types,
    torch_flatten,
    torch_get_group,
    torch_hash_key,
    traced_as,
)
from ._torch_state import FlatRanks, keeps_unsorted_order, torch_layout, universe_ranks

__all__ = ["TorchFacadeMesh"]

T = TypeVar("T")


class _once(Generic[T]):
    """A member computed on first read and then stored on the instance, where later reads
    find it as a plain attribute (a non-data descriptor, like ``functools.cached_property``
    but without its lock, which Python 3.11 holds across every instance: a first read of
    ``_dim_group_names`` creates groups, collectively, and must not block other meshes)."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, mesh: None, owner: type) -> _once[T]: ...

    @overload
    def __get__(self, mesh: object, owner: type) -> T: ...

    def __get__(self, mesh: object, owner: type) -> T | _once[T]:
        if mesh is None:
            return self
        value = self.compute(mesh)
        mesh.__dict__[self.name] = value
        return value


def _plain(mesh: DeviceMesh[Any], name: str) -> Any:
    """The plain facade's property ``name`` read on ``mesh`` (whose class stores the value
    on first read instead)."""
    return vars(DeviceMesh)[name].fget(mesh)


# Our methods take the place of torch's of the same name (their signatures are a superset of
# torch's, not the same): mypy sees the two hierarchies disagree, as intended.
class TorchFacadeMesh(DeviceMesh[Any], TorchDeviceMesh):  # type: ignore[misc]  # ours win
    """A :class:`backend.DeviceMesh` that is also torch's ``DeviceMesh`` (see the module)."""

    # ---- torch's state, each computed once from the view -------------------------------------
    @_once
    def _layout(self) -> Any:
        """torch's ``_MeshLayout`` of the view's layout (offsets in the universe)."""
        return torch_layout(self.view.layout)

    @_once
    def _rank_map(self) -> torch.Tensor:
        """The universe's ranks in offset order, one tensor per universe."""
        return universe_ranks(self.binding)[0]

    @_once
    def _flatten_rank_map(self) -> FlatRanks:  # type: ignore[override]  # not torch's tuple
        """The universe's ranks as :class:`FlatRanks`, one per universe."""
        return universe_ranks(self.binding)[1]

    @_once
    def _device_type(self) -> str:
        """The device type."""
        return self.device_type

    @_once
    def _mesh_dim_names(self) -> tuple[str, ...] | None:
        """The dim names, None for a mesh made without."""
        return self.mesh_dim_names

    @_once
    def _thread_id(self) -> int | None:
        """None: torch sets it only for its ``threaded`` test backend."""
        return None

    @_once
    def _rank(self) -> int:
        """This process's global rank."""
        return self.get_rank()

    @_once
    def _coordinate_on_dim(self) -> tuple[int, ...] | None:
        """This process's coordinate, None outside the mesh."""
        return self.get_coordinate()

    @_once
    def _root_mesh(self) -> TorchFacadeMesh | None:  # type: ignore[override]  # our mesh
        """The mesh the program made that this one derives from; None for that mesh."""
        root: TorchFacadeMesh | None = _plain(self, "_root_mesh")
        return root

    @_once
    def _flatten_mapping(self) -> dict[str, Any]:
        """On the root, the one-dim meshes ``_flatten`` made, by name; else an empty dict."""
        mapping: dict[str, Any] = _plain(self, "_flatten_mapping")
        return mapping

    @_once
    def _pg_registry(self) -> dict[str, Any]:
        """On the root, the groups its meshes were given, by torch name (what
        ``torch.compile`` resolves groups through); else an empty dict."""
        return self._root.groups if self._root.mesh is self else {}

    @_once
    def _dim_group_names(self) -> list[Any]:
        """Torch's names of this mesh's groups, in dim order, created on first read (torch
        creates them when it builds the mesh); empty on a rank outside the mesh."""
        if self.get_coordinate() is None:
            return []
        return [DeviceMesh.get_group(self, i).group_name for i in range(self.ndim)]

    @_once
    def _preserve_rank_order(self) -> bool:
        """torch 2.15's flag (part of its hash, equality and compile guards), as torch keeps
        it: the root's, for the root and every mesh derived from it (so a slice equals torch's
        slice of ``to_torch()``): whether one of the root's groups keeps an order torch's
        default mesh would sort (:func:`~backend._facade._torch_state.keeps_unsorted_order`).
        Read by torch 2.15 only; older releases never ask."""
        return keeps_unsorted_order(self._get_root_mesh().view)

    @_once
    def _hash(self) -> int:
        """torch's hash of this mesh, computed once."""
        return hash(torch_hash_key(self))

    @_once
    def mesh(self) -> torch.Tensor:
        """This process's instance as a torch int tensor, computed once (see
        :attr:`backend.DeviceMesh.mesh`)."""
        tensor: torch.Tensor = _plain(self, "mesh")
        return tensor

    # ---- ours eager, torch's bodies under torch.compile (the trace inlines them) -------------
    get_group = traced_as(DeviceMesh.get_group, torch_get_group)
    """See :meth:`backend.DeviceMesh.get_group`; traced as torch's body (it finds the group
    through the root's ``_pg_registry``)."""

    _flatten = traced_as(DeviceMesh.flatten,  # type: ignore[assignment]  # a superset of torch's
                         torch_flatten)
    """See :meth:`backend.DeviceMesh.flatten`; traced as torch's body (it calls
    :meth:`_create_flatten_mesh`, then reads the root's mapping)."""

    def _create_flatten_mesh(self, mesh_dim_name: str,
                             backend_override: Override | None = None) -> None:
        """torch's step of ``_flatten`` that makes the mesh and lists it on the root."""
        DeviceMesh.flatten(self, mesh_dim_name, as_options(backend_override))

    def forget_groups(self) -> None:
        """See :meth:`backend.DeviceMesh.forget_groups`; the group names go too, and the
        root's registry of groups (the backend ended some)."""
        super().forget_groups()
        self.__dict__.pop("_dim_group_names", None)
        with self._root.lock:
            self._root.groups.clear()

    def _note(self, group: Any) -> None:
        with self._root.lock:
            self._root.groups[group.group_name] = group

    # ---- values --------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeviceMesh):
            return DeviceMesh.__eq__(self, other)
        if isinstance(other, TorchDeviceMesh):
            return bool(TorchDeviceMesh.__eq__(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash


def _share_torch_registration() -> None:
    """Look this class up as torch's ``DeviceMesh`` in torch's opaque-type table at once.

    Torch finds a subclass's registration by walking its MRO, twice per call of a
    compiled function (its type guard and its value guard); an entry for the class
    itself, the same entry as torch's, makes both a dictionary hit.  Torch registers
    ``DeviceMesh`` when ``torch.distributed.tensor`` is imported; this makes sure it did.
    """
    register_opaque_types()
    info = opaque_types.get(TorchDeviceMesh)
    if info is not None:
        opaque_types[TorchFacadeMesh] = info


_share_torch_registration()
