"""Converting a facade mesh to a real ``torch.distributed.device_mesh.DeviceMesh``.

A mesh converts to a torch mesh with its layout over its universe's rank tensor, its
dims' group names set to our groups (created, or reused, by the backend), and, unless it
is the mesh the program made, ``_root_mesh`` set to the conversion of that root mesh
(whose groups are then created too, as torch's root has them).  Conversions are
memoized per universe, so the slices of one root, converted separately, share one torch
root and compose as torch expects (``_concatenate``, which FSDP2 uses to combine its DP
mesh with a TP mesh); a flattened mesh is listed in its torch root's
``_flatten_mapping``.  This uses torch's private ``DeviceMesh`` constructor arguments
(``_layout``, ``_rank_map``, ``_root_mesh``, ``_init_backend``) and attributes, through
``_torch_private``.  Torch is imported on first use only.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from mesh import MeshView

from .._core import BackendConfigError, NotAMemberError, need_torch, require_tested_torch
from ._binding import Binding, Root

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

__all__ = ["converted_view", "to_torch"]


class Mesh(Protocol):
    """What a conversion reads of a facade mesh (``backend.DeviceMesh``)."""

    @property
    def binding(self) -> Binding[Any]: ...

    @property
    def _root(self) -> Root: ...

    def _get_root_mesh(self) -> Mesh: ...

    @property
    def _flatten_mapping(self) -> Mapping[str, Any]: ...


def _torch_mesh(mesh: Mesh, root: TorchDeviceMesh | None) -> TorchDeviceMesh:
    """A torch mesh with ``mesh``'s layout, names and rank over its universe's ranks."""
    from ._torch_private import new_torch_mesh
    from ._torch_state import keeps_unsorted_order, torch_layout, universe_ranks

    b = mesh.binding
    try:
        return new_torch_mesh(b.device_type, torch_layout(b.view.layout), universe_ranks(b)[0],
                              b.dim_names, root, b.backend.rank,
                              keeps_order=keeps_unsorted_order(mesh._get_root_mesh().binding.view))
    except TypeError as e:  # another torch's private constructor
        raise BackendConfigError(f"to_torch() needs torch 2.13's DeviceMesh(_layout=, "
                                 f"_rank_map=, _root_mesh=) constructor: {e}") from None


def _groups(mesh: Mesh) -> list[Any]:
    """The mesh's groups as torch process groups, created (or reused) by the backend in dim
    order; none on a rank outside the mesh (torch's meshes have no groups there)."""
    b = mesh.binding
    try:
        return [b.backend.torch_group(b.view, i, options) for i, options in enumerate(b.options)]
    except NotAMemberError:
        return []


_VIEWS: weakref.WeakKeyDictionary[Any, MeshView] = weakref.WeakKeyDictionary()
"""The view of every torch mesh :func:`to_torch` made, while it lives: a torch mesh equals
another exactly when their rank maps, layouts, device types and names do, so equal ones
stand for one view."""


def converted_view(device_mesh: Any) -> MeshView | None:
    """The view of a torch mesh :func:`to_torch` made (O(1)), None for another."""
    try:
        return _VIEWS.get(device_mesh)
    except TypeError:  # unhashable: not one of ours
        return None


def to_torch(mesh: Mesh) -> TorchDeviceMesh:
    """See :meth:`backend.DeviceMesh.to_torch`."""
    need_torch("DeviceMesh.to_torch()")
    require_tested_torch()  # before torch's private constructor keywords
    b = mesh.binding
    key = (b.view, b.options, b.device_type, b.dim_names, mesh._root)
    universe = b.backend.universe(b.view.ranks)
    with universe.lock:
        found: TorchDeviceMesh | None = universe.torch_meshes.get(key)
    if found is not None:
        return found
    root = mesh._get_root_mesh()
    torch_root = None if root is mesh else to_torch(root)
    converted = _torch_mesh(mesh, torch_root)
    from ._torch_private import flatten_mapping, pg_registry, set_dim_group_names

    groups = _groups(mesh)  # collective: outside the lock
    set_dim_group_names(converted, [g.group_name for g in groups])
    registry = pg_registry(converted if torch_root is None else torch_root)
    with universe.lock:
        registry.update((g.group_name, g) for g in groups)
        converted = cast("TorchDeviceMesh", universe.torch_meshes.setdefault(key, converted))
        _VIEWS[converted] = b.view
        name = b.view.names[0]
        if torch_root is not None and root._flatten_mapping.get(name) is mesh:
            flatten_mapping(torch_root).setdefault(name, converted)
    return converted
