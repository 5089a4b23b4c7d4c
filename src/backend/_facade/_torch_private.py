"""Every private name of torch that ``backend._facade`` uses, each imported here once
(ARCHITECTURE §8): what it is for, and the torch releases it was checked on.  No other module
of the sub-package reads a torch private name (``tests/test_torch_private.py`` checks both:
that torch still has each name of :data:`REGISTRY` and :data:`TORCH_READS`, and that nothing
else reads one).

Two kinds of names: those the facade reads or passes (:data:`REGISTRY`: private modules,
``DeviceMesh``'s private methods, its private constructor keywords, the private attributes of
a torch mesh ``to_torch`` fills), and those :class:`~backend._facade._torch_facade.
TorchFacadeMesh` defines because torch's ``DeviceMesh`` code reads them on its instances
(:data:`TORCH_READS`: torch's protocol, not reads of ours).

Imports torch: ``_torch_state``, ``_torch_facade`` and ``_to_torch`` import this module where
they import torch (``import backend`` loads no torch).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

# The opaque-type table torch.compile looks a mesh's class up in (torch never rebinds it);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
from torch._library.opaque_object import _OPAQUE_TYPES as opaque_types
from torch.distributed import device_mesh

# A one-dim layout (shape, stride) of torch's mesh layout; checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
from torch.distributed._mesh_layout import _FlatLayout as FlatLayout

# torch's layout of a DeviceMesh (one FlatLayout per dim); checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
from torch.distributed._mesh_layout import _MeshLayout as MeshLayout
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

__all__ = ["KEEPS_ORDER", "REGISTRY", "TORCH_READS", "FlatLayout", "MeshLayout", "flatten_mapping",
           "new_torch_mesh", "opaque_types", "pg_registry", "register_opaque_types",
           "set_dim_group_names", "torch_flatten", "torch_get_group", "torch_hash_key",
           "traced_as"]

F = TypeVar("F", bound=Callable[..., Any])

# Registers DeviceMesh as torch.compile's opaque type (once; torch.distributed.tensor does);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
register_opaque_types: Callable[[], None] = device_mesh._register_distributed_opaque_types

# torch's hash key of a DeviceMesh (the facade's hash is torch's); checked on torch 2.13.0, 2.14.1
# and 2.15.0.
torch_hash_key: Callable[[Any], Any] = TorchDeviceMesh._hash_key

# torch's body of DeviceMesh._flatten, which torch.compile inlines; checked on torch 2.13.0,
# 2.14.1 and 2.15.0.
torch_flatten: Callable[..., Any] = TorchDeviceMesh._flatten

# torch's body of DeviceMesh.get_group, which torch.compile inlines (a public method: listed
# for what it is used for, not as a private read).
torch_get_group: Callable[..., Any] = TorchDeviceMesh.get_group

_INLINE = "_torchdynamo_inline"
"""The attribute of a function that torch.compile's tracer follows to the function it
traces in its place (``torch._dynamo``: ``UserFunctionVariable`` reads it for every function
it inlines, ``UserDefinedObjectVariable`` for a method found on an object's class; torch sets
it on ``torch.compile``'s and ``torch.jit.script``'s wrappers); checked on torch 2.13.0, 2.14.1 and
2.15.0."""


def traced_as(eager: F, traced: Callable[..., Any]) -> F:
    """A copy of the function ``eager`` that ``torch.compile`` traces as ``traced``.

    Eager calls run ``eager``'s code as it is: no "are we tracing" check, no wrapper frame
    (a per-step call such as ``get_group`` costs what the plain facade's does).  The trace
    inlines ``traced`` instead (torch's body, over the members torch registered), through
    :data:`_INLINE`.  A copy, so ``eager`` itself (the torch-free mesh's method) keeps being
    traced as written.
    """
    copy = types.FunctionType(eager.__code__, eager.__globals__, eager.__name__,
                              eager.__defaults__, eager.__closure__)
    copy.__kwdefaults__ = eager.__kwdefaults__
    copy.__doc__, copy.__qualname__ = eager.__doc__, eager.__qualname__
    copy.__module__, copy.__annotations__ = eager.__module__, dict(eager.__annotations__)
    setattr(copy, _INLINE, traced)
    return cast(F, copy)  # eager's code, defaults and closure: the same callable as eager


KEEPS_ORDER = "preserve_rank_order" in inspect.signature(TorchDeviceMesh.__init__).parameters
"""Whether this torch's ``DeviceMesh`` has the (public) keyword ``preserve_rank_order``: torch
2.15 on; 2.13.0 and 2.14.1 lack it."""


def new_torch_mesh(device_type: str, layout: MeshLayout, rank_map: torch.Tensor,
                   dim_names: tuple[str, ...] | None, root: TorchDeviceMesh | None,
                   rank: int, *, keeps_order: bool = False) -> TorchDeviceMesh:
    """A torch mesh of ``layout`` over ``rank_map`` whose groups are not created (they are set
    after, with :func:`set_dim_group_names`), through ``DeviceMesh``'s private keywords
    ``_layout``, ``_rank_map``, ``_root_mesh``, ``_init_backend`` and ``_rank``, and on torch
    2.15 ``preserve_rank_order=keeps_order``; checked on torch 2.13.0, 2.14.1 and 2.15.0.
    Another torch's constructor raises TypeError."""
    order: dict[str, Any] = {"preserve_rank_order": keeps_order} if KEEPS_ORDER else {}
    return TorchDeviceMesh(device_type, _layout=layout, _rank_map=rank_map,
                           mesh_dim_names=dim_names, _root_mesh=root, _init_backend=False,
                           _rank=rank, **order)


def set_dim_group_names(mesh: TorchDeviceMesh, names: list[Any]) -> None:
    """Set a torch mesh's ``_dim_group_names`` (its groups, in dim order, which torch's
    ``get_group`` resolves); checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    mesh._dim_group_names = names


def pg_registry(mesh: TorchDeviceMesh) -> dict[str, Any]:
    """A torch root mesh's ``_pg_registry``: its meshes' groups by name (what
    ``torch.compile`` resolves groups through); checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    found: dict[str, Any] = mesh._pg_registry
    return found


def flatten_mapping(mesh: TorchDeviceMesh) -> dict[str, Any]:
    """A torch root mesh's ``_flatten_mapping``: the meshes flattened from it, by name;
    checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    found: dict[str, Any] = mesh._flatten_mapping
    return found


_MESH = "torch.distributed.device_mesh.DeviceMesh"

REGISTRY: tuple[tuple[str, str], ...] = (
    ("torch._library.opaque_object._OPAQUE_TYPES",
     "torch.compile's opaque-type table: the facade class gets DeviceMesh's entry"),
    ("torch.distributed.device_mesh._register_distributed_opaque_types",
     "registering DeviceMesh as an opaque type before the facade copies its entry"),
    ("torch.distributed._mesh_layout._MeshLayout", "a facade mesh's and to_torch's layout"),
    ("torch.distributed._mesh_layout._FlatLayout", "one dim of a _MeshLayout"),
    (f"{_MESH}._hash_key", "torch's hash of a mesh, which the facade's hash is"),
    (f"{_MESH}._flatten", "torch's _flatten, run under torch.compile (the trace inlines it)"),
    ("torch._dynamo.variables.functions.UserFunctionVariable",
     "reads a function's _torchdynamo_inline: get_group and _flatten are traced as torch's"),
    (f"{_MESH}(_layout=)", "to_torch: the converted mesh's layout"),
    (f"{_MESH}(_rank_map=)", "to_torch: the universe's ranks as a tensor"),
    (f"{_MESH}(_root_mesh=)", "to_torch: the torch root a converted slice derives from"),
    (f"{_MESH}(_init_backend=)", "to_torch: no groups created by torch (ours are set)"),
    (f"{_MESH}(_rank=)", "to_torch: this process's rank, without asking the default group"),
    (f"{_MESH}()._dim_group_names", "to_torch: the converted mesh's groups, set by name"),
    (f"{_MESH}()._pg_registry", "to_torch: the torch root's groups by name, filled"),
    (f"{_MESH}()._flatten_mapping", "to_torch: a converted flattened mesh, listed on its root"),
)
"""(torch's name, what ``backend._facade`` uses it for): a dotted name; ``DeviceMesh(_k=)``, a
keyword of its constructor; ``DeviceMesh()._a``, an attribute of its instances."""

TORCH_READS: tuple[tuple[str, str], ...] = (
    ("_layout", "the mesh's layout (torch's _MeshLayout): slicing, flattening, guards"),
    ("_rank_map", "the universe's ranks as a tensor: the mesh tensor, slices"),
    ("_flatten_rank_map", "the universe's ranks as a sequence: equality, hash, compile guards"),
    ("_device_type", "the device type: equality, hash, group creation"),
    ("_mesh_dim_names", "the dim names: lookup by name, equality, hash"),
    ("_thread_id", "the thread of torch's threaded test backend: equality, hash (None)"),
    ("_rank", "this process's global rank: get_rank, coordinates"),
    ("_coordinate_on_dim", "this process's coordinate: get_local_rank, DTensor's shards"),
    ("_root_mesh", "the mesh this one derives from (None for a root): _get_root_mesh"),
    ("_flatten_mapping", "the root's flattened meshes by name: _flatten, lookups by name"),
    ("_pg_registry", "the root's groups by name: get_group under torch.compile"),
    ("_dim_group_names", "the mesh's groups' names, in dim order: get_group"),
    ("_hash", "the mesh's hash, computed once"),
    ("_flatten", "flattening (DTensor, FSDP2, compiled code call it): ours eager"),
    ("_create_flatten_mesh", "torch's _flatten's step that makes the mesh: ours"),
    *((("_preserve_rank_order",
        "torch 2.15: whether a group keeps an unsorted order: equality, hash, compile guards"),)
      if KEEPS_ORDER else ()),
)
"""(attribute, what torch reads it for): the members of torch's ``DeviceMesh`` protocol that
:class:`~backend._facade._torch_facade.TorchFacadeMesh` defines (torch's code reads them on
its instances, eager and traced)."""
