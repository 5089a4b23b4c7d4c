"""What ``check_spmd`` records of one rank's run: the events (group requests, collective and
point-to-point calls, lifecycle calls) in program order, as values (``_recording`` records
them).

A group is named in a call by a :class:`GroupRef`: its ``key`` is equal on every member
(the name the real job gives the communicator, with its members), so calls of different
ranks on one communicator meet; ``spec`` (a :class:`~backend.GroupSpec`) is kept where the
group was made from a view, so that another rank's group of the same family can be
derived (``_reduce``).  Every call keeps its source line: the first frame outside torch and
meshlayout.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Hashable, Iterable, Sequence
from types import FrameType
from typing import Any, Literal, NamedTuple

import attrs

import layout
import mesh as _mesh_package
from mesh._core import RankStyle, call_text, ranks_text

from .._c10d import GroupSpec, Plan

__all__ = [
    "Abort",
    "AdoptedKey",
    "Call",
    "Create",
    "Destroy",
    "Event",
    "GroupRef",
    "Hit",
    "Kind",
    "Retire",
    "Revoke",
    "Shrink",
    "ShrunkKey",
    "TorchCreate",
    "TorchGroupKey",
    "Trace",
    "WaitRevoke",
    "WaitWork",
    "WorldKey",
    "is_nccl",
    "library_dirs",
    "program_reads",
    "site",
    "spec_ref",
    "world_ref",
]

Kind = Literal["auto", "gloo", "nccl"]
_BACKEND = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = (*(os.path.dirname(os.path.abspath(str(p.__file__))) + os.sep
           for p in (layout, _mesh_package)), _BACKEND + os.sep)
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def is_nccl(kind: Kind, device_types: Iterable[str]) -> bool:
    """Whether the backend being modelled is NCCL: asked for (``"nccl"``), or ``"auto"``
    with a ``"cuda"`` mesh bound (the one place this is decided).

    >>> is_nccl("auto", {"cpu"}), is_nccl("auto", {"cpu", "cuda"}), is_nccl("gloo", {"cuda"})
    (False, True, False)
    """
    return kind == "nccl" or (kind == "auto" and "cuda" in device_types)


def library_dirs() -> tuple[str, ...]:
    torch = sys.modules.get("torch")
    found = getattr(torch, "__file__", None)
    extra = (os.path.dirname(os.path.abspath(found)) + os.sep,) if found else ()
    return _OURS + extra


def _stdlib(name: str) -> bool:
    return name.startswith(_STDLIB) and "site-packages" not in name


def site(depth: int = 2) -> str:
    """``file.py:line`` of the first frame (from ``depth`` up) outside torch, meshlayout and
    the standard library: the program's line that made the call."""
    dirs = library_dirs()
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(dirs) and not _stdlib(name):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def program_reads(depth: int) -> bool:
    """Whether the first frame ``depth`` up outside the standard library is the program's
    own (or the facade's ``get_rank`` on the program's behalf): a raw read of the rank,
    not a coordinate computation."""
    frame = sys._getframe(depth)
    while frame.f_back is not None and _stdlib(frame.f_code.co_filename):
        frame = frame.f_back
    name = frame.f_code.co_filename
    if not name.startswith(library_dirs()):
        return True
    return frame.f_code.co_name == "get_rank" and name.startswith(_BACKEND)


class WorldKey(NamedTuple):
    """The key of the default group of a world of ``size`` ranks."""

    size: int
    kind: Literal["world"] = "world"


class TorchGroupKey(NamedTuple):
    """The key of a group torch code made (``dist.new_group``, ...): torch's name for it and
    its members."""

    name: str
    members: tuple[int, ...]
    kind: Literal["pg"] = "pg"


class AdoptedKey(NamedTuple):
    """The key of a group adopted with ``from_group`` (or made elsewhere for this rank)."""

    name: str
    members: tuple[int, ...]
    kind: Literal["adopted"] = "adopted"


class ShrunkKey(NamedTuple):
    """The key of the group ``shrink_group`` made of ``parent`` without ``exclude``."""

    parent: Hashable
    exclude: tuple[int, ...]
    kind: Literal["shrunk"] = "shrunk"


class GroupRef:
    """A communicator a call runs on, as one rank sees it.

    ``key`` is equal on every member of the same communicator (for a group made from a
    view: its family, options and place in the family; for one torch code made: its
    torch name and members); ``label`` names it in words (the dim, or torch's group
    name); ``members`` are the global ranks in group order (listed on first use);
    ``spec`` is the request it came from when a view made it (None for the world group
    and for groups torch code made).
    """

    __slots__ = ("_members", "key", "label", "spec", "world")

    def __init__(self, key: Hashable, label: str, members: Sequence[int] | None = None,
                 spec: GroupSpec | None = None, world: bool = False) -> None:
        self.key = key
        self.label = label
        self._members = members
        self.spec = spec
        self.world = world

    @property
    def members(self) -> Sequence[int]:
        """The global ranks in group order (a range for the whole world in order)."""
        if self._members is None:
            assert self.spec is not None, "a GroupRef without members has the spec they come from"
            found: Sequence[int] = self.spec.members
            if len(found) == self.spec.world_size and found == tuple(range(len(found))):
                found = range(len(found))
            self._members = found
        return self._members

    def index(self, rank: int) -> int | None:
        """``rank``'s place in the group, or None when it is not a member."""
        members = self.members
        if isinstance(members, range):
            return rank - members.start if rank in members else None
        try:
            return members.index(rank)
        except ValueError:
            return None

    def describe(self) -> str:
        """The group in words (its members shortened past eight)."""
        if self.world:
            return f"the world group {ranks_text(self.members, RankStyle.SPMD_GROUP)}"
        return f"the {self.label!r} group {ranks_text(self.members, RankStyle.SPMD_GROUP)}"

    def __repr__(self) -> str:
        return f"GroupRef({self.describe()})"


def world_ref(world_size: int) -> GroupRef:
    """The default group."""
    return GroupRef(WorldKey(world_size), "world", range(world_size), None, True)


def spec_ref(spec: GroupSpec, offset: int, identity: str | None = None) -> GroupRef:
    """The group a request made, whose first member is at ``offset`` of the universe (the
    world group where the request reuses it).  Its key is the family's identity (universe,
    layout, options: ``GroupSpec.identity``, given when known) and the offset, as text
    (hashed once)."""
    if spec.plan is Plan.DEFAULT:
        return world_ref(spec.world_size)
    key = f"{identity if identity is not None else spec.identity}@{offset}"
    return GroupRef(key, spec.options.group_desc or spec.dim, None, spec)


# ---- events -----------------------------------------------------------------------------


@attrs.frozen
class Create:
    """A group creation this rank takes part in (its barrier, as the job meets), as the
    modelled backend creates it: ``split`` when one ``split_group`` over the world makes
    the family; ``hidden`` when torch would split the device-bound default group for a
    group the program creates among its members only (NCCL, :mod:`._creation`)."""

    barrier: str
    dim: str
    members: Any  # who meets there: the group, or range(world) for a split
    split: bool
    hidden: bool
    group: GroupRef
    line: str
    backend: str | None = None  # the backend the group asks for (None: the default group's)
    lazy: bool = False  # its options set lazy_init (torch 2.15 never splits for those)


@attrs.frozen
class Hit:
    """A request this rank answered from a group it already held though it never created
    that family itself: adopted (``from_group``) or kept across a ``rebind``.  Where its
    peers create the family, they wait for this rank (:mod:`._creation`)."""

    barrier: str
    dim: str
    members: Any
    split: bool
    source: str
    group: GroupRef
    line: str


@attrs.frozen
class TorchCreate:
    """A group torch code created itself: ``dist.new_group(ranks, use_local_synchronization=
    local)`` or ``dist.split_group(split_ranks)`` (``ranks`` then lists the splits, in global
    ranks), asking for ``backend`` (None: the parent's) with options that set ``lazy_init``
    or not; ``parent``: the global ranks of a ``split_group``'s parent when it is not the
    world (its ranks enter it, members or not)."""

    what: Literal["new_group", "split_group"]
    ranks: tuple[Any, ...]
    local: bool
    name: str
    line: str
    backend: str | None = None
    lazy: bool = False
    parent: tuple[int, ...] | None = None


@attrs.frozen
class Call:
    """One collective or point-to-point call on ``group``.

    ``shapes`` holds one shape per tensor; ``root`` (broadcast, reduce, gather, scatter) and
    ``peer`` (send, recv) are places in the group; ``splits`` (all_to_all with sizes) the
    input and output split sizes.  ``post`` marks a call that does not wait (``isend``,
    ``irecv``, a batch of p2p ops): it must still be matched before the program ends.
    """

    op: str
    group: GroupRef
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    line: str
    reduce_op: str | None = None
    root: int | None = None
    peer: int | None = None
    splits: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    post: bool = False
    batch: int = 0

    @property
    def p2p(self) -> bool:
        return self.op in ("send", "recv")

    def signature(self) -> tuple[Any, ...]:
        """What every member must agree on (p2p: what the pair must agree on)."""
        if self.p2p:
            return (self.shapes, self.dtype)
        if self.op == "all_to_all":  # uneven sizes differ by rank: the rows must agree
            return (self.op, tuple(s[1:] for s in self.shapes), self.dtype,
                    self.splits is None and self.shapes)
        return (self.op, self.shapes, self.dtype, self.reduce_op, self.root)

    def describe(self) -> str:
        """``all_reduce (16, 16) float32 sum``; roots and peers by global rank."""
        details = [self.reduce_op] if self.reduce_op else []
        if self.root is not None:
            details.append(f"root {self.group.members[self.root]}")
        if self.peer is not None:
            details.append(f"{'to' if self.op == 'send' else 'from'} "
                           f"{self.group.members[self.peer]}")
        if self.splits is not None:
            details.append(f"splits in {list(self.splits[0])} out {list(self.splits[1])}")
        return call_text(self.op, self.shapes, self.dtype, *details)


@attrs.frozen
class WaitWork:
    """The program waits for the non-blocking calls ``calls`` (their event indices)."""

    calls: tuple[int, ...]
    line: str


@attrs.frozen
class Retire:
    """``retire``/``rebind``: ``lost`` ranks are gone; ``ended`` the groups it ended."""

    lost: frozenset[int]
    ended: tuple[GroupRef, ...]
    line: str


@attrs.frozen
class Destroy:
    """The program destroys ``group`` (``destroy_process_group``; NCCL: a finalize that
    waits for its peers)."""

    group: GroupRef
    line: str


@attrs.frozen
class Abort:
    """The program aborts ``group`` (never waits for peers)."""

    group: GroupRef
    line: str


@attrs.frozen
class Shrink:
    """``shrink_group(exclude, group)``: collective among the members not excluded."""

    group: GroupRef
    exclude: tuple[int, ...]
    made: GroupRef | None
    line: str


@attrs.frozen
class Revoke:
    """A revoke of ``group`` (``ncclCommRevoke``); ``wait=False`` returns before it ends."""

    group: GroupRef
    wait: bool
    line: str


@attrs.frozen
class WaitRevoke:
    """The program waits for the revoke of ``group`` to end."""

    group: GroupRef
    line: str


Event = Create | Hit | TorchCreate | Call | WaitWork | Retire | Destroy | Abort | Shrink | \
    Revoke | WaitRevoke


@attrs.define
class Trace:
    """One rank's run: its events in order, and how the run ended."""

    rank: int
    events: list[Event] = attrs.Factory(list)
    error: str | None = None  # the program raised (its error, with where)
    error_at: int = 0  # how many group requests came before the error
    timed_out: float | None = None  # the time limit it ran past
    ran_out: tuple[int, int] | None = None  # (bytes grown, the bound) past its memory bound
    raw_rank: bool = False  # the program read its global rank itself
    threads: set[threading.Thread] = attrs.Factory(set)  # the threads that made calls
    left_threads: int = 0  # threads still running after the program returned
    foreign: list[tuple[str, str]] = attrs.Factory(list)  # (line, what) calls on others' groups
    device_types: set[str] = attrs.Factory(set)
    underivable: str | None = None  # why another rank's run cannot be derived from this one

    @property
    def requests(self) -> int:
        return sum(isinstance(e, (Create, Hit)) for e in self.events)

    @property
    def stopped(self) -> str | None:
        """Which per-rank bound the run went past, in words (None: neither)."""
        if self.timed_out is not None:
            return f"ran past its {self.timed_out:g} s limit"
        if self.ran_out is not None:
            return f"grew past its memory bound of {_mib(self.ran_out[1])}"
        return None


def _mib(size: int) -> str:
    """Bytes in MiB, as a report writes them (``256 MiB``)."""
    return f"{size / (1 << 20):.0f} MiB"
