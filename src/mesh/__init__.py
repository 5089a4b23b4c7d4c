"""Immutable mesh views with named dims, computed from layouts, with no process group.

A :class:`MeshView` is ``(layout, names, ranks)``: a :class:`~layout.Layout`
with one top-level mode per dim, unique dim names, and a :class:`RankMap` from
offsets to global ranks (the *universe*).  A view stands for a family of
submeshes (its instances); every per-rank query takes the rank as an argument
and costs O(ndim + group size) arithmetic.

>>> from mesh import MeshView
>>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
>>> mesh.flatten(("dp", "cp")).group(5, "dp_cp")
(1, 3, 5, 7)

Public names: :class:`MeshView`, :class:`RankMap`, :func:`concatenate`,
:func:`render`, the type aliases ``Dim`` (a dim by name or index) and ``Nested``
(a rank tensor as nested tuples), and the errors (:class:`MeshError` and its
subclasses).  Besides the queries the issue lists, a view offers
``dim_layout(dim)`` (the layout that alone determines a dim's groups, which
backends key their caches on), ``group_offset(rank, dim)``, ``index(dim)`` and
``num_instances``.
"""

from ._concat import concatenate
from ._errors import (
    DuplicateNameError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshTypeError,
    NotRepresentableError,
    OverlapError,
    RankNotInMeshError,
    UniverseMismatchError,
    UnknownDimError,
)
from ._rankmap import RankMap
from ._render import render
from ._view import Dim, MeshView, Nested

__all__ = [
    "Dim",
    "DuplicateNameError",
    "InvalidMeshDataError",
    "InvalidNameError",
    "InvalidRanksError",
    "InvalidSizeError",
    "MeshError",
    "MeshTypeError",
    "MeshView",
    "Nested",
    "NotRepresentableError",
    "OverlapError",
    "RankMap",
    "RankNotInMeshError",
    "UniverseMismatchError",
    "UnknownDimError",
    "concatenate",
    "render",
]
