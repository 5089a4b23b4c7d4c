"""The error hierarchy of the backend layer.

Every error is a :class:`BackendError`, which is a ``RuntimeError`` (what torch's
``DeviceMesh`` raises for most misuse); subclasses add the other built-in torch
raises in the same place, so code written against torch keeps catching them.
"""

from __future__ import annotations

import functools
import importlib.util

__all__ = [
    "BackendConfigError",
    "BackendError",
    "DiscoveryError",
    "ExpectationError",
    "GroupCreationError",
    "MembersMissingError",
    "NotAMemberError",
    "PeerLostError",
    "RankLostError",
    "ReentrantCreationError",
    "StoreRecordError",
    "TorchMissingError",
    "UnsupportedTorchError",
    "need_torch",
]


class BackendError(RuntimeError):
    """Base class of every error raised by :mod:`backend`."""


class BackendConfigError(BackendError, ValueError):
    """A bad argument or setup: an unknown backend name or device type, a missing
    environment variable, bad options or ``backend_override`` keys, a mesh larger than
    the world, a flattened dim name that is taken, a one-dim query on a multi-dim mesh,
    slicing or flattening a mesh that has no dim names."""


class ExpectationError(BackendConfigError):
    """A plan's stated expectation does not hold on the job's machine
    (``bind(..., expect_intra_host=("tp",))``): the message names the expectation, the
    first group that breaks it and the hosts (or domains) it spans; the same facts are
    attributes ``level`` (``"host"`` or ``"domain"``), ``dim``, ``group`` and ``spans``
    (host names, or domain indices).  Raised on every rank, before any group is made."""

    def __init__(self, message: str, *, level: str = "", dim: str = "",
                 group: tuple[int, ...] = (), spans: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.level, self.dim, self.group, self.spans = level, dim, group, spans

    def __reduce__(self) -> tuple[object, ...]:
        return (functools.partial(ExpectationError, level=self.level, dim=self.dim,
                                  group=self.group, spans=self.spans),
                (self.args[0] if self.args else "",))


# What the last release's pickles call (they named this module): kept for one release.
def _expectation(message: str, level: str, dim: str, group: tuple[int, ...],
                 spans: tuple[object, ...]) -> ExpectationError:
    return ExpectationError(message, level=level, dim=dim, group=group, spans=spans)


class DiscoveryError(BackendError):
    """Discovering the job's machine (``discover_topology``) failed, on every rank that
    took part: a rank did not arrive within the timeout (the message says how many did),
    or the ranks' records do not make one machine (two ranks on one device of one host)."""


class NotAMemberError(BackendError, ValueError, IndexError):
    """This process's rank is not in the universe of the view it asked a group of
    (torch raises ``IndexError`` there)."""


class GroupCreationError(BackendError):
    """Creating a process group failed (the cache keeps no entry; a retry may work)."""


class MembersMissingError(GroupCreationError, TimeoutError):
    """Creating a group did not complete in time because members did not arrive.

    The message names this rank, the group (dim and ranks), the members that did not
    arrive and, for each, what it was doing (creating another group, idle, not
    started, gone), the likely cause in words and the remedies.  The same facts are
    attributes: ``rank``, ``dim``, ``ranks``, ``missing`` and ``doing`` (a dict from a
    missing rank to a description).
    """

    def __init__(self, message: str, *, rank: int = -1, dim: str = "",
                 ranks: tuple[int, ...] = (), missing: tuple[int, ...] = (),
                 doing: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.rank, self.dim, self.ranks, self.missing = rank, dim, ranks, missing
        self.doing = dict(doing or {})

    def __reduce__(self) -> tuple[object, ...]:
        return (functools.partial(MembersMissingError, rank=self.rank, dim=self.dim,
                                  ranks=self.ranks, missing=self.missing, doing=self.doing),
                (self.args[0] if self.args else "",))


# What the last release's pickles call (they named this module): kept for one release.
def _members_missing(message: str, rank: int, dim: str, ranks: tuple[int, ...],
                     missing: tuple[int, ...], doing: dict[int, str]) -> MembersMissingError:
    return MembersMissingError(message, rank=rank, dim=dim, ranks=ranks, missing=missing,
                               doing=doing)


class StoreRecordError(BackendError, ValueError):
    """A value read from the job's store is not what its one writer writes: junk bytes,
    the wrong shape or types, a number or an index out of its bounds (a rank not below
    the world size, a count above the members), a ticket counter that went back, or a
    decision naming a rank that is not a member.  The message names the key, the writer
    where it is known (the rank the key or the value names) and the reason; the same
    facts are attributes ``key``, ``writer`` (None: unknown) and ``reason``.  Raised on
    every rank that reads the value, at once (not after a timeout)."""

    def __init__(self, key: str, reason: str, *, writer: int | None = None) -> None:
        by = "" if writer is None else f" (written by rank {writer}, or by another writer " \
            "posing as it)"
        super().__init__(f"the store value at {key!r}{by} is not valid: {reason}")
        self.key, self.writer, self.reason = key, writer, reason

    def __reduce__(self) -> tuple[object, ...]:
        return (functools.partial(StoreRecordError, writer=self.writer), (self.key, self.reason))


# What the last release's pickles call (they named this module): kept for one release.
def _store_record(key: str, reason: str, writer: int | None) -> StoreRecordError:
    return StoreRecordError(key, reason, writer=writer)


class ReentrantCreationError(GroupCreationError):
    """A group's creation asked for that same group (it would wait on itself forever)."""


class PeerLostError(BackendError):
    """A collective on a group failed and members of it stopped answering: the message
    names them (``diagnose``; ``lost`` lists their ranks)."""

    def __init__(self, message: str, *, lost: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.lost = lost


class RankLostError(BackendError, ValueError):
    """A group or a view holds a rank this backend was told is lost (``retire``,
    ``DeviceMesh.rebind``): ask the mesh ``rebind`` returned instead."""


class UnsupportedTorchError(BackendError, ImportError):
    """A mesh over torch process groups was asked for on a torch release outside the tested
    range (``backend._core.TESTED_TORCH``): the message names the installed release, the
    range and the way on.  An ``ImportError``, as a missing torch is; ``version`` is the
    installed release."""

    def __init__(self, message: str, version: str = "") -> None:
        super().__init__(message)
        self.version = version

    def __reduce__(self) -> tuple[type[UnsupportedTorchError], tuple[str, str]]:
        return type(self), (str(self), self.version)


class TorchMissingError(BackendError, ModuleNotFoundError):
    """Something that needs PyTorch (the c10d backends, torch's fake world, a mesh with no
    backend bound, ``to_torch``, ``check_spmd(..., torch=True)``) without it installed: the
    message names the extra to install (``meshlayout[torch]``).  A ``ModuleNotFoundError``
    (``name == "torch"``), so ``import`` semantics hold (``except ImportError`` catches it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.name = "torch"


_NO_TORCH = (
    "needs PyTorch, which is not installed: install meshlayout's torch extra from the "
    "checkout's root, pip install -e '.[torch]' (on a machine without a GPU, PyTorch's CPU "
    "wheel first: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu). "
    "Without torch, FakeBackend, bind and check_spmd (without torch=True) run, as do the "
    "offline tools: layout, mesh and the meshlayout command.")


def need_torch(what: str) -> None:
    """Raise :class:`TorchMissingError` saying that ``what`` needs torch and naming the extra,
    when torch is not installed (looked up, not imported)."""
    if importlib.util.find_spec("torch") is None:
        raise TorchMissingError(f"{what} {_NO_TORCH}")
