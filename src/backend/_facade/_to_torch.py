"""Converting a facade mesh to a real ``torch.distributed.device_mesh.DeviceMesh``.

Every mesh of one universe converts with one shared torch *root*: a 1-D torch mesh
over the universe's ranks, cached in the backend's :class:`~backend._universe.Universe`
per device type.  Each converted mesh is a torch mesh with our layout over that
root's rank map, ``_root_mesh`` pointing at it and its dims' group names set to
our groups, so torch's ``_concatenate`` (which FSDP2 uses to combine its DP mesh
with a TP mesh) and its root look-ups work across separately converted slices.
This uses torch 2.13's private ``DeviceMesh`` constructor arguments (``_layout``,
``_rank_map``, ``_root_mesh``, ``_init_backend``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from layout import Layout

from .._core._errors import BackendConfigError, NotAMemberError
from ._binding import Binding

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

__all__ = ["ROOT_DIM_NAME", "to_torch", "twin"]

ROOT_DIM_NAME = "_meshlayout_universe"
"""The dim name of the shared torch root (torch's ``_flatten`` needs a named root)."""


def _torch_layout(layout: Layout) -> Any:
    from torch.distributed._mesh_layout import _FlatLayout, _MeshLayout

    return _MeshLayout([_FlatLayout(m.shape, m.stride) for m in layout])


def _torch_mesh(device_type: str, layout: Layout, rank_map: Any, rank: int,
                names: tuple[str, ...] | None, root: Any) -> TorchDeviceMesh:
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

    try:
        return TorchDeviceMesh(device_type, _layout=_torch_layout(layout), _rank_map=rank_map,
                               mesh_dim_names=names, _root_mesh=root, _init_backend=False,
                               _rank=rank)
    except TypeError as e:  # another torch's private constructor
        raise BackendConfigError(f"to_torch() needs torch 2.13's DeviceMesh(_layout=, "
                                 f"_rank_map=, _root_mesh=) constructor: {e}") from None


def _root(mesh: Binding[Any]) -> TorchDeviceMesh:
    """The universe's shared torch root for the mesh's device type (made once)."""
    import torch

    ranks = mesh.view.ranks
    universe = mesh.backend.universe(ranks)
    with universe.lock:
        root = universe.torch_roots.get(mesh.device_type)
        if root is None:
            rank_map = torch.tensor(list(ranks.ranks or range(ranks.size)), dtype=torch.int)
            root = _torch_mesh(mesh.device_type, Layout(ranks.size), rank_map,
                               mesh.backend.rank, (ROOT_DIM_NAME,), None)
            root._dim_group_names = []
            universe.torch_roots[mesh.device_type] = root
        return root


def twin(mesh: Binding[Any]) -> TorchDeviceMesh:
    """The torch mesh with this mesh's layout, names and rank, over the universe's shared
    root, made without creating any group (its ``_dim_group_names`` stay empty): the
    torch-side state a facade mesh derives what torch reads from.  Memoized per
    universe."""
    key = ("twin", mesh.view, mesh.device_type, mesh.dim_names)
    universe = mesh.backend.universe(mesh.view.ranks)
    with universe.lock:
        found: TorchDeviceMesh | None = universe.torch_meshes.get(key)
        if found is None:
            found = universe.torch_meshes[key] = _over_root(mesh, [])
        return found


def _over_root(mesh: Binding[Any], group_names: list[Any]) -> TorchDeviceMesh:
    """A torch mesh with ``mesh``'s layout, names and rank over the universe's shared root,
    its dims' groups named ``group_names``."""
    root = _root(mesh)
    made = _torch_mesh(mesh.device_type, mesh.view.layout, root._rank_map, mesh.backend.rank,
                       mesh.dim_names, root)
    made._dim_group_names = group_names
    return made


def _group_names(mesh: Binding[Any]) -> list[Any]:
    """Torch's names of the mesh's groups, created (or reused) by the backend in dim order;
    none on a rank outside the mesh (torch's meshes have no groups there)."""
    names: list[Any] = []
    for i, options in enumerate(mesh.options):
        try:
            names.append(mesh.backend.torch_group(mesh.view, i, options).group_name)
        except NotAMemberError:
            return []
    return names


def to_torch(mesh: Binding[Any], *, flattened: bool) -> TorchDeviceMesh:
    """See :meth:`backend.DeviceMesh.to_torch`; ``flattened``: the mesh is a dim ``_flatten``
    made, which torch's root knows by name."""
    key = (mesh.view, mesh.options, mesh.device_type, mesh.dim_names)
    universe = mesh.backend.universe(mesh.view.ranks)
    with universe.lock:
        found: TorchDeviceMesh | None = universe.torch_meshes.get(key)
    if found is not None:
        return found
    converted = _over_root(mesh, _group_names(mesh))  # collective: outside the lock
    with universe.lock:
        converted = cast("TorchDeviceMesh", universe.torch_meshes.setdefault(key, converted))
        if flattened:
            _root(mesh)._flatten_mapping.setdefault(mesh.view.names[0], converted)
    return converted
