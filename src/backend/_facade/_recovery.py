"""Acting on a recovery decision on a live job: :func:`apply_recovery` (ARCHITECTURE §9, the
act).

Every process still up calls it with the same :class:`mesh.Way` (every rank computes it from
the same failure with :func:`mesh.recover`): the ranks of the old world, those the way keeps
and those it leaves out (a healthy rank that a drop leaves out still sends what it holds),
and the spares it brings in.  In order:

1. **Groups**: the job's mesh is rebound to the way's world (:meth:`DeviceMesh.rebind`): the
   survivors meet once in the store, every group holding a lost rank is ended without
   waiting on it, every intact group is kept, and new groups are created lazily with the
   order-safe creation, so a group's rank is its mesh coordinate.
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

from .._core import BackendConfigError
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
    ``storage_elements``: how many elements this rank read from the checkpoint.
    """

    mesh: DeviceMesh[Any] | None
    state: Mapping[str, Any]
    seconds: Mapping[str, float]
    storage_elements: int


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
            checkpoint: str | None) -> dict[str, Any]:
    """Each tensor's dtype: this rank's tensor's, else ``dtypes``, else the checkpoint's."""
    out = {n: t.dtype for n, t in locals_.items() if t is not None}
    out.update({n: d for n, d in (dtypes or {}).items() if n not in out})
    missing = [n for n in way.moves if n not in out]
    if missing and checkpoint is not None:
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        saved = FileSystemReader(checkpoint).read_metadata().state_dict_metadata
        for n in missing:
            properties = getattr(saved.get(n), "properties", None)
            if properties is not None:
                out[n] = properties.dtype
    return out


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
    from ``dtypes``, else from the checkpoint's metadata.  Transfers go over ``group``
    (default: the world, numbered by global rank).  ``dtensors=True`` returns DTensors on
    each tensor's new view (``to_torch()`` of a facade mesh over it, bound to the job's
    backend; torch placements from the new sharding).

    A way whose elements no rank up holds needs ``checkpoint``: without it the call is
    refused, typed, on every rank, before anything moves.
    """
    started = time.monotonic()
    way = _checked(way, state, device_mesh, world)
    ckpt = None if checkpoint is None else os.fspath(checkpoint)
    rank = device_mesh.get_rank()
    lost = {n: p.lost(rank) for n, p in way.moves.items()}
    if ckpt is None and any(way.lost.values()):
        raise BackendConfigError(
            f"apply_recovery: the way {way.label!r} needs a checkpoint: no rank still up holds "
            f"{sum(len(b) for b in way.lost.values())} boxes of "
            f"{sorted(n for n, b in way.lost.items() if b)[:5]}")
    seconds: dict[str, float] = {}
    t = time.monotonic()
    new_view = way.views[world]
    goes_on = new_view.ranks.offset_of(rank) is not None
    rebound = device_mesh.rebind(new_view)
    seconds["groups"] = time.monotonic() - t
    t = time.monotonic()
    locals_ = {n: _local(v) for n, v in state.items()}
    moved = reshard_state(way.moves, locals_, dtypes=_dtypes(way, locals_, dtypes, ckpt),
                          group=group)
    seconds["moves"] = time.monotonic() - t
    t = time.monotonic()
    read = _fill_lost(way, moved, lost, ckpt, rank) if ckpt is not None else 0
    seconds["storage"] = time.monotonic() - t
    out = {n: v for n, v in moved.items() if v is not None}
    if dtensors:
        out = {n: _dtensor(v, way.moves[n].dst, rebound) for n, v in out.items()}
    seconds["total"] = time.monotonic() - started
    return Recovered(rebound if goes_on else None, out, seconds, read)


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
