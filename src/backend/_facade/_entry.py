"""The entry points that make a root mesh from a shape or a view: :func:`init_device_mesh`
(torch's) and :func:`bind` (ours)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, overload

from layout import show
from mesh import MeshView, ordered

from .._core import Backend, BackendConfigError, Override
from ._binding import check_device_type
from ._device_mesh import DeviceMesh, over

__all__ = ["bind", "init_device_mesh"]

G = TypeVar("G")


@overload
def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = ...,
                     backend_override: Mapping[Any, Override] | None = ...,
                     backend: None = ...) -> DeviceMesh[Any]: ...


@overload
def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = ...,
                     backend_override: Mapping[Any, Override] | None = ...,
                     backend: Backend[G]) -> DeviceMesh[G]: ...


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = None,
                     backend_override: Mapping[Any, Override] | None = None,
                     backend: Backend[Any] | None = None) -> DeviceMesh[Any]:
    """A row-major mesh of ``mesh_shape`` over the first ``prod(mesh_shape)`` ranks, like
    torch's ``init_device_mesh``.  No group is created here.

    With no ``backend``: this process's backend for ``device_type`` (over an already
    initialized torch.distributed default group, else NCCL for ``"cuda"`` and Gloo for
    ``"cpu"`` initialized from torchrun's environment).  Errors are those torch raises
    (``RuntimeError`` for duplicate names, a names/shape mismatch, a device with an
    index, a mesh bigger than the world).
    """
    check_device_type(device_type)
    names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
    shape = ordered(mesh_shape, "mesh_shape")
    if names is not None and len(names) != len(shape):
        raise BackendConfigError(
            f"mesh_shape and mesh_dim_names should have same length! Found "
            f"len(mesh_dim_names): {len(names)} and len(mesh_shape): {len(shape)}")
    return over(MeshView.from_shape(shape, names), backend, device_type, backend_override,
                named=names is not None)


@overload
def bind(view: MeshView, backend: None = ..., *, device_type: str | None = ...,
         backend_override: Mapping[Any, Override] | None = ...) -> DeviceMesh[Any]: ...


@overload
def bind(view: MeshView, backend: Backend[G], *, device_type: str | None = ...,
         backend_override: Mapping[Any, Override] | None = ...) -> DeviceMesh[G]: ...


def bind(view: MeshView, backend: Backend[Any] | None = None, *, device_type: str | None = None,
         backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh[Any]:
    """``view`` bound to ``backend`` as a :class:`DeviceMesh`; creates no group.

    ``backend`` defaults to the process's backend for ``device_type``; ``device_type``
    to the backend's default (``"cpu"``, ``"cuda"`` for NCCL).  The backend becomes the
    process's backend for the device type (what ``DeviceMesh(...)`` and unpickling bind
    to).  The view's dim names are the mesh's; ``backend_override`` as in
    :func:`init_device_mesh`.

    >>> from backend import FakeBackend, bind
    >>> from mesh import MeshView
    >>> mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), FakeBackend(8, rank=6))
    >>> mesh.get_group("tp").ranks
    (4, 5, 6, 7)
    """
    if not isinstance(view, MeshView):
        raise BackendConfigError(f"bind takes a mesh.MeshView, got {show(view)}")
    if device_type is None:
        device_type = "cpu" if backend is None else getattr(backend, "default_device_type", "cpu")
    check_device_type(device_type)
    return over(view, backend, device_type, backend_override, named=True)
