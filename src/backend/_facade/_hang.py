"""A hung job's flight-recorder dumps read against a facade mesh, or a plan: the facade's
door to :func:`mesh.read_flight_records` (which does the work, without torch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import mesh
from layout import show
from mesh import HangReport, MeshView, Topology

from .._core import BackendConfigError
from ._device_mesh import DeviceMesh

__all__ = ["read_flight_records"]

Mesh = DeviceMesh[Any]


def read_flight_records(paths: Iterable[str],
                        mesh_or_plan: Mesh | MeshView | Mapping[str, Mesh | MeshView],
                        *, topology: Topology | None = None) -> HangReport:
    """What torch's flight-recorder dumps of a hung job (``paths``, one per rank) say in
    the coordinates of ``mesh_or_plan``: a facade :class:`DeviceMesh` or torch's own
    (``init_device_mesh``'s), a :class:`mesh.MeshView`, or a plan (view name -> any of
    those).  The facade names its groups ``mesh_<dim>`` as torch does (``group_desc``), so
    each group in the dumps is found by its dim and members; see
    :func:`mesh.read_flight_records` for the report.

    >>> from backend import read_flight_records
    >>> read_flight_records([], "plan.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    backend.BackendConfigError: mesh_or_plan must be ... got 'plan.py' ...
    """
    return mesh.read_flight_records(paths, _views(mesh_or_plan), topology=topology)


def _views(given: object) -> dict[str, MeshView]:
    def view(v: object) -> MeshView | None:
        if isinstance(v, DeviceMesh):
            return v.view
        if _is_torch_mesh(v):  # torch names its groups as the facade does (mesh_<dim>)
            from ._redistribute import view_of

            return view_of(v)
        return v if isinstance(v, MeshView) else None

    one = view(given)
    if one is not None:
        return {"mesh": one}
    if isinstance(given, Mapping) and given:
        views = {k: view(v) for k, v in given.items()}
        if all(isinstance(k, str) for k in views) and all(v is not None for v in views.values()):
            return {k: v for k, v in views.items() if v is not None}
    hint = f" (a plan file is read by the command: meshlayout hang DUMPS... --plan {given})" \
        if isinstance(given, str) else ""
    raise BackendConfigError("mesh_or_plan must be a DeviceMesh (the facade's or torch's), a "
                             "mesh.MeshView or a mapping of view name -> DeviceMesh or "
                             f"MeshView, got {show(given)}{hint}")


def _is_torch_mesh(value: object) -> bool:
    """Whether ``value`` is torch's own ``DeviceMesh`` (without importing torch here: a
    process that never imported it holds none)."""
    import sys

    module = sys.modules.get("torch.distributed.device_mesh")
    return module is not None and isinstance(value, module.DeviceMesh)
