"""Torch process groups: how a family's group is created (default, split, new_group), and
destroying a backend's groups."""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs

from layout import Layout, coalesce, flatten
from mesh import Dim, MeshView, RankMap

from ._errors import BackendConfigError, GroupCreationError
from ._options import GroupOptions
from ._rendezvous import Rendezvous, group_name

__all__ = ["Plan", "create_torch_group", "destroy_groups", "plan_creation"]

log = logging.getLogger(__name__)


class Plan(enum.Enum):
    """How a family's group is obtained."""

    DEFAULT = "default"  # reuse the default (world) group
    SPLIT = "split"  # one split_group call over the world for the whole family
    NEW_GROUP = "new_group"  # new_group(my ranks, sort_ranks=False), members only


def plan_creation(view: MeshView, dim: Dim, rank: int, world_size: int, options: GroupOptions,
                  *, can_split: bool) -> Plan:
    """Choose how to create ``rank``'s group along ``dim`` of ``view``.

    - DEFAULT: the group is the whole world in natural order and no option is
      overridden (pytorch#156593: an overridden dim must get its own group).
    - SPLIT (NCCL with a device-bound default group, ``can_split``): the
      family covers the world and every group is ascending, because
      ``split_group`` sorts each split.
    - NEW_GROUP otherwise: ``new_group(ranks, sort_ranks=False)`` keeps the
      mesh order (torch sorts by default, pytorch#193224).
    """
    if options.is_default and _is_world(view, dim, rank, world_size):
        return Plan.DEFAULT
    if can_split and view.ranks.size == world_size and options.tag is None and \
            _ascending_groups(view, dim):
        return Plan.SPLIT
    return Plan.NEW_GROUP


def _is_world(view: MeshView, dim: Dim, rank: int, world_size: int) -> bool:
    """Whether ``rank``'s group along ``dim`` is the whole world in natural order.

    From the layout for the identity universe; an explicit universe (which already
    holds its N ranks) lists the group.
    """
    if view.size(dim) != world_size or view.ranks.size != world_size:
        return False
    if view.ranks.is_identity:
        return view.dim_layout(dim) == coalesce(Layout(world_size, 1))
    return view.group(rank, dim, limit=world_size) == tuple(range(world_size))


def _ascending_groups(view: MeshView, dim: Dim) -> bool:
    """Whether every group along ``dim`` lists its ranks in ascending order.

    For the identity universe that is a property of the dim's layout alone (each flat
    mode's stride is larger than the inner modes can reach); an explicit universe's
    groups are listed.
    """
    if not view.ranks.is_identity:
        return all(g == tuple(sorted(g)) for g in view.groups(dim, limit=view.ranks.size))
    layout = view.dim_layout(dim)
    shapes, strides = flatten(layout.shape), flatten(layout.stride)
    reach = 0  # the largest offset the modes inside the current one reach
    for s, d in zip(reversed(shapes), reversed(strides)):
        if s > 1 and d <= reach:
            return False
        reach += (s - 1) * d
    return True


def create_torch_group(view: MeshView, dim: Dim, rank: int, world_size: int,
                       options: GroupOptions, *, can_split: bool,
                       default_backend: str | None = None,
                       default_timeout: timedelta | None = None,
                       rendezvous: Rendezvous | None = None) -> Any:
    """Create this process's torch group along ``dim`` of ``view`` (collective; see the plan).

    ``default_backend`` and ``default_timeout`` fill in what ``options`` leaves
    unset; the default group is reused only if its backend is ``default_backend``.
    The group is named by :func:`~backend._rendezvous.group_name` (the same on every
    process, whatever else each created), and with a ``rendezvous`` its members first
    meet at a store barrier, so a creation that cannot complete fails on every member
    within its timeout with :class:`~backend.MembersMissingError` explaining why.
    """
    import torch.distributed as dist

    k = view.index(dim)
    dim_name = view.names[k]
    plan = plan_creation(view, k, rank, world_size, options, can_split=can_split)
    if plan is Plan.DEFAULT and default_backend not in (None, dist.get_backend()):
        plan = Plan.NEW_GROUP
    options = attrs.evolve(options, backend=options.backend or default_backend,
                           timeout=options.timeout or default_timeout)
    if plan is Plan.DEFAULT:
        return dist.group.WORLD
    mine = view.group(rank, k, limit=view.ranks.size)
    family = family_id(view, k, options)
    name = group_name(*family, mine)
    members = tuple(range(world_size)) if plan is Plan.SPLIT else mine
    barrier = group_name(*family, ()) if plan is Plan.SPLIT else name  # a split meets the world
    timeout = options.timeout or dist.distributed_c10d.default_pg_timeout
    desc = options.group_desc or f"mesh_{dim_name}"  # torch's group_desc
    log.debug("creating %s group %s for dim %r of %r (%s)", plan.value, name, dim, view, options)

    def create() -> Any:
        with _named(name):
            if plan is Plan.SPLIT:
                return dist.split_group(
                    split_ranks=[list(g) for g in view.groups(k, limit=view.ranks.size)],
                    timeout=options.timeout, pg_options=options.pg_options, group_desc=desc,
                    backend=options.backend)
            return dist.new_group(
                list(mine), timeout=options.timeout, backend=options.backend,
                pg_options=options.pg_options, use_local_synchronization=True,
                group_desc=desc, sort_ranks=False)

    try:
        if rendezvous is None:
            return create()
        record = {"group": barrier, "dim": dim_name, "ranks": list(mine)}
        with rendezvous.creating(record, time.time() + timeout.total_seconds()):
            rendezvous.arrive(barrier, members, timeout.total_seconds(), dim_name, mine)
            group = create()
        rendezvous.done(barrier, members)
        return group
    except GroupCreationError:
        raise
    except Exception as e:
        raise GroupCreationError(
            f"creating the {plan.value} group {mine} for dim {dim_name!r} of {view!r} on rank "
            f"{rank} failed: {e}") from e


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


def family_id(view: MeshView, dim: int, options: GroupOptions) -> tuple[str, str, str]:
    """(universe, dim layout, options) of the family of groups along ``dim`` of ``view``, as
    text equal on every process that reaches these groups (:meth:`mesh.MeshView.family`
    is canonical), whatever path each took; with a group's members it names the group."""
    fam = view.family(dim)
    return _universe(fam.ranks), str(fam.layout), _options_text(options)


def _universe(ranks: RankMap) -> str:
    """A text that is equal on every process for equal universes."""
    if ranks.ranks is None:
        return f"identity:{ranks.size}"
    digest = hashlib.sha1(",".join(map(str, ranks.ranks)).encode(), usedforsecurity=False)
    return f"explicit:{ranks.size}:{digest.hexdigest()}"


def start_fake_world(world_size: int, rank: int) -> bool:
    """Start torch's fake default group as ``rank`` of ``world_size`` (the dry run), unless
    torch.distributed is initialized: then it must be that rank of that world.  Returns
    whether this call started it."""
    import torch.distributed as dist

    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        return True
    if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        raise BackendConfigError(
            f"torch.distributed is already initialized as rank {dist.get_rank()} of "
            f"{dist.get_world_size()}, not rank {rank} of {world_size}")
    return False


def _options_text(options: GroupOptions) -> str:
    """The options as text equal on every process (``pg_options`` by type only)."""
    pg = type(options.pg_options).__qualname__ if options.pg_options is not None else ""
    return f"{options.backend}|{options.tag}|{options.group_desc}|{options.timeout}|{pg}"


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
