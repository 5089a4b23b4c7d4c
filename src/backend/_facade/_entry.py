"""The entry points that make a root mesh from a shape or a view: :func:`init_device_mesh`
(torch's) and :func:`bind` (ours), and the plan's expectations of the machine both check
(``expect_intra_host=``, ``expect_intra_domain=``) before the mesh exists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, overload

from layout import show
from mesh import MeshError, MeshView, Topology, ordered

from .._c10d import discover_topology
from .._core import Backend, BackendConfigError, ExpectationError, Override, process_backend
from ._binding import check_device_type
from ._device_mesh import DeviceMesh, over

__all__ = ["bind", "init_device_mesh"]

G = TypeVar("G")


@overload
def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = ...,
                     backend_override: Mapping[Any, Override] | None = ...,
                     backend: None = ..., topology: Topology | None = ...,
                     expect_intra_host: Sequence[str] = ...,
                     expect_intra_domain: Sequence[str] = ...) -> DeviceMesh[Any]: ...


@overload
def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = ...,
                     backend_override: Mapping[Any, Override] | None = ...,
                     backend: Backend[G], topology: Topology | None = ...,
                     expect_intra_host: Sequence[str] = ...,
                     expect_intra_domain: Sequence[str] = ...) -> DeviceMesh[G]: ...


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = None,
                     backend_override: Mapping[Any, Override] | None = None,
                     backend: Backend[Any] | None = None, topology: Topology | None = None,
                     expect_intra_host: Sequence[str] = (),
                     expect_intra_domain: Sequence[str] = ()) -> DeviceMesh[Any]:
    """A row-major mesh of ``mesh_shape`` over the first ``prod(mesh_shape)`` ranks, like
    torch's ``init_device_mesh``.  No group is created here.

    With no ``backend``: this process's backend for ``device_type`` (over an already
    initialized torch.distributed default group, else NCCL for ``"cuda"`` and Gloo for
    ``"cpu"`` initialized from torchrun's environment).  Errors are those torch raises
    (``RuntimeError`` for duplicate names, a names/shape mismatch, a device with an
    index, a mesh bigger than the world).  ``expect_intra_host`` and
    ``expect_intra_domain`` check the plan against the machine first, as :func:`bind` does.
    """
    check_device_type(device_type)
    names = None if mesh_dim_names is None else ordered(mesh_dim_names, "mesh_dim_names")
    shape = ordered(mesh_shape, "mesh_shape")
    if names is not None and len(names) != len(shape):
        raise BackendConfigError(
            f"mesh_shape and mesh_dim_names should have same length! Found "
            f"len(mesh_dim_names): {len(names)} and len(mesh_shape): {len(shape)}")
    view = MeshView.from_shape(shape, names)
    backend = _expect(view, backend, device_type, topology, expect_intra_host,
                      expect_intra_domain)
    return over(view, backend, device_type, backend_override, named=names is not None)


@overload
def bind(view: MeshView, backend: None = ..., *, device_type: str | None = ...,
         backend_override: Mapping[Any, Override] | None = ...,
         topology: Topology | None = ..., expect_intra_host: Sequence[str] = ...,
         expect_intra_domain: Sequence[str] = ...) -> DeviceMesh[Any]: ...


@overload
def bind(view: MeshView, backend: Backend[G], *, device_type: str | None = ...,
         backend_override: Mapping[Any, Override] | None = ...,
         topology: Topology | None = ..., expect_intra_host: Sequence[str] = ...,
         expect_intra_domain: Sequence[str] = ...) -> DeviceMesh[G]: ...


def bind(view: MeshView, backend: Backend[Any] | None = None, *, device_type: str | None = None,
         backend_override: Mapping[Any, Override] | None = None,
         topology: Topology | None = None, expect_intra_host: Sequence[str] = (),
         expect_intra_domain: Sequence[str] = ()) -> DeviceMesh[Any]:
    """``view`` bound to ``backend`` as a :class:`DeviceMesh`; creates no group.

    ``backend`` defaults to the process's backend for ``device_type``; ``device_type``
    to the backend's default (``"cpu"``, ``"cuda"`` for NCCL).  The backend becomes the
    process's backend for the device type (what ``DeviceMesh(...)`` and unpickling bind
    to).  The view's dim names are the mesh's; ``backend_override`` as in
    :func:`init_device_mesh`.

    ``expect_intra_host`` (dim names whose every group must stay inside one host) and
    ``expect_intra_domain`` (inside one fast domain) are checked against ``topology``, or,
    without one, the machine :func:`~backend.discover_topology` gathers (collective: every
    rank binds with the same expectations; gathered once per backend): the first group that
    breaks one raises :class:`~backend.ExpectationError` naming it and its hosts, on every
    rank, before any group is created.

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
    backend = _expect(view, backend, device_type, topology, expect_intra_host,
                      expect_intra_domain)
    return over(view, backend, device_type, backend_override, named=True)


def _expect(view: MeshView, backend: Backend[Any] | None, device_type: str,
            topology: Topology | None, intra_host: Sequence[str],
            intra_domain: Sequence[str]) -> Backend[Any] | None:
    """Check the plan's expectations of the machine (none: nothing to do); the backend,
    resolved when the machine had to be discovered through it."""
    host = _dims(view, intra_host, "expect_intra_host")
    domain = _dims(view, intra_domain, "expect_intra_domain")
    if topology is not None and not isinstance(topology, Topology):
        raise BackendConfigError(f"topology must be a mesh.Topology or None, got "
                                 f"{show(topology)}")
    world = None if backend is None else getattr(backend, "world_size", None)
    if topology is not None and type(world) is int and topology.world_size != world:
        raise BackendConfigError(f"topology= is a machine of {topology.world_size:,} ranks "
                                 f"({topology!r}), but the job's world is {world:,} ranks: "
                                 "give the machine this job runs on")
    if not host and not domain:
        return backend
    if topology is None:
        backend = process_backend(device_type) if backend is None else backend
        topology = discover_topology(backend)
    for level, dims in (("host", host), ("domain", domain)):
        for dim in dims:
            try:
                group = topology.first_crossing(view, dim, level=level)
            except MeshError as e:  # the view reaches past the machine, a huge misfit
                raise BackendConfigError(f"expect_intra_{level}: cannot check dim {dim!r} on "
                                         f"{topology!r}: {e}") from None
            if group is not None:
                raise _broken(view, topology, level, dims, dim, group)
    return backend


def _dims(view: MeshView, dims: object, what: str) -> tuple[str, ...]:
    """The dim names an expectation lists: an ordered sequence of the view's names."""
    if isinstance(dims, str):
        raise BackendConfigError(f"{what} takes a sequence of dim names such as ('tp',), got "
                                 f"the str {dims!r}")
    names = ordered(dims, what)
    for d in names:
        if not isinstance(d, str) or d not in view.names:
            raise BackendConfigError(f"{what} names {show(d)}, not a dim of the mesh; its dims "
                                     f"are {list(view.names)!r}")
    return tuple(str(d) for d in names)


def _broken(view: MeshView, topology: Topology, level: str, dims: tuple[str, ...], dim: str,
            group: tuple[int, ...]) -> ExpectationError:
    """The error naming the first group of ``dim`` that leaves one host (domain)."""
    hosts = tuple(dict.fromkeys(topology.host_name(topology.host(r)) for r in group))
    domains = tuple(dict.fromkeys(topology.domain(r) for r in group))
    shown = group if len(group) <= 16 else (*group[:14], "…", group[-1])
    where = f"hosts {', '.join(hosts[:8])}{', …' if len(hosts) > 8 else ''}"
    if level == "domain":
        where = f"fast domains {', '.join(map(str, domains[:8]))} (on {where})"
    return ExpectationError(
        f"expect_intra_{level}={dims!r} does not hold on this machine ({topology!r}): the "
        f"{dim!r} group {shown} spans {where}; place the mesh for this machine "
        "(mesh.place) or change the expectation", level=level, dim=dim, group=group,
        spans=hosts if level == "host" else domains)
