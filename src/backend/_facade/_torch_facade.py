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

_TWIN = ("_coordinate_on_dim", "_device_type", "_flatten_mapping", "_flatten_rank_map",
         "_layout", "_mesh_dim_names", "_pg_registry", "_rank", "_rank_map", "_root_mesh",
         "_thread_id")
"""The instance attributes torch 2.13's ``DeviceMesh`` keeps (but ``_dim_group_names``, and
``_hash``, which is ours), read from the twin.  Properties, not ``__getattr__``: a class with
``__getattr__`` makes every attribute access of its instances slower, the per-step calls
(``get_group``, ``get_coordinate``) included."""


# Our methods take the place of torch's of the same name (their signatures are a superset of
# torch's, not the same): mypy sees the two hierarchies disagree, as intended.
class TorchFacadeMesh(DeviceMesh[Any], TorchDeviceMesh):  # type: ignore[misc]
    """A :class:`backend.DeviceMesh` that is also torch's ``DeviceMesh`` (see the module)."""

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
            return bool(twin(self.binding) == other)
        return NotImplemented

    def __hash__(self) -> int:
        found: int | None = self.__dict__.get("_torch_hash")
        if found is None:
            found = self.__dict__["_torch_hash"] = hash(twin(self.binding))
        return found


def _from_twin(name: str) -> property:
    """Torch's attribute ``name``: the twin's, unless torch code set one on this mesh."""

    def get(self: TorchFacadeMesh) -> Any:
        own = self.__dict__
        return own[name] if name in own else getattr(twin(self.binding), name)

    def put(self: TorchFacadeMesh, value: Any) -> None:
        self.__dict__[name] = value

    return property(get, put, doc=f"torch's ``{name}``, from the twin")


for _name in _TWIN:
    setattr(TorchFacadeMesh, _name, _from_twin(_name))
