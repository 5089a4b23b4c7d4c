"""Losing ranks on c10d, in one place, in the order it happens.

1. A collective fails: :func:`diagnose` says who does not answer (a
   :class:`~backend.PeerLostError`, from the liveness check
   :meth:`~._liveness.Liveness.silent`), and the group counts as out of step here.
2. ``retire`` (``DeviceMesh.rebind``): the survivors meet at a barrier and tell each other
   the groups they saw fail (:func:`agreed_failures`, over the barrier's
   :meth:`~._rendezvous.Rendezvous.agree`), so all of them end the same groups.
3. The groups holding a lost rank, or failed, end (:func:`end_groups`): aborted on NCCL,
   destroyed locally on Gloo; on NCCL a group that only lost ranks is first shrunk to its
   survivors (:func:`shrink_group`), and the shrunk group serves their next request (the
   core's :class:`~backend._core._loss.Loss` holds it).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from layout import show

from .._core import BackendConfigError, CreationRecord, PeerLostError
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


def end_groups(ended: list[CreationRecord], lost: frozenset[int], *, rank: int, nccl: bool
               ) -> list[tuple[tuple[tuple[int, ...], Any], Any]]:
    """End the groups of ``ended`` (they hold a lost rank or failed): aborted on NCCL
    (destroying would wait on dead peers, pytorch #194775), destroyed locally on Gloo; the
    default group stays (every process still shares it).  On NCCL with ``shrink_group``
    (torch 2.13, NCCL >= 2.27), a group that only lost ranks is first shrunk to its
    survivors, in its own order.  Returns the shrunk groups, by (members, options)."""
    shrunk = []
    for record in ended:
        if nccl and lost:
            made = _shrunk(record, lost, rank)
            if made is not None:
                shrunk.append(made)
    destroy_groups([r.group for r in ended], False, abort=nccl)
    return shrunk


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
