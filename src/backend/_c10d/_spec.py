"""One group request, described once: :class:`GroupSpec`.

A request for this rank's group along one dim of a view is turned, once, into a value
computed from rank-invariant data (the family of groups, the options the program asked
for, the world) plus this rank's own facts (its members, its effective timeout).  Torch
names the group :attr:`GroupSpec.name`, the barrier meets under :attr:`GroupSpec.barrier`,
and ``check_spmd`` matches requests by the same barrier name, so these three can never
disagree about which group a request is.  The group cache keys by the core's
``group_key(view, dim, options)``, computed before any spec is made (a cache hit makes
none); :attr:`GroupSpec.key` is equal to it by test (``tests/test_group_spec.py``), not by
construction.

The cross-process identity (``key``, ``name``, ``barrier``) depends only on the family and
the options as the program gave them, never on per-process settings such as a backend's
default timeout: two ranks whose backends were made with different default timeouts
still meet.
"""

from __future__ import annotations

import enum
import functools
import hashlib
from collections.abc import Sequence
from datetime import timedelta

import attrs

from layout import Layout, coalesce, flatten, show
from mesh import Dim, Family, MeshView, RankMap
from mesh._core import RankStyle, ranks_text

from .._core import (
    BackendConfigError,
    GroupKey,
    GroupOptions,
    NotAMemberError,
    family_view,
    members,
)

__all__ = ["GroupSpec", "Plan", "ascending_groups", "plan_creation"]


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
            ascending_groups(view, dim):
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


def ascending_groups(view: MeshView, dim: Dim) -> bool:
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


@attrs.frozen
class GroupSpec:
    """This rank's group along one dim, as one value (see the module).

    ``family`` and ``options`` (as the program asked, never filled with a backend's
    defaults) identify the communicator on every process; ``plan`` says how it is
    created; ``backend`` and ``timeout`` are this process's effective settings (they
    never enter a name).  Everything else is derived.

    >>> from mesh import MeshView
    >>> view = MeshView.from_shape((2, 4), ("dp", "tp"))
    >>> spec = GroupSpec.of(view, "dp", GroupOptions(), rank=5, world_size=8, can_split=False)
    >>> spec.plan, spec.members, spec.barrier == spec.name, spec.describe()
    (<Plan.NEW_GROUP: 'new_group'>, (1, 5), True, "the 'dp' group (1, 5)")
    >>> split = GroupSpec.of(view, "dp", GroupOptions(), rank=5, world_size=8, can_split=True)
    >>> split.plan, split.barrier_size, split.describe()
    (<Plan.SPLIT: 'split'>, 8, "the split of dim 'dp' over the world (8 ranks)")
    """

    family: Family
    options: GroupOptions
    dim: str
    rank: int
    world_size: int
    plan: Plan
    backend: str | None = None
    timeout: timedelta | None = None

    @classmethod
    def of(cls, view: MeshView, dim: Dim, options: GroupOptions, *, rank: int,
           world_size: int, can_split: bool, default_backend: str | None = None,
           default_timeout: timedelta | None = None) -> GroupSpec:
        """The spec of ``rank``'s group along ``dim`` of ``view`` requested with ``options``;
        ``default_backend``/``default_timeout`` fill in what ``options`` leaves unset, for
        this process only.

        Bad input is refused with :class:`~backend.BackendConfigError` naming it (a rank
        outside the view's universe with :class:`~backend.NotAMemberError`, a ``dim`` the
        view lacks with the view's own :class:`~mesh.MeshError`):

        >>> GroupSpec.of(MeshView.from_shape((2, 4)), 0, GroupOptions(), rank=0,
        ...              world_size="8", can_split=False)
        Traceback (most recent call last):
        ...
        backend.BackendConfigError: world_size must be an int >= 1, got '8'
        """
        _check_request(view, options, rank, world_size, can_split, default_backend,
                       default_timeout)
        k = view.index(dim)
        plan = plan_creation(view, k, rank, world_size, options, can_split=can_split)
        return cls(view.family(k), options, view.names[k], rank, world_size, plan,
                   options.backend or default_backend, options.timeout or default_timeout)

    @property
    def key(self) -> GroupKey:
        """The group cache's key (the family and the requested options)."""
        return GroupKey(self.family, self.options)

    @functools.cached_property
    def members(self) -> tuple[int, ...]:
        """This rank's group, in mesh order (group rank ``i`` is ``members[i]``)."""
        return members(self.family, self.rank)

    def groups(self) -> list[list[int]]:
        """Every group of the family (what a split passes to ``split_group``)."""
        return [list(g) for g in family_view(self.family).groups(0, limit=self.family.ranks.size)]

    @functools.cached_property
    def identity(self) -> str:
        """The family and the requested options as text, equal on every process."""
        return f"{_universe(self.family.ranks)}|{self.family.layout}|{_options_text(self.options)}"

    @functools.cached_property
    def name(self) -> str:
        """Torch's name for this group: a digest of the identity and the members."""
        return _digest(f"{self.identity}|{','.join(map(str, self.members))}")

    @property
    def barrier(self) -> str:
        """The barrier the members meet at: the group's name, or the family's for a split
        (where the whole world takes part)."""
        return _digest(self.identity) if self.plan is Plan.SPLIT else self.name

    @property
    def barrier_size(self) -> int:
        """How many ranks meet at :attr:`barrier`."""
        return self.world_size if self.plan is Plan.SPLIT else len(self.members)

    def barrier_members(self) -> Sequence[int]:
        """The ranks that meet at :attr:`barrier` (a range for a split: never a list of the
        world)."""
        return range(self.world_size) if self.plan is Plan.SPLIT else self.members

    def describe(self) -> str:
        """The group in words, for messages (a split is described as one, not by the world's
        ranks)."""
        if self.plan is Plan.SPLIT:
            return f"the split of dim {self.dim!r} over the world ({self.world_size} ranks)"
        return f"the {self.dim!r} group {ranks_text(self.members, RankStyle.GROUP)}"


def _check_request(view: object, options: object, rank: object, world_size: object,
                   can_split: object, default_backend: object, default_timeout: object) -> None:
    """Refuse what :meth:`GroupSpec.of` cannot describe, naming the bad value and what is
    valid (the dim, and the rank's place in the view, are the view's to check)."""
    def bad(what: str, value: object) -> BackendConfigError:
        return BackendConfigError(f"{what}, got {show(value)}")

    if not isinstance(view, MeshView):
        raise bad("a group request needs a mesh.MeshView", view)
    if not isinstance(options, GroupOptions):
        raise bad("options must be a backend.GroupOptions (GroupOptions() for the defaults)",
                  options)
    if type(world_size) is not int or world_size < 1:
        raise bad("world_size must be an int >= 1", world_size)
    if type(rank) is not int or not 0 <= rank < world_size:
        raise bad(f"rank must be an int in [0, {world_size})", rank)
    if view.ranks.max_rank >= world_size:
        raise BackendConfigError(f"the view's universe reaches rank {view.ranks.max_rank} "
                                 f"({view.ranks!r}): it does not fit a world of {world_size}")
    if view.ranks.offset_of(rank) is None:
        raise NotAMemberError(f"rank {rank} is not in the universe of {view!r} "
                              f"({view.ranks!r}): it has no group there")
    if type(can_split) is not bool:
        raise bad("can_split must be a bool", can_split)
    if default_backend is not None and (not isinstance(default_backend, str) or
                                        not default_backend):
        raise bad("default_backend must be a c10d backend name (a non-empty str) or None",
                  default_backend)
    if default_timeout is not None and (not isinstance(default_timeout, timedelta) or
                                        default_timeout <= timedelta(0)):
        raise bad("default_timeout must be a positive datetime.timedelta or None",
                  default_timeout)


def _digest(text: str) -> str:
    return "ml-" + hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:20]


def _universe(ranks: RankMap) -> str:
    """A text that is equal on every process for equal universes."""
    if ranks.ranks is None:
        return f"identity:{ranks.size}"
    digest = hashlib.sha1(",".join(map(str, ranks.ranks)).encode(), usedforsecurity=False)
    return f"explicit:{ranks.size}:{digest.hexdigest()}"


def _options_text(options: GroupOptions) -> str:
    """The requested options as text equal on every process (``pg_options`` by type)."""
    pg = type(options.pg_options).__qualname__ if options.pg_options is not None else ""
    return f"{options.backend}|{options.tag}|{options.group_desc}|{options.timeout}|{pg}"
