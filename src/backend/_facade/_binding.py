"""What a facade mesh is, as one value: :class:`Binding`; and what meshes of one root share."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import attrs

from layout import show
from mesh import MeshView

from .._core import Backend, BackendConfigError, GroupOptions

__all__ = ["Binding", "Root", "check_device_type"]

G = TypeVar("G")


def check_device_type(device_type: object) -> str:
    """``device_type`` if it is a device type such as ``"cpu"`` (no index), else torch's error."""
    if not isinstance(device_type, str) or not device_type.isalpha():
        raise BackendConfigError(f"device_type must be a device type such as 'cpu' or 'cuda' "
                                 f"(Device type with index is not supported), got "
                                 f"{show(device_type)}")
    return device_type


@attrs.frozen(cache_hash=True)
class Binding(Generic[G]):
    """A view bound to a backend: the one value a :class:`~backend.DeviceMesh` is.

    ``options`` holds each dim's group options in dim order; ``named`` says whether the
    mesh was made with dim names (torch's ``mesh_dim_names`` is None otherwise).
    Two bindings are equal when every field is (the backend by identity).  A mesh's
    equality is :attr:`mesh_key`'s, without the options, as torch's ``DeviceMesh``
    equality ignores ``backend_override``.  Valid by construction: the view fits the
    backend's world and there is one options value per dim.  Not picklable (it holds a
    live backend): a :class:`~backend.DeviceMesh` pickles, and rebinds when loaded.
    """

    view: MeshView
    backend: Backend[G]
    options: tuple[GroupOptions, ...]
    device_type: str
    named: bool = True
    mesh_key: tuple[Any, ...] = attrs.field(init=False, eq=False, repr=False)
    """(view, backend, device type, named): what a mesh's equality and hash compare."""

    @mesh_key.default
    def _mesh_key(self) -> tuple[Any, ...]:
        return (self.view, self.backend, self.device_type, self.named)

    def __reduce__(self) -> tuple[Any, ...]:
        raise BackendConfigError("a Binding holds a live backend and does not pickle; pickle "
                                 "the DeviceMesh, which rebinds to the loading process's "
                                 "backend")

    def __attrs_post_init__(self) -> None:
        top = self.view.ranks.max_rank
        if top >= self.backend.world_size:
            raise BackendConfigError(
                f"Mesh should not be bigger than default world size {self.backend.world_size}, "
                f"but {self.view!r} reaches rank {top}")
        if len(self.options) != self.view.ndim:
            raise BackendConfigError(f"{len(self.options)} options for the {self.view.ndim} "
                                     f"dims of {self.view!r}")

    @classmethod
    def of(cls, view: MeshView, backend: Backend[G], device_type: str,
           options: Mapping[str, GroupOptions], *, named: bool = True) -> Binding[G]:
        """The binding of ``view`` with ``options`` given by dim name."""
        return cls(view, backend, tuple(options[n] for n in view.names), device_type, named)

    def over(self, view: MeshView, options: Mapping[str, GroupOptions]) -> Binding[G]:
        """The same backend and device type over another view (a transform's result)."""
        return Binding.of(view, self.backend, self.device_type, options, named=self.named)

    @property
    def by_name(self) -> dict[str, GroupOptions]:
        """Each dim's options, by dim name."""
        return dict(zip(self.view.names, self.options))

    @property
    def dim_names(self) -> tuple[str, ...] | None:
        """torch's ``mesh_dim_names``: the view's names, or None for a mesh made without."""
        return self.view.names if self.named else None


class Root:
    """What the meshes derived from one root mesh (an ``init_device_mesh``, a constructor
    call, ``from_group``, ``rebind``) share, as torch keeps it on its root mesh: the root
    mesh itself, its dim names, the meshes ``_flatten`` made from any of them, by name
    (torch's ``_flatten_mapping``), and the process groups they were given, by torch name
    (torch's ``_pg_registry``, which ``torch.compile`` resolves groups through)."""

    __slots__ = ("flattened", "groups", "lock", "mesh", "names")

    def __init__(self, mesh: Any) -> None:
        self.mesh = mesh
        self.names: tuple[str, ...] = mesh.view.names
        self.flattened: dict[str, Any] = {}
        self.groups: dict[str, Any] = {}
        self.lock = threading.Lock()
