"""Acting on a recovery decision on a live job: :func:`apply_recovery` (ARCHITECTURE §9, the
act).

Every process still up calls it with the same :class:`mesh.Way` (every rank computes it from
the same failure with :func:`mesh.recover`): the ranks of the old world, those the way keeps
and those it leaves out (a healthy rank that a drop leaves out still sends what it holds),
and the spares it brings in.  In order:

1. **Groups**: the job's mesh is rebound to the way's world (:meth:`DeviceMesh.rebind`): the
   survivors meet once in the store, every intact group is kept, and every group holding a
   lost rank is either reconfigured in place (Gloo on torch >= 2.14, where its survivors in
   its order are a group of the new mesh: a dim shrunk by a drop) or ended without waiting
   on it, its successor created lazily with the order-safe creation; either way a group's
   rank is its mesh coordinate.  ``Recovered.groups`` says what became of each broken group
   on this rank, and why it was not reconfigured in place (e.g. a spare joins it: Gloo
   reconfigures only among a group's members).
2. **State**: every tensor's move (``way.moves``: a :class:`mesh.Reshard` from what the ranks
   still up hold, the failed ones sending nothing) in one ``batch_isend_irecv`` with at most
   one message each way per pair of ranks (:func:`~backend.reshard_state`).
3. **Lost boxes**: what no rank up holds (``Reshard.lost``), read from the DCP checkpoint
   box by box, only the saved chunks each box overlaps
   (:func:`~backend._tensor.read_boxes`).
4. **Result**: each tensor's new local block, and, with ``dtensors=True``, a DTensor on a
   torch mesh (``to_torch()`` of a facade mesh) over its new view, with its new placements.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import attrs

import mesh
from layout import show

from .._core import BackendConfigError, Reformed
from .._tensor import read_boxes, reshard_state, to_torch_placements
from ._device_mesh import DeviceMesh

__all__ = ["Recovered", "apply_recovery"]


@attrs.frozen
class Recovered:
    """What :func:`apply_recovery` did on this rank.

    ``mesh``: the job's mesh rebound to the way's world, None on a rank the way leaves out
    (it sent what it held and may exit); ``state``: tensor name -> this rank's new local
    tensor (or DTensor), for the tensors whose new sharding holds this rank; ``seconds``:
    how long each step took here (``groups``, ``moves``, ``storage``, ``total``);
    ``storage_elements``: how many elements this rank read from the checkpoint; ``groups``:
    each group this rank held that the failure broke, and how it goes on (a
    :class:`~backend.Reformed`: reconfigured in place, shrunk, or ended with the reason it
    could not be reconfigured).
    """

    mesh: DeviceMesh[Any] | None
    state: Mapping[str, Any]
    seconds: Mapping[str, float]
    storage_elements: int
    groups: tuple[Reformed, ...] = ()


def _local(value: Any) -> Any:
    """A state entry's local tensor: a DTensor's ``to_local()``, a tensor as it is."""
    to_local = getattr(value, "to_local", None)
    return to_local() if callable(to_local) else value


def _checked(way: object, state: object, job: object, world: str) -> mesh.Way:
    if not isinstance(way, mesh.Way):
        raise BackendConfigError(f"apply_recovery needs a mesh.Way (from mesh.recover), got "
                                 f"{show(way)}")
    if way.kind in ("restart", "wait"):  # a Kind is its value as a string
        raise BackendConfigError(
            f"apply_recovery acts on a way that goes on without a restart; {way.label!r} "
            f"({way.kind.value}) is the launcher's to act on: restart every worker from the "
            "checkpoint, or wait for the failed ranks' repair")
    if not isinstance(state, Mapping):
        raise BackendConfigError(f"apply_recovery: state must be a mapping tensor name -> this "
                                 f"rank's tensor, got {show(state)}")
    unknown = sorted(set(state) - set(way.moves), key=str)
    if unknown:
        raise BackendConfigError(f"apply_recovery: the way moves no tensor named {unknown[:5]} "
                                 f"(it moves {sorted(way.moves)[:5]}...)")
    if not isinstance(job, DeviceMesh):
        raise BackendConfigError(f"apply_recovery: device_mesh must be the job's DeviceMesh, "
                                 f"got {show(job)}")
    if world not in way.views:
        raise BackendConfigError(f"apply_recovery: the way has no view {world!r} to rebind the "
                                 f"job's mesh to; its views are {sorted(way.views)}")
    return way


def _dtypes(way: mesh.Way, locals_: Mapping[str, Any], dtypes: Mapping[str, Any] | None,
            rank: int) -> dict[str, Any]:
    """Each tensor's dtype this rank needs: its own tensor's, else what ``dtypes`` gives; a
    tensor it will receive and holds none of, with no dtype given, is refused (a guess that
    differs from the senders' changes a message's size, which Gloo answers by aborting)."""
    out = {n: t.dtype for n, t in locals_.items() if t is not None}
    out.update({n: d for n, d in (dtypes or {}).items() if n not in out})
    unknown = sorted(n for n, plan in way.moves.items() if n not in out and
                     (plan.receives(rank) or plan.dst.view.coordinate(rank) is not None))
    if unknown:
        raise BackendConfigError(
            f"apply_recovery: rank {rank} receives {unknown[:5]} and holds none of them: "
            f"name their dtypes (dtypes={{{unknown[0]!r}: torch.float32, ...}}), the ones the "
            "ranks that send them hold")
    return out


def _checked_checkpoint(way: mesh.Way, checkpoint: str | None) -> None:
    """The checkpoint holds every tensor the way reads from it, at its shape: checked on
    every rank before anything moves (a rank that found it wanting after the others went on
    would leave them waiting on it)."""
    wanted = sorted(n for n, boxes in way.lost.items() if boxes)
    if not wanted:
        return
    if checkpoint is None:
        raise BackendConfigError(
            f"apply_recovery: the way {way.label!r} needs a checkpoint: no rank still up holds "
            f"{sum(len(way.lost[n]) for n in wanted)} boxes of {wanted[:5]}")
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        saved = FileSystemReader(checkpoint).read_metadata().state_dict_metadata
    except Exception as e:
        raise BackendConfigError(f"apply_recovery: cannot read the checkpoint {checkpoint!r}: "
                                 f"{type(e).__name__}: {e}") from None
    for name in wanted:
        md, shape = saved.get(name), way.moves[name].dst.shape
        if not isinstance(md, TensorStorageMetadata) or tuple(md.size) != shape:
            found = tuple(md.size) if isinstance(md, TensorStorageMetadata) else None
            raise BackendConfigError(
                f"apply_recovery: the checkpoint {checkpoint!r} must hold {name!r} of shape "
                f"{shape}: it holds {'no such tensor' if found is None else found}")


def apply_recovery(way: mesh.Way, state: Mapping[str, Any], *, device_mesh: DeviceMesh[Any],
                   world: str = "world", checkpoint: str | os.PathLike[str] | None = None,
                   dtypes: Mapping[str, Any] | None = None, group: Any = None,
                   dtensors: bool = False) -> Recovered:
    """Act on ``way`` on this rank: rebind the job's ``device_mesh`` to ``way.views[world]``, move
    the state as ``way.moves`` says in one batch, read the boxes no rank up holds from the
    DCP ``checkpoint``, and return this rank's new blocks (see the module).

    Every process still up calls it, with the same way, before any other collective: the
    ranks of the old world (those the way leaves out send what they hold, then get no mesh
    back) and the way's spares (their ``device_mesh`` is the job's mesh as they built it,
    which they are not in).  ``state`` maps tensor names (those of ``way.moves``) to this rank's
    tensor under the old sharding (a local tensor or a DTensor); a rank holding none of a
    tensor leaves it out.  A rank that receives a tensor it held none of learns its dtype
    from ``dtypes`` (required there: the dtype the senders hold).  Transfers go over ``group``
    (default: the world, numbered by global rank).  ``dtensors=True`` returns DTensors on
    each tensor's new view (``to_torch()`` of a facade mesh over it, bound to the job's
    backend; torch placements from the new sharding).

    Everything that can refuse is checked on every rank before any rank waits on another:
    the way and the state, the dtypes this rank needs, and, for a way whose elements no rank
    up holds, a ``checkpoint`` holding each such tensor at its shape (a typed error, raised
    alike on every rank where the input is alike; a rank whose own input alone is refused
    leaves the others waiting in the rebind's store barrier until the backend's timeout, not
    in a transfer that never ends).
    """
    started = time.monotonic()
    way = _checked(way, state, device_mesh, world)
    ckpt = None if checkpoint is None else os.fspath(checkpoint)
    rank = device_mesh.get_rank()
    lost = {n: p.lost(rank) for n, p in way.moves.items()}
    locals_ = {n: _local(v) for n, v in state.items()}
    kinds = _dtypes(way, locals_, dtypes, rank)  # every check that can fail, before any wait
    _checked_checkpoint(way, ckpt)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    new_view = way.views[world]
    goes_on = new_view.ranks.offset_of(rank) is not None
    rebound = device_mesh.rebind(new_view)
    reformed = getattr(device_mesh.backend, "reformed", ())
    seconds["groups"] = time.monotonic() - t
    t = time.monotonic()
    moved = reshard_state(way.moves, locals_, dtypes=kinds, group=group)
    seconds["moves"] = time.monotonic() - t
    t = time.monotonic()
    read = _fill_lost(way, moved, lost, ckpt, rank) if ckpt is not None else 0
    seconds["storage"] = time.monotonic() - t
    out = {n: v for n, v in moved.items() if v is not None}
    if dtensors:
        out = {n: _dtensor(v, way.moves[n].dst, rebound) for n, v in out.items()}
    seconds["total"] = time.monotonic() - started
    return Recovered(rebound if goes_on else None, out, seconds, read, tuple(reformed))


def _fill_lost(way: mesh.Way, moved: dict[str, Any], lost: Mapping[str, tuple[Any, ...]],
               checkpoint: str, rank: int) -> int:
    """Write the boxes no rank up held into this rank's new blocks, read from the checkpoint;
    returns the elements read."""
    wanted = {n: list(boxes) for n, boxes in lost.items() if boxes}
    if not wanted:
        return 0
    got = read_boxes(checkpoint, wanted)
    count = 0
    for name, boxes in wanted.items():
        dst, block = way.moves[name].dst, moved[name]
        for box, value in zip(boxes, got[name]):
            block[dst.local_slices(rank, box)] = value.to(block.dtype)
            count += value.numel()
    return count


def _dtensor(local: Any, sharding: mesh.Sharding, job: DeviceMesh[Any]) -> Any:
    """``local`` as a DTensor on a facade mesh over ``sharding``'s view (bound to the job's
    backend: groups shared per family with every other mesh of it)."""
    import torch
    from torch.distributed.tensor import DTensor

    from ._entry import bind

    on = bind(sharding.view, job.backend, device_type=job.device_type).to_torch()
    return DTensor.from_local(local, on, to_torch_placements(sharding),
                              shape=torch.Size(sharding.shape),
                              stride=_contiguous(sharding.shape))


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))
