"""``DeviceMesh``: a view bound to a backend, with torch's DeviceMesh surface."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import attrs

from mesh import Dim, MeshView

from ._base import Backend
from ._errors import BackendConfigError
from ._options import GroupOptions, Override, as_options

__all__ = ["DeviceMesh", "current_mesh", "init_device_mesh"]

_current = threading.local()


def current_mesh() -> DeviceMesh | None:
    """The innermost mesh entered with ``with mesh:`` on this thread, or None."""
    stack: list[DeviceMesh] = getattr(_current, "stack", [])
    return stack[-1] if stack else None


@attrs.frozen(repr=False)
class DeviceMesh:
    """A :class:`~mesh.MeshView` bound to a :class:`Backend`, with torch's DeviceMesh surface.

    Groups are created lazily by the backend, the first time a dim's group is
    asked for, and shared between meshes that reach the same groups.  Slicing,
    ``flatten`` and ``unflatten`` return new meshes over the same backend; the
    per-dim options (``backend_override``) follow the dims through them.

    >>> from backend import FakeBackend, init_device_mesh
    >>> mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"),
    ...                         backend=FakeBackend(8, rank=6))
    >>> mesh.get_coordinate(), mesh.get_local_rank("tp"), mesh["tp"].get_group().ranks
    ([1, 2], 2, (4, 5, 6, 7))
    """

    view: MeshView
    backend: Backend
    device_type: str
    options: tuple[GroupOptions, ...]

    def __attrs_post_init__(self) -> None:
        if len(self.options) != self.view.ndim:
            raise BackendConfigError(f"{len(self.options)} options for {self.view.ndim} dims")

    # ---- torch's DeviceMesh surface ------------------------------------------------------
    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """The dim names."""
        return self.view.names

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self.view.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return self.view.shape

    def size(self, mesh_dim: Dim | None = None) -> int:
        """The size of ``mesh_dim``, or the number of ranks in this mesh when None."""
        return self.view.size(mesh_dim)

    def get_rank(self) -> int:
        """This process's global rank."""
        return self.backend.rank

    def get_coordinate(self) -> list[int] | None:
        """This process's coordinate in the mesh, or None if it is not in the universe."""
        c = self.view.coordinate(self.backend.rank)
        return None if c is None else list(c)

    def _one_dim(self, mesh_dim: Dim | None, what: str) -> Dim:
        if mesh_dim is not None:
            return mesh_dim
        if self.ndim != 1:
            raise BackendConfigError(f"{what} needs mesh_dim on a {self.ndim}-D mesh; the dims "
                                     f"are {self.mesh_dim_names!r}")
        return 0

    def get_local_rank(self, mesh_dim: Dim | None = None) -> int:
        """This process's index in its group along ``mesh_dim``."""
        return self.view.local_rank(self.backend.rank, self._one_dim(mesh_dim, "get_local_rank"))

    def get_group(self, mesh_dim: Dim | None = None) -> Any:
        """This process's group along ``mesh_dim`` (created on first request)."""
        dim = self._one_dim(mesh_dim, "get_group")
        return self.backend.get_group(self.view, dim, self.options[self.view.index(dim)])

    def get_all_groups(self) -> list[Any]:
        """This process's group along every dim, in dim order."""
        return [self.get_group(i) for i in range(self.ndim)]

    def materialize(self) -> DeviceMesh:
        """Create every dim's group now, in dim order (the same order on every rank)."""
        self.get_all_groups()
        return self

    @property
    def mesh(self) -> Any:
        """This process's instance as a torch int tensor (torch's ``DeviceMesh.mesh``).

        Computed by array arithmetic over the layout (``view.instance_array``); refused
        with :class:`~mesh.TooManyRanksError` above ``mesh.MAX_LISTED_RANKS`` ranks (use
        ``view.instance_array(rank, limit=...)`` for more).
        """
        import torch

        rank = self.backend.rank
        try:
            array = self.view.instance_array(rank)
        except ModuleNotFoundError:  # no NumPy: the pure-Python listing
            return torch.tensor(self.view.instance(rank), dtype=torch.int)
        return torch.from_numpy(array).to(torch.int)

    def __getitem__(self, key: Dim | tuple[Dim, ...]) -> DeviceMesh:
        """The mesh of the selected dims (any order)."""
        sub = self.view[key]
        return self._with(sub, [self.options[self.view.index(n)] for n in sub.names])

    def _with(self, view: MeshView, options: Sequence[GroupOptions]) -> DeviceMesh:
        return DeviceMesh(view, self.backend, self.device_type, tuple(options))

    def flatten(self, mesh_dim_name: str | None = None, *, dims: Sequence[Dim] | None = None,
                backend_override: Override | None = None) -> DeviceMesh:
        """Merge ``dims`` (default: all) into one dim named ``mesh_dim_name``.

        The merged dim keeps the dims' options when they agree; when they
        differ, pass ``backend_override`` for it.
        """
        idx = tuple(range(self.ndim)) if dims is None else tuple(self.view.index(d) for d in dims)
        merged = self.view.flatten(idx, mesh_dim_name)
        if backend_override is not None:
            opts = as_options(backend_override)
        else:
            found = {self.options[i] for i in idx}
            if len(found) > 1:
                raise BackendConfigError(
                    f"the dims {[self.view.names[i] for i in idx]} have different options "
                    f"{sorted(map(repr, found))}; pass backend_override for the flattened dim"
                )
            opts = found.pop()
        options = [opts if i == idx[0] else self.options[i]
                   for i in range(self.ndim) if i == idx[0] or i not in idx]
        return self._with(merged, options)

    _flatten = flatten

    def unflatten(self, dim: Dim, mesh_sizes: Sequence[int], mesh_dim_names: Sequence[str],
                  backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh:
        """Split ``dim`` into ``mesh_sizes`` named ``mesh_dim_names``.

        The new dims inherit ``dim``'s options unless ``backend_override``
        (keyed by the new names) says otherwise.
        """
        k = self.view.index(dim)
        split = self.view.unflatten(k, mesh_sizes, mesh_dim_names)
        inherited = self.options[k]
        overrides = dict(backend_override or {})
        unknown = set(overrides) - set(mesh_dim_names)
        if unknown:
            raise BackendConfigError(f"backend_override names {sorted(map(str, unknown))}, which "
                                     f"are not among the new dims {tuple(mesh_dim_names)!r}")
        new_opts = [as_options(overrides[n]) if n in overrides else inherited
                    for n in mesh_dim_names]
        options = [*self.options[:k], *new_opts, *self.options[k + 1:]]
        return self._with(split, options)

    _unflatten = unflatten

    def to_torch(self) -> Any:
        """A real ``torch.distributed.device_mesh.DeviceMesh`` over this mesh's groups.

        Built with ``DeviceMesh.from_group``; usable by DTensor and FSDP2.
        """
        from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

        groups = [self.backend.torch_group(self.view, i, o) for i, o in enumerate(self.options)]
        group: Any = groups[0] if self.ndim == 1 else groups
        return TorchDeviceMesh.from_group(group, self.device_type, mesh=self.mesh,
                                          mesh_dim_names=self.mesh_dim_names)

    # ---- context manager -----------------------------------------------------------------
    def __enter__(self) -> DeviceMesh:
        stack = getattr(_current, "stack", None)
        if stack is None:
            stack = _current.stack = []
        stack.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _current.stack.pop()

    def __repr__(self) -> str:
        return f"DeviceMesh({self.device_type!r}, {self.view!r}, backend={self.backend!r})"


def _default_backend(device_type: str) -> Backend:
    from ._c10d import GlooBackend, NcclBackend

    if device_type == "cuda":
        return NcclBackend.from_env()
    if device_type == "cpu":
        return GlooBackend.from_env()
    raise BackendConfigError(f"no default backend for device_type {device_type!r}; the choices "
                             "are 'cuda' (NCCL) and 'cpu' (Gloo), or pass backend=")


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = None,
                     backend_override: Mapping[Any, Override] | None = None,
                     backend: Backend | None = None) -> DeviceMesh:
    """A row-major mesh of ``mesh_shape`` over the whole world, like torch's ``init_device_mesh``.

    With no ``backend``: NCCL for ``"cuda"`` and Gloo for ``"cpu"``, initialized
    from torchrun's environment if needed.  No group is created here.
    """
    if not isinstance(device_type, str) or ":" in device_type:
        raise BackendConfigError(f"device_type must be a device type such as 'cpu' or 'cuda' "
                                 f"(no index), got {device_type!r}")
    b = _default_backend(device_type) if backend is None else backend
    view = MeshView.from_shape(tuple(mesh_shape), mesh_dim_names)
    if view.ranks.size != b.world_size:
        raise BackendConfigError(f"mesh_shape {tuple(mesh_shape)!r} has {view.ranks.size} ranks "
                                 f"but the world has {b.world_size}")
    return b.bind(view, device_type=device_type, backend_override=backend_override)
