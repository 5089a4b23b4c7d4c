"""``DeviceMesh``: a view bound to a backend, with torch's ``DeviceMesh`` surface."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from layout import show
from mesh import Dim, MeshView, UnknownDimError, concatenate, ordered

from . import _registry
from ._adopt import check_groups, from_group_view
from ._errors import BackendConfigError, NotInMeshError
from ._options import GroupOptions, Override, as_options, dim_options, normalize_overrides
from ._to_torch import to_torch

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

    from ._protocol import Backend

__all__ = ["DeviceMesh", "current_mesh", "init_device_mesh"]

_PLAIN = (str, int, type(None))
"""Key types the per-mesh caches are looked up with directly: a float or a bool equal to an
int (``2.0 == 2``, ``True == 1``) would find that int's entry, so other keys go through the
checks (the mesh layer's typed error; any integer with ``__index__`` but a bool is a dim,
and a negative index counts from the end, as torch's list of dim groups does)."""

log = logging.getLogger(__name__)

G = TypeVar("G")

_DEFAULT = GroupOptions()
_current: contextvars.ContextVar[tuple[DeviceMesh[Any], ...]] = contextvars.ContextVar(
    "meshlayout_current_mesh", default=())


def current_mesh() -> DeviceMesh[Any] | None:
    """The innermost mesh entered with ``with mesh:`` in this context, or None.

    Per :mod:`contextvars` context: each asyncio task sees its own; threads start empty.
    """
    stack = _current.get()
    return stack[-1] if stack else None


def _check_device_type(device_type: object) -> str:
    if not isinstance(device_type, str) or not device_type.isalpha():
        raise BackendConfigError(f"device_type must be a device type such as 'cpu' or 'cuda' "
                                 f"(Device type with index is not supported), got "
                                 f"{show(device_type)}")
    return device_type


class DeviceMesh(Generic[G]):
    """A :class:`~mesh.MeshView` bound to a :class:`Backend`, with torch's DeviceMesh surface.

    Made by :func:`init_device_mesh`, ``backend.bind(view)``, the torch-style
    constructor ``DeviceMesh(device_type, mesh, mesh_dim_names=...)`` (an explicit rank
    tensor, bound to the process's backend for ``device_type``) or
    :meth:`from_group`.  Groups are created lazily by the backend, the first time a
    dim's group is asked for, and shared between meshes that reach the same groups.
    Slicing, ``_flatten``, ``_unflatten`` and ``_concatenate`` return new meshes over
    the same backend; per-dim options (``backend_override``) are kept by dim name.

    Per-step calls are a dict look-up: the coordinate is computed once, groups and
    slices are memoized on the mesh.

    >>> from backend import FakeBackend, init_device_mesh
    >>> mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"),
    ...                         backend=FakeBackend(8, rank=6))
    >>> mesh.get_coordinate(), mesh.get_local_rank("tp"), mesh["tp"].get_group().ranks
    ((1, 2), 2, (4, 5, 6, 7))
    >>> mesh
    DeviceMesh((dp=2, tp=4), 'cpu', stride=(4, 1))
    """

    __slots__ = ("_backend", "_coordinate", "_device_type", "_groups", "_hash", "_index",
                 "_named", "_options", "_root", "_slices", "_view")

    _view: MeshView
    _backend: Backend[G]
    _device_type: str
    _options: dict[str, GroupOptions]
    _named: bool
    _root: _Root
    _coordinate: tuple[int, ...] | None
    _index: dict[Any, int]
    _groups: dict[Any, G]
    _slices: dict[Any, DeviceMesh[G]]
    _hash: int

    def __new__(cls, device_type: str = "", mesh: Any = None, *,
                backend: Backend[G] | None = None, **_: Any) -> DeviceMesh[G]:
        """A facade over a torch backend is also torch's ``DeviceMesh`` (see
        :mod:`backend._torch_facade`); the backend is resolved again by ``__init__``."""
        if cls is DeviceMesh and isinstance(device_type, str):
            try:
                b = _registry.process_backend(device_type) if backend is None else backend
            except Exception:  # __init__ reports it
                b = None
            cls = _facade_class(b)
        made: DeviceMesh[G] = object.__new__(cls)
        return made

    @overload
    def __init__(self: DeviceMesh[Any], device_type: str, mesh: Any, *,
                 mesh_dim_names: Sequence[str] | None = ...,
                 backend_override: Mapping[Any, Override] | None = ...,
                 backend: None = ...) -> None: ...

    @overload
    def __init__(self, device_type: str, mesh: Any, *,
                 mesh_dim_names: Sequence[str] | None = ...,
                 backend_override: Mapping[Any, Override] | None = ...,
                 backend: Backend[G]) -> None: ...

    def __init__(self, device_type: str, mesh: Any, *, mesh_dim_names: Sequence[str] | None = None,
                 backend_override: Mapping[Any, Override] | None = None,
                 backend: Backend[G] | None = None) -> None:
        """torch's constructor: a mesh over the explicit rank tensor ``mesh``.

        Bound to ``backend``, or to the process's backend for ``device_type``.
        """
        _check_device_type(device_type)
        names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
        view = MeshView.from_ranks(mesh, names)
        b = _registry.process_backend(device_type) if backend is None else backend
        self._setup(view, b, device_type, dim_options(view.names, backend_override),
                    named=names is not None)
        _registry.register(device_type, b)

    @classmethod
    def _bound(cls, view: MeshView, backend: Backend[G], device_type: str,
               options: dict[str, GroupOptions], *, named: bool = True,
               root: _Root | None = None) -> DeviceMesh[G]:
        """A mesh from checked parts (what every transform returns)."""
        m: DeviceMesh[G] = object.__new__(_facade_class(backend))
        m._setup(view, backend, device_type, options, named=named,
                 root=root)
        return m

    def _setup(self, view: MeshView, backend: Backend[G], device_type: str,
               options: dict[str, GroupOptions], *, named: bool,
               root: _Root | None = None) -> None:
        top = view.ranks.max_rank
        if top >= backend.world_size:
            raise BackendConfigError(
                f"Mesh should not be bigger than default world size {backend.world_size}, but "
                f"{view!r} reaches rank {top}")
        self._view = view
        self._backend = backend
        self._device_type = device_type
        self._options = options
        self._named = named
        self._root = _Root(view.names) if root is None else root
        self._coordinate = view.coordinate(backend.rank)
        n = view.ndim
        self._index = {**{i: i for i in range(n)}, **{i - n: i for i in range(n)}}
        if named:
            self._index.update({name: i for i, name in enumerate(view.names)})
        self._groups = {}
        self._slices = {}
        self._hash = hash((view, device_type, named, id(backend)))

    # ---- what the mesh is ----------------------------------------------------------------
    @property
    def view(self) -> MeshView:
        """The mesh as a :class:`~mesh.MeshView` (a value: layout, names, universe)."""
        return self._view

    @property
    def backend(self) -> Backend[G]:
        """The backend that creates this mesh's groups."""
        return self._backend

    @property
    def device_type(self) -> str:
        """The device type: ``"cpu"``, ``"cuda"`` ..."""
        return self._device_type

    @property
    def options(self) -> Mapping[str, GroupOptions]:
        """Each dim's group options, by dim name."""
        return dict(self._options)

    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        """The dim names, or None for a mesh made without names (as torch)."""
        return self._view.names if self._named else None

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self._view.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return self._view.shape

    def size(self, mesh_dim: Dim | None = None) -> int:
        """The size of ``mesh_dim``, or the number of ranks in this mesh when None."""
        return self._view.size(None if mesh_dim is None else self._dim(mesh_dim))

    def get_rank(self) -> int:
        """This process's global rank."""
        return self._backend.rank

    def get_coordinate(self) -> tuple[int, ...] | None:
        """This process's coordinate in the mesh, or None if it is not in the universe."""
        return self._coordinate

    # ---- dims ----------------------------------------------------------------------------
    def _dim(self, mesh_dim: Any) -> int:
        if type(mesh_dim) in _PLAIN:
            try:
                return self._index[mesh_dim]
            except KeyError:
                pass
        if isinstance(mesh_dim, str) and not self._named:
            raise UnknownDimError(f"this mesh has no mesh_dim_names, so it has no dim "
                                  f"{mesh_dim!r}; use an index in [0, {self.ndim})")
        return self._view.index(mesh_dim)  # raises the typed error naming the dim

    def _one_dim(self, mesh_dim: Dim | None, what: str) -> Dim:
        if mesh_dim is not None:
            return mesh_dim
        if self.ndim != 1:
            raise BackendConfigError(
                f"Found the DeviceMesh have {self.ndim} dimensions: optional kwarg `mesh_dim` "
                f"needs to be specified when device_mesh.ndim > 1 ({what}; the dims are "
                f"{self.mesh_dim_names!r})")
        return 0

    def _flattened(self, name: str) -> DeviceMesh[G] | None:
        """The mesh ``_flatten`` made under ``name`` from this mesh's root, if any."""
        with self._root.lock:
            found: DeviceMesh[G] | None = self._root.flattened.get(name)
        return found

    # ---- groups and per-rank queries -------------------------------------------------------
    def get_group(self, mesh_dim: Dim | None = None) -> G:
        """This process's group along ``mesh_dim`` (created on first request).

        ``mesh_dim`` is a name, an index, a name ``_flatten`` gave in this universe,
        or None on a one-dim mesh.
        """
        if type(mesh_dim) in _PLAIN:  # a float or bool would hit an int's entry
            try:
                return self._groups[mesh_dim]
            except KeyError:
                pass
        group = self._resolve_group(mesh_dim)
        self._groups[mesh_dim] = group  # a hashable key: _resolve_group checked it
        return group

    def _resolve_group(self, mesh_dim: Dim | None) -> G:
        dim = self._one_dim(mesh_dim, "get_group")
        if isinstance(dim, str) and self._named and dim not in self._view.names:
            flat = self._flattened(dim)
            if flat is not None:
                return flat.get_group()
        k = self._dim(dim)
        return self._backend.get_group(self._view, k, self._options[self._view.names[k]])

    def get_all_groups(self) -> list[G]:
        """This process's group along every dim, in dim order."""
        return [self.get_group(i) for i in range(self.ndim)]

    def get_local_rank(self, mesh_dim: Dim | None = None) -> int:
        """This process's index in its group along ``mesh_dim`` (its coordinate there)."""
        if type(mesh_dim) in _PLAIN:
            try:
                return self._coordinate[self._index[mesh_dim]]  # type: ignore[index]
            except (KeyError, TypeError):
                pass
        dim = self._one_dim(mesh_dim, "get_local_rank")
        if isinstance(dim, str) and self._named and dim not in self._view.names:
            flat = self._flattened(dim)
            if flat is not None:
                return flat.get_local_rank()
        k = self._dim(dim)
        if self._coordinate is None:
            raise NotInMeshError(f"rank {self._backend.rank} is not in {self!r}; it has no "
                                 "local rank there")
        return self._coordinate[k]

    def _get_all_submeshes(self, mesh_dim_name: str) -> list[DeviceMesh[G]]:
        """Every group along ``mesh_dim_name`` as a 1-D mesh over its own ranks (torch's
        private ``_get_all_submeshes``; lists all the universe's ranks)."""
        k = self._dim(mesh_dim_name)
        name = self._view.names[k]
        return [DeviceMesh._bound(MeshView.from_ranks(list(g), (name,)), self._backend,
                                  self._device_type, {name: self._options[name]},
                                  root=self._root)
                for g in self._view.groups(k)]

    def materialize(self) -> DeviceMesh[G]:
        """Create every dim's group now, in dim order (the same order on every rank)."""
        self.get_all_groups()
        return self

    @property
    def mesh(self) -> torch.Tensor:
        """This process's instance as a torch int tensor (torch's ``DeviceMesh.mesh``).

        A rank outside the universe gets the whole mesh if it has one instance (as
        torch).  Computed by array arithmetic over the layout; refused with
        :class:`~mesh.TooManyRanksError` above ``mesh.MAX_LISTED_RANKS`` ranks (use
        ``view.instance_array(rank, limit=...)`` for more).
        """
        import torch

        view, rank = self._view, self._backend.rank
        if self._coordinate is None:
            if view.num_instances != 1:
                raise NotInMeshError(
                    f"rank {rank} is not in {self!r}, which has {view.num_instances} "
                    "instances: in order to get the mesh tensor of a DeviceMesh it needs to "
                    "contain the local rank or be a single instance")
            rank = view.ranks(0)
        try:
            array = view.instance_array(rank, dtype="int32")
        except ModuleNotFoundError:  # no NumPy: the pure-Python listing
            return torch.tensor(view.instance(rank), dtype=torch.int)
        return torch.from_numpy(array).to(torch.int)  # no copy when it is int32 already

    # ---- transforms ----------------------------------------------------------------------
    def _with(self, view: MeshView, options: dict[str, GroupOptions]) -> DeviceMesh[G]:
        return DeviceMesh._bound(view, self._backend, self._device_type, options,
                                 root=self._root)

    def __getitem__(self, key: str | Sequence[str]) -> DeviceMesh[G]:
        """The mesh of the selected dims, by name (a str, or a tuple or list of names).

        A name ``_flatten`` gave in this universe may be selected too, alone or beside
        this mesh's dims; a reordered selection is a transpose (torch refuses it).
        """
        if type(key) in _PLAIN or (type(key) is tuple and all(type(k) in _PLAIN for k in key)):
            try:
                return self._slices[key]
            except KeyError:
                pass
        sub = self._slice(key)
        if isinstance(key, (str, tuple)):
            self._slices[key] = sub
        return sub

    def _slice(self, key: str | Sequence[str]) -> DeviceMesh[G]:
        if not self._named:
            raise BackendConfigError(f"Cannot slice a DeviceMesh without mesh_dim_names! "
                                     f"({self!r}, key {show(key)})")
        names = (key,) if isinstance(key, str) else key
        if isinstance(names, tuple) and names == self._view.names:
            return self
        view_names = self._view.names
        parts: list[DeviceMesh[G]] = []
        for name in names if isinstance(names, (tuple, list)) else [names]:
            if isinstance(name, str) and name not in view_names:
                flat = self._flattened(name)
                if flat is not None:
                    parts.append(flat)
                    continue
            parts.append(self._select([name]))
        if len(parts) == 1:
            return parts[0]
        if all(p._view.ranks == self._view.ranks and p._root is self._root
               and len(p._view.names) == 1 and p._view.names[0] in view_names for p in parts):
            return self._select(list(names))
        return DeviceMesh._concatenate(parts)

    def _select(self, names: list[Any]) -> DeviceMesh[G]:
        sub = self._view[names]
        return self._with(sub, {n: self._options[n] for n in sub.names})

    def flatten(self, mesh_dim_name: str | None = None, backend_override: Override | None = None,
                *, dims: Sequence[Dim] | None = None) -> DeviceMesh[G]:
        """Merge ``dims`` (default: all) into one dim ``mesh_dim_name`` (torch's ``_flatten``).

        The name defaults to the dims' names joined with ``_`` and may not be a dim name
        of this mesh or of the mesh it was sliced from (``ValueError``); the flattened
        mesh is remembered in the universe, so ``mesh["dp_cp"]`` and
        ``mesh.get_group("dp_cp")`` work afterwards on every mesh of it.  Flattening
        the same dims into the same name again returns the same mesh.  The merged dim
        keeps the dims' options when they agree; when they differ it gets default
        options (and a warning is logged) unless ``backend_override`` says otherwise.
        """
        if not self._named:
            raise BackendConfigError(f"Cannot flatten a DeviceMesh without mesh_dim_names! "
                                     f"({self!r})")
        idx = tuple(range(self.ndim)) if dims is None else tuple(
            self._dim(d) for d in ordered(dims, "dims"))
        names = self._view.names
        name = "_".join(names[i] for i in idx) if mesh_dim_name is None else mesh_dim_name
        if self.ndim == 1 and name == names[0] and backend_override is None:
            return self
        if name in names or name in self._root.names:
            raise BackendConfigError(
                f"{name} already exists for submesh of the {self!r}: the dim names are "
                f"{names!r} (and the mesh it was sliced from has {self._root.names!r}); "
                "please specify another valid mesh_dim_name")
        merged = self._view.flatten(idx, name)
        opts = dict(self._options)
        for i in idx:
            del opts[names[i]]
        opts[name] = self._merged_options([names[i] for i in idx], backend_override)
        flat = self._with(merged, {n: opts[n] for n in merged.names})
        return self._remember(flat, name)

    _flatten = flatten

    def _merged_options(self, names: list[str], override: Override | None) -> GroupOptions:
        if override is not None:
            return as_options(override)
        found = {self._options[n] for n in names}
        if len(found) == 1:
            return found.pop()
        log.warning("flattening dims %s with different options %s: the merged dim gets the "
                    "default options; pass backend_override to choose", names,
                    sorted(map(repr, found)))
        return _DEFAULT

    def _remember(self, flat: DeviceMesh[G], name: str) -> DeviceMesh[G]:
        """Register the flattened dim ``name`` of ``flat`` with this mesh's root (torch's
        root memory: another root, e.g. a second ``init_device_mesh``, may reuse the name)."""
        one = flat if flat.ndim == 1 else flat[name]
        with self._root.lock:
            known: DeviceMesh[G] | None = self._root.flattened.get(name)
            if known is None:
                self._root.flattened[name] = one
            elif known._view.dim_layout(0) != one._view.dim_layout(0) or \
                    known._options != one._options or known._device_type != one._device_type:
                raise BackendConfigError(
                    f"Flatten mesh with mesh_dim_name {name} has been created before, please "
                    f"specify another valid mesh_dim_name (it is {known!r} with layout "
                    f"{known._view.dim_layout(0)}; this one would be {one._view.dim_layout(0)})")
            elif flat.ndim == 1:
                return known
        return flat

    def unflatten(self, dim: Dim, mesh_sizes: Sequence[int], mesh_dim_names: Sequence[str],
                  backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh[G]:
        """Split ``dim`` into ``mesh_sizes`` named ``mesh_dim_names`` (torch's ``_unflatten``).

        The new dims inherit ``dim``'s options unless ``backend_override`` (keyed by
        the new names, or by indices into them) says otherwise.
        """
        k = self._dim(dim)
        split = self._view.unflatten(k, mesh_sizes, mesh_dim_names)
        new = split.names[k:k + split.ndim - self.ndim + 1]
        given = normalize_overrides(new, backend_override)
        inherited = self._options[self._view.names[k]]
        opts = {n: given.get(n, inherited) if n in new else self._options[n]
                for n in split.names}
        return self._with(split, opts)

    _unflatten = unflatten

    @staticmethod
    def _concatenate(device_mesh_list: Sequence[DeviceMesh[G]]) -> DeviceMesh[G]:
        """Join the dims of meshes of one universe and backend (torch's ``_concatenate``).

        Each dim keeps its options; overlapping dims raise ``OverlapError`` (a
        ``RuntimeError`` as in torch).
        """
        meshes = list(ordered(device_mesh_list, "device_mesh_list"))
        if not meshes or not all(isinstance(m, DeviceMesh) for m in meshes):
            raise BackendConfigError(f"_concatenate takes a non-empty list of DeviceMeshes, got "
                                     f"{show(device_mesh_list)}")
        first = meshes[0]
        for m in meshes[1:]:
            if m._backend is not first._backend or m._device_type != first._device_type:
                raise BackendConfigError(
                    f"Cannot concatenate DeviceMeshes of different backends or device types: "
                    f"{m!r} and {first!r}")
        view = concatenate([m._view for m in meshes])
        opts = {n: o for m in meshes for n, o in m._options.items()}
        return DeviceMesh._bound(view, first._backend, first._device_type, opts,
                                 root=first._root)

    @staticmethod
    def from_group(group: Any, device_type: str, mesh: Any = None, *,
                   mesh_dim_names: Sequence[str] | None = None,
                   backend: Backend[Any] | None = None) -> DeviceMesh[Any]:
        """A mesh over existing groups (torch's ``DeviceMesh.from_group``).

        One group: a 1-D mesh of its ranks (``mesh``, if given, must list them).  A list
        of groups: ``mesh`` (a rank tensor with one dim per group) and
        ``mesh_dim_names`` are required, and each group must hold this rank's group
        along its dim.  The groups are adopted by the backend: asking for those dims
        returns them, and meshes reaching the same families share them.
        """
        _check_device_type(device_type)
        names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
        view, groups = from_group_view(group, mesh, names)
        b = _registry.process_backend(device_type) if backend is None else backend
        result = DeviceMesh._bound(view, b, device_type, dict.fromkeys(view.names, _DEFAULT),
                                   named=names is not None)
        if result._coordinate is not None:
            check_groups(view, b.rank, groups)
            for k, g in enumerate(groups):
                b.adopt(view, k, _DEFAULT, g)
        _registry.register(device_type, b)
        return result

    # ---- torch interop -------------------------------------------------------------------
    def to_torch(self) -> TorchDeviceMesh:
        """A real ``torch.distributed.device_mesh.DeviceMesh`` over this mesh's groups.

        Every mesh of one universe (and backend) converts with one shared torch root,
        so separately converted slices compose as torch expects (``_concatenate``,
        TP on ``mesh["tp"].to_torch()`` with FSDP2 on ``mesh["dp"].to_torch()``).
        Memoized; creates (or reuses) this mesh's groups as torch process groups.
        """
        return to_torch(self)

    def __enter__(self) -> DeviceMesh[G]:
        """Make this the current mesh (per :mod:`contextvars` context) and, where the
        backend's groups are torch process groups, enter its torch mesh too, so DTensor
        calls without an explicit mesh find it.  (A :class:`FakeBackend` mesh stays
        torch-free; use :class:`TorchFakeBackend` or :meth:`to_torch` for DTensor.)"""
        if self._backend.torch_groups:
            self.to_torch().__enter__()
        _current.set((*_current.get(), self))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _current.set(_current.get()[:-1])
        if self._backend.torch_groups:
            self.to_torch().__exit__(exc_type, exc, tb)

    # ---- values: equality, pickling, repr --------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DeviceMesh):
            return NotImplemented
        return (self._view == other._view and self._device_type == other._device_type
                and self._named == other._named and self._backend is other._backend)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as (view, options by name, device type): never the backend or a group.

        Unpickling rebinds to this process's backend for the device type (see
        ``backend._registry``); unpickled and copied meshes share its groups.
        """
        return (_rebind, (self._view, self._options, self._device_type, self._named,
                          self._root.names))

    def __repr__(self) -> str:
        sizes = self._view.shape
        dims = f"({', '.join(f'{n}={s}' for n, s in zip(self._view.names, sizes))})" \
            if self._named else f"{sizes}"
        stride = tuple(m.stride for m in self._view.layout)
        ranks = "" if self._view.ranks.is_identity else f", ranks={self._view.ranks!r}"
        return f"DeviceMesh({dims}, '{self._device_type}', stride={stride}{ranks})"

    def render(self, rank: int | None = None, *, width: int = 120) -> str:
        """A text picture of this process's instance, its rank and groups marked (any
        ndim; lines at most ``width`` columns; see :func:`mesh.render`)."""
        return self._view.render(self._backend.rank if rank is None else rank, width=width)


def _facade_class(backend: object) -> type[DeviceMesh[Any]]:
    """The class of a facade mesh bound to ``backend``: torch's ``DeviceMesh`` too where
    its groups are torch process groups (torch is loaded then), else torch-free."""
    if getattr(backend, "torch_groups", False):
        from ._torch_facade import TorchFacadeMesh

        return TorchFacadeMesh
    return DeviceMesh


def _rebind(view: MeshView, options: dict[str, GroupOptions], device_type: str, named: bool,
            root_names: tuple[str, ...]) -> DeviceMesh[Any]:
    try:
        backend = _registry.process_backend(device_type)
    except Exception as e:
        raise BackendConfigError(
            f"unpickling a DeviceMesh ({view!r}) binds it to this process's backend for "
            f"device type {device_type!r}, and there is none: start one before loading "
            "(GlooBackend.from_env() or NcclBackend.from_env() under torchrun, "
            "TorchFakeBackend(world_size, rank) in a test, or bind any mesh to a FakeBackend "
            f"with backend.bind(view)). Starting the default one failed: {e}") from e
    return DeviceMesh._bound(view, backend, device_type, dict(options), named=named,
                             root=_Root(root_names))


class _Root:
    """What the meshes derived from one root mesh (an ``init_device_mesh``, a constructor
    call) share, as torch keeps it on its root: the root's dim names and the meshes
    ``_flatten`` made from them, by name."""

    __slots__ = ("flattened", "lock", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.flattened: dict[str, Any] = {}
        self.lock = threading.Lock()


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
    _check_device_type(device_type)
    names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
    shape = ordered(mesh_shape, "mesh_shape")
    if names is not None and len(names) != len(shape):
        raise BackendConfigError(
            f"mesh_shape and mesh_dim_names should have same length! Found "
            f"len(mesh_dim_names): {len(names)} and len(mesh_shape): {len(shape)}")
    view = MeshView.from_shape(shape, names)
    b = _registry.process_backend(device_type) if backend is None else backend
    mesh = DeviceMesh._bound(view, b, device_type, dim_options(view.names, backend_override),
                             named=names is not None)
    _registry.register(device_type, b)
    return mesh

