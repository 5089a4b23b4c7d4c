"""``DeviceMesh``: a view bound to a backend, with torch's ``DeviceMesh`` surface."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import attrs

from layout import show
from mesh import Dim, MeshView, RankMap, UnknownDimError, concatenate, ordered, render

from .._core import (
    Backend,
    BackendConfigError,
    GroupOptions,
    NotAMemberError,
    Onward,
    Override,
    RankLostError,
    TorchMissingError,
    UnsupportedTorchError,
    as_options,
    dim_options,
    normalize_overrides,
    plugged,
    process_backend,
    register,
)
from ._adopt import check_groups, from_group_view
from ._binding import Binding, Root, check_device_type
from ._to_torch import to_torch

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

__all__ = ["DeviceMesh", "current_mesh", "over"]

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


class DeviceMesh(Generic[G]):
    """A :class:`~mesh.MeshView` bound to a :class:`Backend`, with torch's DeviceMesh surface.

    Made by :func:`init_device_mesh`, :func:`bind`, the torch-style constructor
    ``DeviceMesh(device_type, mesh, mesh_dim_names=...)`` (an explicit rank tensor, bound
    to the process's backend for ``device_type``) or :meth:`from_group`.  A mesh is one
    value, its :class:`Binding` (view, backend, each dim's options, device type), plus
    memos: groups are created lazily by the backend, the first time a dim's group is
    asked for, and shared between meshes that reach the same groups.  Slicing,
    ``_flatten``, ``_unflatten`` and ``_concatenate`` return new meshes over the same
    backend; per-dim options (``backend_override``) are kept by dim name.

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

    __slots__ = ("__weakref__", "_binding", "_coordinate", "_groups", "_index", "_root",
                 "_slices")

    _binding: Binding[G]
    _root: Root
    _coordinate: tuple[int, ...] | None
    _index: dict[Any, int]
    _groups: dict[Any, G]
    _slices: dict[Any, DeviceMesh[G]]

    def __new__(cls, device_type: str, mesh: Any, *,
                mesh_dim_names: Sequence[str] | None = None,
                backend_override: Mapping[Any, Override] | None = None,
                backend: Backend[G] | None = None) -> DeviceMesh[G]:
        """torch's constructor: a mesh over the explicit rank tensor ``mesh``, bound to
        ``backend`` or to the process's backend for ``device_type``.

        The whole mesh is made here, where its class is chosen (see :meth:`_trusted`).
        """
        check_device_type(device_type)
        names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
        return over(MeshView.from_ranks(mesh, names), backend, device_type, backend_override,
                    named=names is not None)

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
        """The signature of torch's constructor; the mesh is complete after ``__new__``."""

    @classmethod
    def _trusted(cls, binding: Binding[G], root: Root | None = None) -> DeviceMesh[G]:
        """The mesh of ``binding``, already known valid (no checks: a binding is valid by
        construction), of ``root``, else a root of its own: torch's ``DeviceMesh`` too
        where the backend's groups are torch process groups (the ``torch_facade`` plug).
        The one place a mesh is made and its slots set."""
        kind: type[DeviceMesh[G]] = plugged("torch_facade")() \
            if binding.backend.torch_groups else DeviceMesh
        if getattr(binding.backend, "reads", None) is not None:  # check_spmd's automatic classes
            kind = _reading(kind)
        mesh: DeviceMesh[G] = object.__new__(kind)
        view, n = binding.view, binding.view.ndim
        mesh._binding = binding
        mesh._root = Root(mesh) if root is None else root
        mesh._coordinate = view.coordinate(binding.backend.rank)
        mesh._index = {**{i: i for i in range(n)}, **{i - n: i for i in range(n)}}
        if binding.named:
            mesh._index.update({name: i for i, name in enumerate(view.names)})
        mesh._groups = {}
        mesh._slices = {}
        return mesh

    # ---- what the mesh is ----------------------------------------------------------------
    @property
    def binding(self) -> Binding[G]:
        """The mesh as one value: view, backend, each dim's options, device type."""
        return self._binding

    @property
    def view(self) -> MeshView:
        """The mesh as a :class:`~mesh.MeshView` (a value: layout, names, universe)."""
        return self._binding.view

    @property
    def backend(self) -> Backend[G]:
        """The backend that creates this mesh's groups."""
        return self._binding.backend

    @property
    def device_type(self) -> str:
        """The device type: ``"cpu"``, ``"cuda"`` ..."""
        return self._binding.device_type

    @property
    def options(self) -> Mapping[str, GroupOptions]:
        """Each dim's group options, by dim name."""
        return self._binding.by_name

    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        """The dim names, or None for a mesh made without names (as torch)."""
        return self._binding.dim_names

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self._binding.view.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return self._binding.view.shape

    def size(self, mesh_dim: Dim | None = None) -> int:
        """The size of ``mesh_dim`` (see :meth:`get_group`), or the number of ranks in this
        mesh when None."""
        if mesh_dim is None:
            return self._binding.view.size()
        owner, k = self._resolve(mesh_dim, "size")
        return owner._binding.view.size(k)

    def get_rank(self) -> int:
        """This process's global rank."""
        return self._binding.backend.rank

    def get_coordinate(self) -> tuple[int, ...] | None:
        """This process's coordinate in the mesh, or None if it is not in the universe."""
        return self._coordinate

    # ---- the root: the mesh the program made, as torch keeps it -------------------------------
    @property
    def _root_mesh(self) -> DeviceMesh[G] | None:
        """torch's ``_root_mesh``: the mesh the program made that this one derives from
        (by slicing, ``_flatten``, ``_unflatten`` or ``_concatenate``), None for that
        mesh itself."""
        root: DeviceMesh[G] = self._root.mesh
        return None if root is self else root

    def _get_root_mesh(self) -> DeviceMesh[G]:
        """torch's ``_get_root_mesh()``: the mesh the program made (``init_device_mesh``,
        the constructor, ``from_group``, ``rebind``) that this one derives from, or this
        mesh if it is one.

        >>> from backend import FakeBackend, init_device_mesh
        >>> mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"),
        ...                         backend=FakeBackend(8, rank=0))
        >>> flat = mesh["dp", "cp"]._flatten("dp_cp")
        >>> mesh["tp"]._get_root_mesh() is mesh, flat._get_root_mesh() is mesh
        (True, True)
        >>> list(mesh._flatten_mapping), mesh._flatten_mapping["dp_cp"] is flat
        (['dp_cp'], True)
        """
        root = self._root_mesh
        return self if root is None else root

    @property
    def _flatten_mapping(self) -> dict[str, DeviceMesh[G]]:
        """torch's ``_flatten_mapping``: on the root mesh, the one-dim meshes ``_flatten``
        made from it or anything derived from it, by name; empty on the others (as
        torch's)."""
        return self._root.flattened if self._root.mesh is self else {}

    # ---- dims: the one resolver --------------------------------------------------------------
    def _resolve(self, mesh_dim: Any, what: str) -> tuple[DeviceMesh[G], int]:
        """The mesh holding ``mesh_dim`` and the dim's index there: this mesh, for one of its
        dims (a name, an index, or None on a one-dim mesh), or the one-dim mesh ``_flatten``
        made under that name from this mesh's root.  Every dim argument goes through here."""
        dim = self._one_dim(mesh_dim, what)
        if type(dim) in _PLAIN and dim in self._index:
            return self, self._index[dim]
        if isinstance(dim, str) and self._binding.named:
            flat = self._flattened(dim)
            if flat is not None:
                return flat, 0
        return self, self._dim(dim)

    def _dim(self, mesh_dim: Any) -> int:
        """The index of one of this mesh's own dims, or the mesh layer's typed error."""
        if type(mesh_dim) in _PLAIN and mesh_dim in self._index:
            return self._index[mesh_dim]
        if isinstance(mesh_dim, str) and not self._binding.named:
            raise UnknownDimError(f"this mesh has no mesh_dim_names, so it has no dim "
                                  f"{mesh_dim!r}; use an index in [0, {self.ndim})")
        return self._binding.view.index(mesh_dim)  # raises the typed error naming the dim

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
        owner, k = self._resolve(mesh_dim, "get_group")
        b = owner._binding
        group = b.backend.get_group(b.view, k, b.options[k])
        if not self._groups:  # a loss of ranks makes the backend forget this memo
            self.backend.universe(self.view.ranks).memos.add(self)
        self._groups[mesh_dim] = group  # a hashable key: _resolve checked it
        self._note(group)
        return group

    def _note(self, group: G) -> None:
        """A group this mesh was given (a torch mesh's root registers it by name)."""

    def forget_groups(self) -> None:
        """Drop the groups this mesh memoized (the backend ended some: ranks were lost);
        the next request asks the backend again, which refuses an ended group."""
        self._groups.clear()

    def abort(self) -> None:
        """End this root mesh's groups at once, never waiting on a peer: torch 2.15's
        ``DeviceMesh.abort()``, for a job whose peer died mid-collective.

        The groups of every dim of this mesh, and of the meshes ``_flatten`` made from it,
        that the backend holds are aborted where it can (NCCL) and destroyed locally
        otherwise (Gloo), then forgotten by the backend and by every mesh: a later request
        creates a fresh group, and ``shutdown()`` does not end them twice.  A group that was
        never created stays uncreated (torch's inherited ``abort`` would create a lazy
        mesh's groups first, which on a job with a dead peer hangs).  Groups are shared per
        family, so another mesh over the same groups loses them too.  Like torch's, only on
        a root mesh (the one the program made).

        >>> from backend import FakeBackend, init_device_mesh
        >>> fb = FakeBackend(world_size=4, rank=0)
        >>> mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=fb)
        >>> _ = mesh.get_group("tp")
        >>> mesh.abort()
        >>> len(fb.created)   # the tp group ended; dp was never created, and still is not
        0
        """
        if self._root_mesh is not None:
            raise BackendConfigError(
                f"abort() is not supported on a submesh ({self!r}): call it on the root "
                "mesh, mesh._get_root_mesh().abort()")
        with self._root.lock:
            meshes = [self, *self._root.flattened.values()]
        for m in meshes:
            b = m._binding
            self.backend.abort_groups(b.view, b.options)
        for universe_mesh in meshes:
            universe_mesh.forget_groups()

    def get_all_groups(self) -> list[G]:
        """This process's group along every dim, in dim order."""
        return [self.get_group(i) for i in range(self.ndim)]

    def get_local_rank(self, mesh_dim: Dim | None = None) -> int:
        """This process's index in its group along ``mesh_dim`` (its coordinate there)."""
        if type(mesh_dim) in _PLAIN:
            try:
                return self._coordinate[self._index[mesh_dim]]  # type: ignore[index]  # None: caught
            except (KeyError, TypeError):
                pass
        _, k, coordinate = self._local(mesh_dim)
        return coordinate[k]

    def _local(self, mesh_dim: Dim | None) -> tuple[DeviceMesh[G], int, tuple[int, ...]]:
        """The mesh and dim ``mesh_dim`` names and this rank's coordinate there (a rank that
        is not a member is refused)."""
        owner, k = self._resolve(mesh_dim, "get_local_rank")
        if owner._coordinate is None:
            raise NotAMemberError(f"rank {self.get_rank()} is not in {owner!r}; it has no "
                                 "local rank there")
        return owner, k, owner._coordinate

    def _get_all_submeshes(self, mesh_dim_name: str) -> list[DeviceMesh[G]]:
        """Every group along ``mesh_dim_name`` as a 1-D mesh over its own ranks (torch's
        private ``_get_all_submeshes``; lists all the universe's ranks)."""
        k = self._dim(mesh_dim_name)
        name, options = self.view.names[k], self._binding.options[k]
        return [self._with(MeshView.from_ranks(list(g), (name,)), {name: options})
                for g in self.view.groups(k)]

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

        view, rank = self.view, self.get_rank()
        if self._coordinate is None:
            if view.num_instances != 1:
                raise NotAMemberError(
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
    def _with(self, view: MeshView, options: Mapping[str, GroupOptions]) -> DeviceMesh[G]:
        """A mesh of this root over ``view`` (what every transform returns)."""
        return DeviceMesh._trusted(self._binding.over(view, options), self._root)

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
        if not self._binding.named:
            raise BackendConfigError(f"Cannot slice a DeviceMesh without mesh_dim_names! "
                                     f"({self!r}, key {show(key)})")
        names = [key] if isinstance(key, str) else key
        if isinstance(names, tuple) and names == self.view.names:
            return self
        if not isinstance(names, (tuple, list)):
            return self._select(names)  # the mesh layer's typed error for the key
        names = ordered(names, "the selected dims")  # a subclass's items, read once and checked
        owners = [self._owner(name) for name in names]
        if all(owner is self for owner in owners):
            return self._select(list(names))
        parts = [self._select([n]) if owner is self else owner
                 for n, owner in zip(names, owners)]
        return parts[0] if len(parts) == 1 else DeviceMesh._concatenate(parts)

    def _owner(self, name: Any) -> DeviceMesh[G]:
        """The mesh holding the selected dim ``name``: this one, or a flattened one."""
        if not isinstance(name, str) or name in self.view.names:
            return self  # selecting it reports a bad key
        return self._resolve(name, "slicing")[0]

    def _select(self, names: Any) -> DeviceMesh[G]:
        sub = self.view[names]
        return self._with(sub, self.options)

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
        if not self._binding.named:
            raise BackendConfigError(f"Cannot flatten a DeviceMesh without mesh_dim_names! "
                                     f"({self!r})")
        idx = tuple(range(self.ndim)) if dims is None else tuple(
            self._dim(d) for d in ordered(dims, "dims"))
        names = self.view.names
        name = "_".join(names[i] for i in idx) if mesh_dim_name is None else mesh_dim_name
        if self.ndim == 1 and name == names[0] and backend_override is None:
            return self
        if name in names or name in self._root.names:
            raise BackendConfigError(
                f"{name} already exists for submesh of the {self!r}: the dim names are "
                f"{names!r} (and the mesh it was sliced from has {self._root.names!r}); "
                "please specify another valid mesh_dim_name")
        merged = self.view.flatten(idx, name)  # checks the name: the mesh layer's typed error
        opts = self._binding.by_name
        opts[name] = self._merged_options([names[i] for i in idx], backend_override)
        return self._remember(self._with(merged, opts), name)

    _flatten = flatten

    def _merged_options(self, names: list[str], override: Override | None) -> GroupOptions:
        if override is not None:
            return as_options(override)
        found = {self.options[n] for n in names}
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
            elif not _same_flattened(known, one):
                raise BackendConfigError(
                    f"Flatten mesh with mesh_dim_name {name} has been created before, please "
                    f"specify another valid mesh_dim_name (it is {known!r} with layout "
                    f"{known.view.dim_layout(0)}; this one would be {one.view.dim_layout(0)})")
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
        split = self.view.unflatten(k, mesh_sizes, mesh_dim_names)
        new = split.names[k:k + split.ndim - self.ndim + 1]
        given = normalize_overrides(new, backend_override)
        opts = self._binding.by_name
        inherited = self._binding.options[k]
        opts.update({n: given.get(n, inherited) for n in new})
        return self._with(split, opts)

    _unflatten = unflatten

    @staticmethod
    def _concatenate(device_mesh_list: Sequence[DeviceMesh[G]]) -> DeviceMesh[G]:
        """Join the dims of meshes of one universe and backend (torch's ``_concatenate``).

        Each dim keeps its options; overlapping dims raise ``OverlapError`` (a
        ``RuntimeError`` as in torch).
        """
        meshes: list[DeviceMesh[G]] = list(ordered(device_mesh_list, "device_mesh_list"))
        if not meshes or not all(isinstance(m, DeviceMesh) for m in meshes):
            raise BackendConfigError(f"_concatenate takes a non-empty list of DeviceMeshes, got "
                                     f"{show(device_mesh_list)}")
        first = meshes[0]
        for m in meshes[1:]:
            if m.backend is not first.backend or m.device_type != first.device_type:
                raise BackendConfigError(
                    f"Cannot concatenate DeviceMeshes of different backends or device types: "
                    f"{m!r} and {first!r}")
        view = concatenate([m.view for m in meshes])
        return first._with(view, {n: o for m in meshes for n, o in m.options.items()})

    @staticmethod
    def from_group(group: Any, device_type: str, mesh: Any = None, *,
                   mesh_dim_names: Sequence[str] | None = None,
                   backend: Backend[Any] | None = None) -> DeviceMesh[Any]:
        """A mesh over existing groups (torch's ``DeviceMesh.from_group``).

        One group: a 1-D mesh of its ranks (``mesh``, if given, must list them).  A list
        of groups: ``mesh`` (a rank tensor with one dim per group) and
        ``mesh_dim_names`` are required, and each group must hold this rank's group
        along its dim.  The groups are adopted by the backend: asking for those dims
        returns them, and meshes reaching the same families share them.  They stay the
        caller's: the backend's ``shutdown()`` does not destroy them.
        """
        check_device_type(device_type)
        names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
        view, groups = from_group_view(group, mesh, names)
        result = over(view, backend, device_type, None, named=names is not None)
        if result._coordinate is not None:
            check_groups(view, result.get_rank(), groups)
            for k, g in enumerate(groups):
                result.backend.adopt(view, k, _DEFAULT, g)
        return result

    def rebind(self, view: MeshView,
               backend_override: Mapping[Any, Override] | None = None) -> DeviceMesh[G]:
        """The mesh that continues after ranks were lost: ``view`` (e.g. from
        :func:`mesh.survive`, :func:`mesh.drop` or :func:`mesh.substitute`) bound to this
        mesh's backend and device type, a root of its own.

        The ranks of this mesh's universe that ``view``'s universe lacks are lost (failed,
        or left out): the backend ends every group holding one (aborts them on NCCL, never
        waiting on a dead peer) and keeps the others, which serve any later request for a
        group with the same members and options, so intact communicators are not created
        again.  New groups are created lazily among the survivors, with the order-safe
        creation; but where the backend can (Gloo on torch >= 2.14), a broken group whose
        survivors, in its order, are a group of ``view`` with the same options (a dim shrunk
        by dropping a member) is reconfigured in place and serves that request
        (``backend.reformed`` says what became of each broken group, and why not in place).
        Every survivor must rebind before asking for new groups.  Dims keep
        their options by name; ``backend_override`` sets others.  The store must outlive
        the lost ranks (torchrun's agent store, or an external one), not live on one.

        Cost: a view whose universe does not fit the backend's world is refused first, in
        O(1).  Over identity universes (``RankMap.identity``, the regular case) the lost
        ranks are found by arithmetic, so rebind costs O(changed ranks + kept groups):
        the ranks lost now and before, plus, per group the backend holds, O(min(its
        size, lost ranks)) (:meth:`~backend.FakeBackend.retire`); nothing is O(universe).
        An explicit universe (what :func:`mesh.drop`, :func:`mesh.substitute` and
        :func:`mesh.survive` return) is read once: O(its size), what building it cost.
        """
        if not isinstance(view, MeshView):
            raise BackendConfigError(f"rebind takes a mesh.MeshView, got {show(view)}")
        backend = self.backend
        if view.ranks.max_rank >= backend.world_size:  # before anything reads the universe
            raise BackendConfigError(
                f"rebind: a universe reaching rank {view.ranks.max_rank:,} ({view.ranks!r}) "
                f"does not fit the {backend.world_size:,} ranks of this mesh's backend")
        _holds_no_lost(view, backend.lost)
        goes_on = view.ranks.offset_of(self.get_rank()) is not None
        among: Sequence[int] = _ascending(view.ranks) if goes_on else []
        kept = {n: o for n, o in self.options.items() if n in view.names}
        given = normalize_overrides(view.names, backend_override)
        options = {**kept, **given}
        onward = Onward(view, tuple(as_options(options.get(n)) for n in view.names))
        backend.retire(_lost(self.view.ranks, view.ranks) - {self.get_rank()}, among=among,
                       onward=onward)
        return over(view, self.backend, self.device_type, options, named=True)

    # ---- torch interop -------------------------------------------------------------------
    def to_torch(self) -> TorchDeviceMesh:
        """A real ``torch.distributed.device_mesh.DeviceMesh`` over this mesh's groups.

        Its root (``_get_root_mesh()``) is the conversion of this mesh's root, the mesh
        the program made, so separately converted slices of one root compose as torch
        expects (``_concatenate``, TP on ``mesh["tp"].to_torch()`` with FSDP2 on
        ``mesh["dp"].to_torch()``), and a converted ``_flatten`` is listed in that
        root's ``_flatten_mapping``.  Memoized; creates (or reuses) this mesh's groups,
        and its root's, as torch process groups.
        """
        return to_torch(self)

    def __enter__(self) -> DeviceMesh[G]:
        """Make this the current mesh (per :mod:`contextvars` context) and, where the
        backend's groups are torch process groups, enter its torch mesh too, so DTensor
        calls without an explicit mesh find it.  (A :class:`FakeBackend` mesh stays
        torch-free; use :class:`TorchFakeBackend` or :meth:`to_torch` for DTensor.)"""
        if self.backend.torch_groups:
            self.to_torch().__enter__()
        _current.set((*_current.get(), self))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _current.set(_current.get()[:-1])
        if self.backend.torch_groups:
            self.to_torch().__exit__(exc_type, exc, tb)

    # ---- values: equality, pickling, repr (from the binding) --------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceMesh):
            return NotImplemented
        return self._binding.mesh_key == other._binding.mesh_key

    def __hash__(self) -> int:
        return hash(self._binding.mesh_key)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the binding's fields but the backend, with its root.

        Unpickling rebinds to this process's backend for the device type (see
        ``backend._core._registry``); unpickled and copied meshes share its groups.  A
        mesh derived from a root carries that root (pickled once per pickle), and a root
        carries the meshes ``_flatten`` made from it, so the root and its flattened dims
        are found again after loading, as torch's pickles keep them.
        """
        root = self._root.mesh
        if root is not self:
            return (DeviceMesh._unpickled, (_fields(self), root))
        flattened = {name: _fields(flat) for name, flat in self._root.flattened.items()}
        return (DeviceMesh._unpickled, (_fields(self), None, flattened))

    @classmethod
    def _unpickled(cls, fields: dict[str, Any], root: DeviceMesh[Any] | None = None,
                   flattened: Mapping[str, dict[str, Any]] | None = None) -> DeviceMesh[Any]:
        """Unpickling: the binding's ``fields`` bound to this process's backend, under ``root``
        (itself unpickled first), or as a root with its ``flattened`` meshes.  A classmethod,
        so a pickle names ``backend.DeviceMesh``, not this file."""
        if root is not None:
            return DeviceMesh._trusted(Binding(backend=root.backend, **fields), root._root)
        backend = _process_backend(fields)
        mesh = DeviceMesh._trusted(Binding(backend=backend, **fields))
        for name, flat in (flattened or {}).items():
            flat_mesh = DeviceMesh._trusted(Binding(backend=backend, **flat), mesh._root)
            mesh._root.flattened[name] = flat_mesh
        return mesh

    def __repr__(self) -> str:
        view = self.view
        dims = f"({', '.join(f'{n}={s}' for n, s in zip(view.names, view.shape))})" \
            if self._binding.named else f"{view.shape}"
        stride = tuple(m.stride for m in view.layout)
        ranks = "" if view.ranks.is_identity else f", ranks={view.ranks!r}"
        return f"DeviceMesh({dims}, '{self.device_type}', stride={stride}{ranks})"

    def render(self, rank: int | None = None, *, width: int = 120) -> str:
        """A text picture of this process's instance, its rank and groups marked (any
        ndim; lines at most ``width`` columns; see :func:`mesh.render`)."""
        return render(self.view, self.get_rank() if rank is None else rank, width=width)


def _holds_no_lost(view: MeshView, lost: frozenset[int]) -> None:
    """Refuse a view that holds a rank already lost (it cannot go on with a dead rank):
    O(len(lost)) look-ups."""
    size, explicit = view.ranks.size, view.ranks.ranks is not None
    back = sorted(r for r in lost if (view.ranks.offset_of(r) is not None if explicit
                                      else r < size))
    if back:
        raise RankLostError(f"{view!r} holds ranks already lost: {back[:8]}"
                            f"{' ...' if len(back) > 8 else ''}; rebind to a view without them "
                            "(mesh.drop, mesh.substitute or mesh.survive)")


def _lost(old: RankMap, new: RankMap) -> frozenset[int]:
    """The ranks of ``old`` that ``new`` lacks: O(ranks lost) between identity universes,
    else O(size of the explicit ones) (each read once)."""
    if new.ranks is None:  # new is [0, n): what old holds at or past n is lost
        if old.ranks is None:
            return frozenset(range(new.size, old.size))
        return frozenset([r for r in old.ranks if r >= new.size])
    if old.ranks is not None:
        return frozenset([r for r in old.ranks if new.offset_of(r) is None])
    held = sorted(r for r in new.ranks if r < old.size)  # old is [0, n): the gaps are lost
    gaps: list[int] = []
    previous = -1
    for r in [*held, old.size]:
        gaps.extend(range(previous + 1, r))
        previous = r
    return frozenset(gaps)


def _ascending(ranks: RankMap) -> Sequence[int]:
    """A universe's ranks ascending: a ``range`` for an identity universe (no listing)."""
    return range(ranks.size) if ranks.ranks is None else sorted(ranks.ranks)


def _same_flattened(a: DeviceMesh[Any], b: DeviceMesh[Any]) -> bool:
    """Whether two one-dim flattened meshes are the same dim (layout, options, device type)."""
    return a.view.dim_layout(0) == b.view.dim_layout(0) and \
        a.binding.options == b.binding.options and a.device_type == b.device_type


def over(view: MeshView, backend: Backend[G] | None, device_type: str,
         backend_override: Mapping[Any, Override] | None, *, named: bool) -> DeviceMesh[G]:
    """A new root mesh over ``view``, bound to ``backend`` (the process's backend for
    ``device_type`` if None), which becomes the process's backend for ``device_type``:
    what every entry point (constructor, ``init_device_mesh``, ``bind``, ``from_group``)
    makes."""
    b = process_backend(device_type) if backend is None else _a_backend(backend)
    binding = Binding.of(view, b, device_type, dim_options(view.names, backend_override),
                         named=named)
    mesh = DeviceMesh._trusted(binding)
    register(device_type, b)
    return mesh


def _a_backend(backend: object) -> Any:
    """``backend`` if it is a backend instance (the :class:`Backend` protocol), else a typed
    error naming it."""
    if isinstance(backend, type) or not isinstance(backend, Backend):
        raise BackendConfigError(
            f"backend must be a backend instance such as FakeBackend(world_size, rank), "
            f"GlooBackend.from_env() or NcclBackend.from_env(), got {show(backend)}")
    return backend


def _fields(mesh: DeviceMesh[Any]) -> dict[str, Any]:
    """The binding's fields but the backend: what a pickle carries."""
    return attrs.asdict(mesh.binding, recurse=False,
                        filter=lambda a, _: a.init and a.name != "backend")


def _rebind(fields: dict[str, Any], root: DeviceMesh[Any] | None = None,
            flattened: Mapping[str, dict[str, Any]] | None = None) -> DeviceMesh[Any]:
    """What the last release's pickles call (they named this module): kept for one release."""
    return DeviceMesh._unpickled(fields, root, flattened)


def _process_backend(fields: dict[str, Any]) -> Backend[Any]:
    """This process's backend for the pickled mesh's device type, or a typed error."""
    device_type = fields["device_type"]
    try:
        backend: Backend[Any] = process_backend(device_type)
    except (UnsupportedTorchError, TorchMissingError):
        raise  # the installed torch is the cause, named as such
    except Exception as e:
        raise BackendConfigError(
            f"unpickling a DeviceMesh ({fields['view']!r}) binds it to this process's backend "
            f"for device type {device_type!r}, and there is none: start one before loading "
            "(GlooBackend.from_env() or NcclBackend.from_env() under torchrun, "
            "TorchFakeBackend(world_size, rank) in a test, or bind any mesh to a FakeBackend "
            "with backend.bind(view, FakeBackend(...))). Starting the default one failed: "
            f"{e}") from e
    return backend


_READING: dict[type, type] = {}


def _reading(kind: type[DeviceMesh[G]]) -> type[DeviceMesh[G]]:
    """``kind`` whose coordinate reads are recorded (check_spmd's automatic classes: the
    backend's ``reads`` answers the program with symbolic ints); a class of its own, so that
    the meshes of a real job pay nothing for it."""
    made = _READING.get(kind)
    if made is None:
        made = _READING[kind] = type(f"Reading{kind.__name__}", (_Reads, kind), {"__slots__": ()})
    return made


class _Reads:
    """The coordinate reads of a mesh whose backend records them (:func:`_reading`)."""

    __slots__ = ()

    def get_coordinate(self: Any) -> tuple[int, ...] | None:
        """This process's coordinate, as the program reads it (symbolic ints)."""
        read: tuple[int, ...] | None = self._binding.backend.reads.coordinate(
            self._binding.view, self._coordinate)
        return read

    def get_local_rank(self: Any, mesh_dim: Dim | None = None) -> int:
        """This process's index along ``mesh_dim``, as the program reads it."""
        owner, k, coordinate = self._local(mesh_dim)
        read: int = self._binding.backend.reads.local(owner._binding.view, k, coordinate[k])
        return read
