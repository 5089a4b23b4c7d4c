"""``redistribute``: a DTensor moved to another mesh, what torch's ``DTensor.redistribute``
refuses ("Cross device mesh comm not supported yet!").

Both meshes are read as :class:`mesh.MeshView` values: a facade mesh as its view (every
instance a replica), a torch ``DeviceMesh`` as its rank tensor (``mesh.mesh``, one
instance).  The plan is :func:`mesh.reshard` between the two shardings, executed by
:func:`~backend._tensor.reshard_tensor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mesh
from layout import show

from .._core import BackendConfigError
from .._tensor import from_torch_placements, reshard_tensor
from ._device_mesh import DeviceMesh

__all__ = ["redistribute", "sharding_of", "view_of"]


def view_of(device_mesh: Any) -> mesh.MeshView:
    """The view a facade or torch mesh stands for: O(1) for a facade mesh and for a torch
    mesh its ``to_torch()`` made; a mesh torch built itself is listed (O(its ranks))."""
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

    from ._to_torch import converted_view

    if isinstance(device_mesh, DeviceMesh):
        return device_mesh.view
    known = converted_view(device_mesh)
    if known is not None:
        return known
    if isinstance(device_mesh, TorchDeviceMesh):
        names = device_mesh.mesh_dim_names or tuple(f"dim{i}" for i in
                                                    range(device_mesh.ndim))
        return mesh.MeshView.from_ranks(device_mesh.mesh.tolist(), list(names))
    raise BackendConfigError(f"a mesh must be a backend.DeviceMesh or torch's DeviceMesh, got "
                             f"{show(device_mesh)}")


def sharding_of(dtensor: Any) -> mesh.Sharding:
    """A DTensor's placement as a :class:`mesh.Sharding`: its mesh's view, its placements,
    its global shape (``DTensor.placements`` and ``DTensor.device_mesh`` as one value).

    >>> from backend import TorchFakeBackend, bind, sharding_of
    >>> from mesh import MeshView
    >>> from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    >>> import torch
    >>> tb = TorchFakeBackend(4, rank=1)
    >>> dm = bind(MeshView.from_shape((2, 2), ("dp", "tp")), tb)
    >>> dt = distribute_tensor(torch.zeros(8, 6), dm.to_torch(), [Replicate(), Shard(1)])
    >>> s = sharding_of(dt)
    >>> s.placements, s.local_shape(1)
    ((Replicate(), Shard(1)), (8, 3))
    >>> tb.shutdown()
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(dtensor, DTensor):
        raise BackendConfigError(f"sharding_of needs a DTensor, got {show(dtensor)}")
    return mesh.Sharding(view_of(dtensor.device_mesh), from_torch_placements(dtensor.placements),
                         tuple(dtensor.shape))


def redistribute(dtensor: Any, device_mesh: Any, placements: Sequence[Any], *,
                 topology: mesh.Topology | None = None, group: Any = None) -> Any:
    """``dtensor`` moved to ``device_mesh`` with torch ``placements``: a DTensor on
    ``device_mesh`` holding the same global tensor.

    Every rank of either mesh calls it, with the same arguments, in the same order with
    other collectives; a rank outside the source mesh passes the DTensor as torch gives it
    there (its global shape and placements, an empty local tensor).  The meshes may share
    ranks, or not.  A ``Partial`` source is reduced on the way; a ``Partial`` destination
    is made as :func:`mesh.reshard` makes it (kept from the same ``Partial`` on the same
    mesh dim, or partitioned from ``Replicate()``), any other refused.  ``topology`` makes
    the plan take each element from the nearest holder; transfers go over ``group``
    (default: the world).
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(dtensor, DTensor):
        raise BackendConfigError(f"redistribute needs a DTensor, got {show(dtensor)}")
    src = sharding_of(dtensor)
    shape = src.shape
    dst = mesh.Sharding(view_of(device_mesh), from_torch_placements(placements), shape)
    plan = mesh.reshard(src, dst, topology, itemsize=dtensor.element_size())
    import torch.distributed as dist

    rank = dist.get_rank()
    local = dtensor.to_local() if src.view.coordinate(rank) is not None else None
    out = reshard_tensor(plan, local, group=group, dtype=dtensor.dtype,
                         device=dtensor.to_local().device)
    if out is None:
        out = dtensor.to_local().new_empty(0)
    torch_mesh = device_mesh.to_torch() if isinstance(device_mesh, DeviceMesh) else device_mesh
    return DTensor.from_local(out, torch_mesh, list(placements), run_check=False,
                              shape=dtensor.shape,
                              stride=dtensor.stride())
