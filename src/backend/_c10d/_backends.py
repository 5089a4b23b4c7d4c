"""Backends over ``torch.distributed`` c10d: Gloo, NCCL, torch's fake backend, or whatever
the default group already runs (shared code lives here, once)."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist

from mesh import Dim, MeshView

from .._core import (
    BackendConfigError,
    CachedBackend,
    CreationRecord,
    FakeBackend,
    GroupOptions,
    Onward,
    Reformed,
    as_options,
    register,
)
from ._loss import agreed_failures, diagnose, end_groups
from ._rendezvous import Rendezvous
from ._spec import GroupSpec
from ._torch_groups import create_torch_group, destroy_groups, start_fake_world
from ._torch_private import get_default_group, get_default_store

__all__ = ["C10dBackend", "GlooBackend", "NcclBackend", "TorchFakeBackend", "process_default",
           "torch_fake"]

log = logging.getLogger(__name__)

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

B = TypeVar("B", bound="C10dBackend")


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise BackendConfigError(
            f"environment variable {name} is not set; launch with torchrun (which sets "
            f"{', '.join(_ENV)}) or initialize torch.distributed yourself")
    try:
        return int(raw)
    except ValueError:
        raise BackendConfigError(
            f"environment variable {name} must be an int, got {raw!r}") from None


class C10dBackend(CachedBackend[Any]):
    """Groups are ``torch.distributed`` process groups over the initialized default group.

    Each dim's group is created lazily with ``new_group(ranks, sort_ranks=False,
    use_local_synchronization=True)`` (only members take part), unless the
    dim is the whole world in natural order with default options (then the
    default group is reused), or NCCL can split (see :class:`~backend.Plan`).
    Groups use this backend's c10d backend (the default group's, for this base
    class) and ``timeout`` unless a dim's options say otherwise.

    Group names and creation (see :mod:`backend._c10d._rendezvous`): each group is named
    from its family and members (:class:`~backend.GroupSpec`), the same on every process
    whatever else each one created, and its members first meet at a barrier in the
    default store (a constant number of store calls per member, whatever the group's
    size).  So a late,
    failed or absent rank on one group never breaks a later group among ranks that are
    all present for it, ranks outside a view need not ask for its groups, and a
    creation that cannot complete fails on every member within its timeout with
    :class:`~backend.MembersMissingError` saying who is missing and why.  While a rank
    creates a group it beats every ``heartbeat`` seconds (longer in worlds over 2,000
    ranks; None turns beating off), and :meth:`diagnose` beats while it watches, so the
    members of a group that stopped answering can be named; nothing is sent while
    nothing is being created.
    """

    name = "c10d"
    torch_backend: ClassVar[str] = ""
    torch_groups = True
    meets: ClassVar[bool] = True
    """Whether members meet at the store barrier before each creation (not for the fake
    backend, where one process pretends to be every rank)."""
    device_types: ClassVar[tuple[str, ...]] = ("cpu",)
    """The device types this backend becomes the process's backend for when it is made."""

    def __init__(self, *, timeout: timedelta | None = None,
                 heartbeat: float | None = 1.0) -> None:
        if not dist.is_initialized():
            raise BackendConfigError(
                f"{type(self).__name__}() needs an initialized torch.distributed default group; "
                f"use {type(self).__name__}.from_env() under torchrun")
        super().__init__(dist.get_world_size(), dist.get_rank())
        self._default_group: Any = dist.group.WORLD
        self._c10d = self.torch_backend or str(dist.get_backend())
        self._owns_default = False
        self._timeout = GroupOptions(timeout=timeout).timeout  # validated
        self._rendezvous: Rendezvous | None = None
        self._failed: set[str] = set()  # groups a collective failed on here (diagnose)
        self._shrunk_groups: list[Any] = []
        if self.meets and self.world_size > 1 and self._c10d != "fake":  # fake: no peers
            rz = Rendezvous(get_default_store(), self.rank, world_size=self.world_size,
                            heartbeat=heartbeat)
            rz.claim()  # refuses a store that holds an earlier job's keys in this namespace
            rz.warm(2)  # the main thread's and its waiting helper's
            self._rendezvous = rz
        _LIVE.add(self)
        for device_type in self.device_types:
            register(device_type, self)

    @classmethod
    def from_env(cls: type[B], *, timeout: timedelta | None = None,
                 heartbeat: float | None = 1.0) -> B:
        """Read torchrun's environment and initialize the default group if needed.

        ``timeout`` applies to the default group (when this call creates it) and
        to every group this backend creates whose options set no timeout.
        """
        if dist.is_initialized():
            return cls(timeout=timeout, heartbeat=heartbeat)
        rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                _env_int(name)  # raises the explanatory error
        kwargs: dict[str, Any] = cls._init_kwargs()
        if timeout is not None:
            kwargs["timeout"] = timeout
        dist.init_process_group(cls.torch_backend or None, init_method="env://", rank=rank,
                                world_size=world, **kwargs)
        backend = cls(timeout=timeout, heartbeat=heartbeat)
        backend._owns_default = True
        return backend

    @classmethod
    def _init_kwargs(cls) -> dict[str, Any]:
        return {}

    @property
    def is_current(self) -> bool:
        """Whether torch.distributed's default group is still the one this backend is over."""
        return dist.is_initialized() and dist.group.WORLD is self._default_group

    def _can_split(self) -> bool:
        return False

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> Any:
        spec = GroupSpec.of(view, dim, options, rank=self.rank, world_size=self.world_size,
                            can_split=self._can_split(), default_backend=self._c10d,
                            default_timeout=self._timeout)
        return create_torch_group(spec, self._rendezvous)

    def torch_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """The same as :meth:`get_group`: c10d groups are torch process groups."""
        return self.get_group(view, dim, as_options(options))

    def explain(self, error: BaseException, group: Any) -> BaseException:
        """Deprecated (the name moved in the last release; it goes in the next): use
        :meth:`diagnose`."""
        warnings.warn("C10dBackend.explain(error, group) is deprecated and goes in the next "
                      "release: use C10dBackend.diagnose(error, group)", DeprecationWarning,
                      stacklevel=2)
        return self.diagnose(error, group)

    def diagnose(self, error: BaseException, group: Any) -> BaseException:
        """What a failed collective on ``group`` means: a :class:`~backend.PeerLostError`
        naming the members that do not answer, chained to ``error``; ``error`` itself when
        every member answers (or heartbeats are off).  The group counts as out of step from
        now on: a later :meth:`retire` (``DeviceMesh.rebind``) ends it on every survivor.

        For about two beats this rank beats and watches the other members' beats.  Ranks
        beat only inside a group creation or this call, so the members that answer are
        the ones handling the same failure; a member that exited, hangs, or is not taking
        part in the collective is named.

        >>> # try: dist.all_reduce(t, group=g)
        >>> # except RuntimeError as e: raise backend.diagnose(e, g) from e
        """
        found = diagnose(error, group, rank=self.rank, rendezvous=self._rendezvous)
        self._failed.add(str(group.group_name))  # out of step: a rebind ends it
        return found

    @property
    def default_timeout(self) -> timedelta | None:
        """The timeout this backend gives the groups it creates when a dim sets none (the
        ``timeout`` it was made with); None: torch's default."""
        return self._timeout

    @property
    def owns_world(self) -> bool:
        """Whether this backend started torch.distributed's default group (and ends it)."""
        return self._owns_default

    def shutdown(self) -> None:
        """Destroy every group this backend created, and the default group if it started it.

        Idempotent; returns after a peer died (Gloo groups are destroyed locally); the
        process may then start a new backend.  Groups adopted with ``from_group`` are the
        caller's: forgotten, not destroyed.
        """
        self._end(abort=False)

    def abort(self) -> None:
        """Abort every group this backend created without waiting for peers (NCCL; torch's
        ``_abort_process_group``), then forget them; other c10d backends shut down.

        For a job that must tear down fast after a failure (a hung NCCL collective).
        """
        self._end(abort=self._c10d == "nccl")

    def _failed_groups(self, lost: frozenset[int], among: Sequence[int] | None
                       ) -> frozenset[str]:
        """Every survivor's failed groups, agreed among the ranks that go on
        (:func:`~._loss.agreed_failures`)."""
        mine, self._failed = self._failed, set()
        if among is None:
            among = [r for r in range(self.world_size) if r not in lost | self.lost]
        timeout = self._timeout or dist.distributed_c10d.default_pg_timeout
        return agreed_failures(mine, among, lost=lost, rendezvous=self._rendezvous,
                               timeout=timeout)

    def _end_groups(self, ended: list[CreationRecord], lost: frozenset[int],
                    onward: Onward | None
                    ) -> tuple[list[tuple[tuple[tuple[int, ...], GroupOptions], Any]],
                               tuple[Reformed, ...]]:
        """End them (:func:`~._loss.end_groups`: NCCL aborts, and shrinks a group that only
        lost ranks to its survivors; Gloo on torch >= 2.14 reconfigures in place a group
        whose survivors are a group of the ``onward`` mesh; either then serves their
        request)."""
        timeout = self._timeout or dist.distributed_c10d.default_pg_timeout
        shrunk, reformed = end_groups(ended, lost, rank=self.rank, nccl=self._c10d == "nccl",
                                      onward=onward, rendezvous=self._rendezvous,
                                      timeout=timeout)
        self._shrunk_groups.extend(group for _, group in shrunk)  # ended at shutdown
        return shrunk, reformed

    def _ended_later(self, group: Any) -> bool:
        return any(g is group for g in self._shrunk_groups)

    def _abort(self, groups: list[Any]) -> None:
        """Abort them where c10d can without waiting on peers (NCCL's ``_abort_process_group``);
        destroy them elsewhere (Gloo destroys a group locally, a dead peer or not)."""
        self._shrunk_groups = [g for g in self._shrunk_groups
                               if not any(g is x for x in groups)]  # not ended twice
        destroy_groups(groups, False, abort=self._c10d == "nccl")

    def _end(self, *, abort: bool) -> None:
        """Stop beating, end this backend's groups (and the default group if it started
        it), and drop its references into torch's world (its groups hold the store)."""
        if self._rendezvous is not None:
            self._rendezvous.close()
        shrunk, self._shrunk_groups = self._shrunk_groups, []
        destroy_groups(shrunk + self._cache.clear(), self._owns_default, abort=abort)
        self._owns_default = False
        self._default_group = None
        for universe in list(self._universes.values()):
            universe.forget()


class GlooBackend(C10dBackend):
    """Gloo process groups (CPU); groups are created by their members only."""

    name = "gloo"
    torch_backend = "gloo"


class NcclBackend(C10dBackend):
    """NCCL process groups (CUDA).

    ``from_env`` selects the CUDA device ``LOCAL_RANK`` unless the user already
    chose one, and binds the default group to it (eager init), which lets a
    family of ascending groups be created with one ``split_group`` call.
    """

    name = "nccl"
    torch_backend = "nccl"
    default_device_type = "cuda"
    device_types = ("cuda",)

    @classmethod
    def _init_kwargs(cls) -> dict[str, Any]:
        if not torch.cuda.is_available():
            raise BackendConfigError("NcclBackend needs CUDA, but torch.cuda.is_available() is "
                                     "False; use GlooBackend on CPU")
        if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            torch.cuda.set_device(_env_int("LOCAL_RANK"))
        return {"device_id": torch.device("cuda", torch.cuda.current_device())}

    def _can_split(self) -> bool:
        # a split is collective over the whole world: not once a rank of it is lost
        default = get_default_group()
        return not self.lost and getattr(default, "bound_device_id", None) is not None


class TorchFakeBackend(C10dBackend):
    """Real ``torch.distributed`` groups of torch's fake c10d backend, in one process.

    ``TorchFakeBackend(world_size, rank)`` pretends to be rank ``rank`` of
    ``world_size``: it initializes torch's dry-run world
    (``init_process_group("fake", store=FakeStore(), ...)``) unless one is already
    initialized as that rank, so code under test can call collectives,
    ``dist.get_process_group_ranks``, DTensor and FSDP2 without peers or GPUs.
    Collectives return immediately without moving data.  :meth:`shutdown` destroys
    the groups, and the fake world if this backend started it.

    >>> tb = TorchFakeBackend(8, rank=5)
    >>> from mesh import MeshView
    >>> from backend import bind
    >>> tp = bind(MeshView.from_shape((2, 4), ("dp", "tp")), tb).get_group("tp")
    >>> import torch.distributed as dist
    >>> dist.get_process_group_ranks(tp), tp.rank()
    ([4, 5, 6, 7], 1)
    >>> tb.shutdown()
    """

    name = "torch-fake"
    torch_backend = "fake"
    meets = False
    device_types: ClassVar[tuple[str, ...]] = ("cpu", "cuda")  # the dry run pretends for any

    def __init__(self, world_size: int | None = None, rank: int | None = None, *,
                 timeout: timedelta | None = None) -> None:
        owns = False
        if (world_size, rank) != (None, None) or not dist.is_initialized():
            if type(world_size) is not int or type(rank) is not int or \
                    not 0 <= rank < world_size:
                raise BackendConfigError(
                    "TorchFakeBackend(world_size, rank) needs both, rank in [0, world_size), "
                    f"to start torch's fake world or check the initialized one; got rank "
                    f"{rank!r} of world_size {world_size!r}")
            owns = start_fake_world(world_size, rank, self)
        super().__init__(timeout=timeout, heartbeat=None)
        self._owns_default = owns


class _TorchFakeBehindFake(TorchFakeBackend):
    """The torch fake backend behind a :class:`FakeBackend`'s ``torch_group``: it binds no
    device type, so the FakeBackend stays the process's backend."""

    device_types = ()


def torch_fake(world_size: int, rank: int) -> TorchFakeBackend:
    """A torch fake backend of ``world_size`` and ``rank`` that binds no device type (the
    registry's ``torch_fake`` plug)."""
    return _TorchFakeBehindFake(world_size, rank)


_LIVE: weakref.WeakSet[C10dBackend] = weakref.WeakSet()
"""Every c10d backend of this process, so that a default one reuses the backend (and its
group cache) already made over the current default group instead of making a second."""


def process_default(device_type: str, current: Any) -> Any:
    """The process's default backend for ``device_type`` (the registry's factory).

    With torch.distributed initialized: the c10d backend over its default group
    (``current`` if it is that one, else the one already made, else a new one of the
    default group's c10d backend: Gloo, NCCL, fake, ...), so meshes made after
    ``init_process_group`` use torch's world as torch's DeviceMesh would.  Without
    one: ``current`` if it is not a c10d backend (a bound FakeBackend), else NCCL for
    ``"cuda"`` and Gloo for other device types, initialized from torchrun's environment.
    """
    if dist.is_initialized():  # torch's world, as torch's own DeviceMesh would use it
        if isinstance(current, C10dBackend) and current.is_current:
            return current
        if isinstance(current, FakeBackend) and current.started_torch_world():
            return current  # the fake world its own to_torch() started
        for live in list(_LIVE):
            if live.is_current:
                return live
        known = {"gloo": GlooBackend, "nccl": NcclBackend, "fake": TorchFakeBackend}
        return known.get(str(dist.get_backend()), C10dBackend)()
    if current is not None and not isinstance(current, C10dBackend):
        return current  # e.g. a FakeBackend a mesh was bound to
    if device_type == "cuda":
        return NcclBackend.from_env()
    return GlooBackend.from_env()
