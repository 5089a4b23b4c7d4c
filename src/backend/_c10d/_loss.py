"""Losing ranks on c10d, in one place, in the order it happens.

1. A collective fails: :func:`diagnose` says who does not answer (a
   :class:`~backend.PeerLostError`, from the liveness check
   :meth:`~._liveness.Liveness.silent`), and the group counts as out of step here.
2. ``retire`` (``DeviceMesh.rebind``): the survivors meet at a barrier and tell each other
   the groups they saw fail (:func:`agreed_failures`, over the barrier's
   :meth:`~._rendezvous.Rendezvous.agree`), so all of them end the same groups.
3. The groups holding a lost rank, or failed, end (:func:`end_groups`): aborted on NCCL,
   destroyed locally on Gloo; on NCCL a group that only lost ranks is first shrunk to its
   survivors (:func:`shrink_group`); on Gloo (torch >= 2.14) a group whose survivors, in its
   order, are a group of the onward mesh is reconfigured in place instead of ended
   (:mod:`._reconfigure`); a shrunk or reconfigured group serves their next request (the
   core's :class:`~backend._core._loss.Loss` holds it), and every broken group's fate is
   recorded (:class:`~backend.Reformed`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from layout import show

from .._core import (
    BackendConfigError,
    CreationRecord,
    How,
    Onward,
    PeerLostError,
    Reformed,
    members,
)
from ._reconfigure import reconfigure_group, why_not
from ._rendezvous import Rendezvous
from ._torch_groups import destroy_groups

__all__ = ["agreed_failures", "diagnose", "end_groups", "shrink_group"]

log = logging.getLogger(__name__)


def diagnose(error: BaseException, group: Any, *, rank: int, rendezvous: Rendezvous | None
             ) -> BaseException:
    """What a failed collective on ``group`` means: a :class:`~backend.PeerLostError`
    naming the members that do not answer, chained to ``error``; ``error`` itself when every
    member answers (or heartbeats are off).  See :meth:`C10dBackend.diagnose
    <backend._c10d._backends.C10dBackend.diagnose>`."""
    import torch.distributed as dist

    if not isinstance(error, BaseException):
        raise BackendConfigError(f"diagnose takes the exception a collective raised, got "
                                 f"{show(error)}")
    if not isinstance(group, dist.ProcessGroup):
        raise BackendConfigError(f"diagnose takes the torch process group the collective "
                                 f"ran on (mesh.get_group(dim)), got {show(group)}")
    if rendezvous is None or not rendezvous.beating:
        return error
    ranks = dist.get_process_group_ranks(group)
    try:
        quiet = rendezvous.silent([r for r in ranks if r != rank])
        lost = {r: ("has not answered (no beat on record)" if q is None
                    else f"has not answered for {q:.1f} s") for r, q in quiet.items()}
    except Exception:  # the store lives on rank 0
        lost = {0: "cannot be asked: the store on rank 0 is unreachable (rank 0 exited?)"}
    if not lost:
        return error
    who = "; ".join(f"rank {r} {text}" for r, text in lost.items())
    out = PeerLostError(
        f"a collective on the group {tuple(ranks)} failed on rank {rank}: {who} (it "
        "exited, hangs, or is not taking part in this collective). The error was: "
        f"{type(error).__name__}: {error}",
        lost=tuple(lost))
    out.__cause__ = error
    return out


def agreed_failures(mine: set[str], among: Sequence[int] | None, *, lost: frozenset[int],
                    rendezvous: Rendezvous | None, timeout: timedelta) -> frozenset[str]:
    """Every survivor's failed groups (``mine`` here), agreed at a store barrier among the
    ranks ``among`` that go on, so all of them end the same groups: a member alive but out
    of step on a group (its collective timed out) breaks it too.  ``among`` is the list of
    ranks; empty: this rank alone (no barrier)."""
    if rendezvous is None or not among:
        return frozenset(mine)
    digest = hashlib.sha1(f"{sorted(lost)}|{list(among)}".encode()).hexdigest()[:16]
    # survivors stuck in a collective with a peer that is already here leave it when it
    # times out (one timeout), then come: the barrier waits three
    notes = rendezvous.agree(f"rebind/{digest}", list(among), 3 * timeout.total_seconds(),
                             "\n".join(sorted(mine)))
    return frozenset(notes)


def end_groups(ended: list[CreationRecord], lost: frozenset[int], *, rank: int, nccl: bool,
               onward: Onward | None = None, rendezvous: Rendezvous | None = None,
               timeout: timedelta | None = None
               ) -> tuple[list[tuple[tuple[tuple[int, ...], Any], Any]], tuple[Reformed, ...]]:
    """End the groups of ``ended`` (they hold a lost rank or failed): aborted on NCCL
    (destroying would wait on dead peers, pytorch #194775), destroyed locally on Gloo; the
    default group stays (every process still shares it).  On NCCL with ``shrink_group``
    (torch 2.13, NCCL >= 2.27), a group that only lost ranks is first shrunk to its
    survivors, in its own order.  On Gloo, a group whose survivors are this rank's group of
    the ``onward`` mesh is reconfigured in place (:mod:`._reconfigure`; needs the
    ``rendezvous`` to exchange handles, within ``timeout``) and not ended.  Returns the
    shrunk or reconfigured groups, by (members, options), and what became of each group."""
    shrunk = []
    done: list[Reformed] = []
    kept: set[int] = set()
    for record in _in_name_order(ended):
        before = _members(record, rank)
        after = tuple(r for r in before if r not in lost)
        why = why_not(record, before, lost, rank=rank, onward=onward)
        if why is None and (rendezvous is None or timeout is None):
            why = "no store to exchange the members' handles in (a world of one?)"
        if why is None and rendezvous is not None and timeout is not None:
            try:
                reconfigure_group(record, after, lost, rank=rank, rendezvous=rendezvous,
                                  timeout=timeout)
            except Exception as e:  # every member fails alike: the group is ended
                why = f"reconfigure failed: {type(e).__name__}: {e}"
                log.warning("reconfiguring %s -> %s failed (%s): created anew", before,
                            after, e)
            else:
                shrunk.append(((after, record.key.options), record.group))
                kept.add(id(record.group))
                done.append(Reformed(record.dim, before, after, How.RECONFIGURED, ""))
                continue
        if nccl and lost:
            made = _shrunk(record, lost, rank)
            if made is not None:
                shrunk.append(made)
                done.append(Reformed(record.dim, before, after, How.SHRUNK, why or ""))
                continue
        done.append(Reformed(record.dim, before, after, How.ENDED, why or ""))
    destroy_groups([r.group for r in ended if id(r.group) not in kept], False, abort=nccl)
    return shrunk, tuple(done)


def _in_name_order(ended: list[CreationRecord]) -> list[CreationRecord]:
    """``ended`` in the order of their torch names (the same on every member: re-formings,
    which wait on their members, never wait in opposite orders on two ranks)."""
    return sorted(ended, key=lambda r: str(getattr(r.group, "group_name", "")))


def _members(record: CreationRecord, rank: int) -> tuple[int, ...]:
    """The group's members, in group order, as this rank's cache key says."""
    return members(record.key.family, rank)


def _shrunk(record: CreationRecord, lost: frozenset[int], rank: int
            ) -> tuple[tuple[tuple[int, ...], Any], Any] | None:
    import torch.distributed as dist

    group = record.group
    if group is None or group is dist.group.WORLD:
        return None
    ranks = dist.get_process_group_ranks(group)
    gone = [r for r in ranks if r in lost]
    keep = tuple(r for r in ranks if r not in lost)
    if not gone or len(keep) < 2 or rank not in keep:
        return None
    try:
        made = shrink_group(gone, group, lost_ok=True)
    except Exception as e:  # no shrink here: new groups are created among the survivors
        log.info("shrinking %s failed (%s): the survivors create a new group", ranks, e)
        return None
    return (keep, record.key.options), made


def shrink_group(gone: list[int], group: Any, *, lost_ok: bool) -> Any:
    """Torch's ``shrink_group``: ``group`` without the ranks ``gone`` (collective among the
    others; NCCL only).  With ``lost_ok`` the parent's pending operations are aborted first
    (``SHRINK_ABORT``): its peers may be dead."""
    import torch.distributed.distributed_c10d as c10d

    flags = c10d.SHRINK_ABORT if lost_ok else c10d.SHRINK_DEFAULT
    return c10d.shrink_group(gone, group=group, shrink_flags=flags)
