"""Re-forming a broken Gloo group in place (torch >= 2.14's ``_reconfigure``), and, for every
other broken group, saying in words why it is ended and created anew instead.

A group fits when all of these hold on this rank (each is the same on every surviving member,
so they all decide alike): it is a Gloo group, not the default group; torch has reconfigure
(:data:`~._torch_private.RECONFIGURES`) and the group supports it; some member was lost;
this rank goes on; its survivors, in its own order, are this rank's group along a dim of the
onward mesh with the same options (so a group rank stays the mesh coordinate), and there are
at least two of them.  A spare is never a member of a group made before it joined, and
Gloo's reconfigure takes only a group's own members: a group a spare joins is created anew.

The survivors of a group that fits meet at a store barrier named after the group and the
loss (:meth:`~._rendezvous.Rendezvous.agree`, a constant number of store calls per member),
each bringing its handle; then each calls ``_reconfigure`` with the handles in the group's
order and a uuid derived from the same name, and torch's record of the group's ranks is
updated.  Groups are re-formed in the order of their torch names, the same on every member,
so two ranks sharing two groups never wait on each other in opposite orders.  A re-forming
that fails (a member died meanwhile: the barrier or torch's connect times out, on every
member) ends the group, with the error as the reason.
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import timedelta

from .._core import CreationRecord, Onward, members
from ._rendezvous import Rendezvous

__all__ = ["reconfigure_group", "why_not"]

log = logging.getLogger(__name__)


def why_not(record: CreationRecord, before: tuple[int, ...], lost: frozenset[int], *,
            rank: int, onward: Onward | None) -> str | None:
    """Why the broken group of ``record`` (members ``before``, in group order) cannot be
    reconfigured in place on this rank; None when it can."""
    import torch
    import torch.distributed as dist

    from . import _torch_private as private

    group = record.group
    if group is None or group is dist.group.WORLD:
        return "the default group stays (re-forming it would renumber every global rank)"
    try:
        kind = str(dist.get_backend(group))
    except Exception as e:  # a group torch no longer knows
        return f"torch does not know the group any more ({type(e).__name__}: {e})"
    if kind != "gloo":
        return (f"a {kind} group: only Gloo's groups are reconfigured (NCCL's are shrunk "
                "where torch can)")
    if not private.RECONFIGURES:
        return (f"torch {torch.__version__} has no reconfigure (torch.distributed."
                "_reconfigure, torch >= 2.14)")
    after = tuple(r for r in before if r not in lost)
    if after == before:
        return "no member was lost (a collective failed on it: out of step)"
    why = _no_successor(record, before, after, rank=rank, onward=onward)
    if why is not None:
        return why
    if len(after) < 2:
        return "a single survivor (a group of one is created locally)"
    if not private.supports_reconfigure(group):
        return "the group does not support reconfigure"
    return None


def _no_successor(record: CreationRecord, before: tuple[int, ...], after: tuple[int, ...],
                  *, rank: int, onward: Onward | None) -> str | None:
    """Why the new mesh has no group here that is exactly ``after`` (the survivors of
    ``before``, in its order); None when it has."""
    if onward is None:
        return "retire was not told the mesh that goes on (DeviceMesh.rebind tells it)"
    if onward.view.ranks.offset_of(rank) is None:
        return "this rank leaves the mesh"
    wanted = onward.groups(rank, record.key.options)
    if not wanted:
        return "no dim of the new mesh has this group's options"
    if after in wanted:
        return None
    near = max(wanted, key=lambda g: len(set(g) & set(after)))
    extra = [r for r in near if r not in before]
    if extra:
        return (f"its successor {near} brings ranks {extra} that were not its members (a "
                "spare in a failed rank's place, or ranks regrouped by a re-factor): Gloo "
                "reconfigures only among a group's members")
    if set(near) == set(after):
        return f"the new mesh orders its survivors differently ({near}, not {after})"
    return f"no group of the new mesh here is its survivors {after} (nearest: {near})"


def reconfigure_group(record: CreationRecord, after: tuple[int, ...], lost: frozenset[int],
                      *, rank: int, rendezvous: Rendezvous, timeout: timedelta) -> float:
    """Re-form ``record``'s group among ``after`` (its survivors, in its order) in place:
    every member of ``after`` calls this for the same group and loss.  Returns the seconds
    it took here (barrier and torch's re-forming)."""
    from . import _torch_private as private

    group = record.group
    name = str(group.group_name)
    gone = sorted(r for r in members(record.key.family, rank) if r in lost)
    digest = hashlib.sha1(f"{name}|{gone}".encode()).hexdigest()
    start = time.monotonic()
    notes = rendezvous.agree(f"reconf/{digest[:16]}", sorted(after), timeout.total_seconds(),
                             f"{rank} {private.reconfigure_handle(group)}")
    handles: dict[int, str] = {}
    for line in notes:
        who, _, handle = line.partition(" ")
        handles[int(who)] = handle
    missing = [r for r in after if r not in handles]
    if missing:
        raise RuntimeError(f"no reconfigure handle from ranks {missing} of {after}")
    work = private.reconfigure(int(digest[:15], 16), [handles[r] for r in after], group,
                               timeout)
    work.wait()
    private.set_group_ranks(group, after)
    if group.size() != len(after) or group.rank() != after.index(rank):
        raise RuntimeError(f"torch re-formed the group as rank {group.rank()} of "
                           f"{group.size()}, not {after.index(rank)} of {len(after)}")
    took = time.monotonic() - start
    log.info("reconfigured %s in place: %s -> %s in %.3f s", name, gone, after, took)
    return took

