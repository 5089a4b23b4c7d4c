"""The facade mesh as torch's own ``DeviceMesh``: what torch's parallel APIs take unchanged.

For a backend whose groups are torch process groups (Gloo, NCCL, torch's fake backend),
every facade mesh is an instance of :class:`TorchFacadeMesh`: a
:class:`backend.DeviceMesh` (our methods come first: lazy, order-safe groups from the
backend, transforms over the view) that is also a
``torch.distributed.device_mesh.DeviceMesh``, so ``fully_shard``, ``parallelize_module``,
``DTensor`` and DCP accept it as it is.  Torch's methods that are not ours run on it too,
and the private state they read (``_layout``, ``_rank_map``, ``_flatten_rank_map``,
``_root_mesh``, ``_coordinate_on_dim``, ...) comes from a *twin*: the torch mesh with the
same layout, names and rank over the universe's shared torch root, made without creating
any group.  Only ``_dim_group_names`` creates groups, from the backend, in dim order, when
torch asks for them.

Equality and hashing follow torch's for torch meshes (a facade mesh equals the torch mesh
with its layout, rank map, device type and names) and ours between facade meshes; the
hash is torch's, computed once.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

from ._device_mesh import DeviceMesh
from ._to_torch import twin

__all__ = ["TorchFacadeMesh"]

_OURS = frozenset(DeviceMesh.__slots__)


# Our methods take the place of torch's of the same name (their signatures are a superset of
# torch's, not the same): mypy sees the two hierarchies disagree, as intended.
class TorchFacadeMesh(DeviceMesh[Any], TorchDeviceMesh):  # type: ignore[misc]
    """A :class:`backend.DeviceMesh` that is also torch's ``DeviceMesh`` (see the module)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _OURS:  # not set yet (unpickling, setup)
            raise AttributeError(name)
        return getattr(twin(self), name)

    @property  # a class attribute (None) in torch's, an instance attribute once set there
    def _root_mesh(self) -> TorchDeviceMesh | None:  # type: ignore[override]
        found: TorchDeviceMesh | None = twin(self)._root_mesh
        return found

    @property
    def _dim_group_names(self) -> list[Any]:  # type: ignore[override]
        """Torch's names of this mesh's groups (created on first use, in dim order); empty
        on a rank outside the mesh, as torch's."""
        if self.get_coordinate() is None:
            return []
        return [self.get_group(i).group_name for i in range(self.ndim)]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeviceMesh):
            return DeviceMesh.__eq__(self, other)
        if isinstance(other, TorchDeviceMesh):
            return bool(twin(self) == other)
        return NotImplemented

    def __hash__(self) -> int:
        found: int | None = self.__dict__.get("_torch_hash")
        if found is None:
            found = self.__dict__["_torch_hash"] = hash(twin(self))
        return found
