"""Torch process groups: creating one from its :class:`~backend._c10d._spec.GroupSpec` (default,
split, new_group), and destroying a backend's groups."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs

from .._core import BackendConfigError, GroupCreationError, MembersMissingError
from ._rendezvous import Rendezvous
from ._spec import GroupSpec, Plan

__all__ = ["create_torch_group", "destroy_groups", "shrink_group", "start_fake_world"]

log = logging.getLogger(__name__)


def create_torch_group(spec: GroupSpec, rendezvous: Rendezvous | None = None) -> Any:
    """Create this process's torch group for ``spec`` (collective; see :class:`Plan`).

    The group is named :attr:`GroupSpec.name` (the same on every process, whatever else
    each created).  With a ``rendezvous`` its members first meet at the store barrier, so
    a creation that cannot complete fails on every member within its timeout with
    :class:`~backend.MembersMissingError` explaining why; a creation that fails in torch
    after they met names the members that stopped answering.
    """
    import torch.distributed as dist

    if spec.plan is Plan.DEFAULT and spec.backend not in (None, dist.get_backend()):
        spec = attrs.evolve(spec, plan=Plan.NEW_GROUP)
    if spec.plan is Plan.DEFAULT:
        return dist.group.WORLD
    log.debug("creating %s group %s: %s", spec.plan.value, spec.name, spec.describe())
    try:
        if rendezvous is None:
            return _create(spec)
        timeout = spec.timeout or dist.distributed_c10d.default_pg_timeout
        with rendezvous.meet(spec.barrier, spec.barrier_members(), timeout.total_seconds(),
                             dim=spec.dim, desc=spec.describe(), shown=spec.members):
            start = time.monotonic()
            try:
                return _create(spec)
            except Exception as e:
                waited = time.monotonic() - start > timeout.total_seconds() / 2
                raise _after_meeting(spec, rendezvous, e, waited) from e
    except GroupCreationError:
        raise
    except Exception as e:
        raise GroupCreationError(
            f"creating {spec.describe()} ({spec.plan.value}) on rank {spec.rank} failed: "
            f"{e}") from e


def _create(spec: GroupSpec) -> Any:
    import torch.distributed as dist

    desc = spec.options.group_desc or f"mesh_{spec.dim}"  # torch's group_desc
    with _named(spec.name):
        if spec.plan is Plan.SPLIT:
            return dist.split_group(split_ranks=spec.groups(), timeout=spec.timeout,
                                    pg_options=spec.options.pg_options, group_desc=desc,
                                    backend=spec.backend)
        return dist.new_group(list(spec.members), timeout=spec.timeout, backend=spec.backend,
                              pg_options=spec.options.pg_options,
                              use_local_synchronization=True, group_desc=desc,
                              sort_ranks=False)


def _after_meeting(spec: GroupSpec, rendezvous: Rendezvous, error: Exception,
                   waited: bool) -> Exception:
    """Torch's creation failed after the members met.  If it failed after waiting (for
    peers that did not come to torch's own rendezvous), name the members that stopped
    answering (a :class:`~backend.MembersMissingError`); a quick failure is this rank's
    own, and is reported as torch's."""
    members = [r for r in spec.barrier_members() if r != spec.rank]
    try:
        lost = rendezvous.silent(members) if waited and len(members) <= 4096 else {}
    except Exception:  # the store itself is gone (it lives on rank 0)
        lost = {}
    if not lost:
        return GroupCreationError(
            f"rank {spec.rank} could not create {spec.describe()} after its members met at "
            f"the barrier: torch's {spec.plan.value} failed: {type(error).__name__}: {error}")
    who = "; ".join(f"rank {r} " + ("never answered" if s is None else
                                     f"has not answered for {s:.1f} s") for r, s in lost.items())
    return MembersMissingError(
        f"rank {spec.rank} could not create {spec.describe()}: its members met, then {who} "
        "(it likely exited or hung) while torch created the group. Likely cause: a member "
        f"exited or stopped answering. Torch said: {type(error).__name__}: {error}",
        rank=spec.rank, dim=spec.dim, ranks=spec.members, missing=tuple(lost),
        doing={r: "stopped answering while creating the group" for r in lost})


_NAMING = threading.Lock()


@contextlib.contextmanager
def _named(name: str) -> Iterator[None]:
    """Have torch name the group it creates now ``name`` (not its per-process count).

    Torch 2.13 has no argument for it: ``new_group`` and ``split_group`` ask
    ``distributed_c10d._process_group_name``, which is replaced for the call (under a
    lock; torch's group creation is not thread-safe anyway).  A name already taken in
    this process (a second family with the same members and options but other
    ``pg_options``) gets a suffix.
    """
    import torch.distributed.distributed_c10d as c10d

    with _NAMING:
        taken = set(c10d._world.pg_names.values())
        while name in taken:
            name += "+"
        original = c10d._process_group_name

        def ours(ranks: Any, use_hashed_name: bool) -> Any:
            return name if use_hashed_name else original(ranks, use_hashed_name)

        c10d._process_group_name = ours
        try:
            yield
        finally:
            c10d._process_group_name = original


_FAKE_WORLD: list[Any] = []  # a weak reference to the backend that started torch's fake world


def start_fake_world(world_size: int, rank: int, owner: object = None) -> bool:
    """Start torch's fake default group as ``rank`` of ``world_size`` (the dry run) for
    ``owner``, unless torch.distributed is initialized: then it must be that rank of that
    world.  A fake world whose owner is gone (garbage: a test that forgot ``shutdown()``)
    is destroyed and started again; one whose owner lives is an error naming it and
    ``shutdown()``.  Returns whether this call started a world."""
    import gc
    import weakref

    import torch.distributed as dist

    if dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        gc.collect()  # an owner no one holds any more is collected now
        holder = _FAKE_WORLD[0]() if _FAKE_WORLD else None
        if _FAKE_WORLD and holder is None and str(dist.get_backend()) == "fake":
            dist.destroy_process_group()  # a leftover of a backend that is gone
        else:
            by = f" by {holder!r}" if holder is not None else ""
            raise BackendConfigError(
                f"torch.distributed is already initialized{by} as rank {dist.get_rank()} of "
                f"{dist.get_world_size()}, not rank {rank} of {world_size}; call that "
                "backend's shutdown() first (in tests: in a fixture's teardown, see the "
                "README's 'Testing without GPUs')")
    if dist.is_initialized():
        return False
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    _FAKE_WORLD[:] = [weakref.ref(owner) if owner is not None else (lambda: None)]
    return True


def destroy_groups(groups: list[Any], default: bool, *, abort: bool = False) -> None:
    """Destroy ``groups`` (newest first), then the default group if ``default``: the one
    shutdown loop every backend uses.  With ``abort``, torch's ``_abort_process_group``
    instead (NCCL: without waiting for peers)."""
    if not groups and not default:
        return  # nothing of torch's to destroy: don't import it
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    end = dist.distributed_c10d._abort_process_group if abort else dist.destroy_process_group
    for g in reversed(groups):
        if g is not None and g is not dist.group.WORLD:
            end(g)
    if default:
        end()


def shrink_group(gone: list[int], group: Any, *, lost_ok: bool) -> Any:
    """Torch's ``shrink_group``: ``group`` without the ranks ``gone`` (collective among the
    others; NCCL only).  With ``lost_ok`` the parent's pending operations are aborted first
    (``SHRINK_ABORT``): its peers may be dead."""
    import torch.distributed.distributed_c10d as c10d

    flags = c10d.SHRINK_ABORT if lost_ok else c10d.SHRINK_DEFAULT
    return c10d.shrink_group(gone, group=group, shrink_flags=flags)
