"""Executing a :class:`mesh.Reshard` plan over torch's point-to-point calls.

Every rank of either mesh calls :func:`reshard_tensor` with the same plan.  A rank posts
all its sends and receives as one ``batch_isend_irecv`` batch; a pair of ranks exchanges
at most one message each way (the plan groups a pair's boxes into one transfer), the
sender packs its boxes in the transfer's order and the receiver unpacks them in the same
order, so every send meets its receive and no order between ranks can deadlock.  A
partial source's contributions are reduced at the destination, as the plan says.
"""

from __future__ import annotations

from typing import Any

import mesh
from layout import show

from .._core import BackendConfigError

__all__ = ["reshard_tensor"]


def _checked(plan: object, local: Any, rank: int) -> tuple[bool, bool]:
    """(in the source, in the destination) for ``rank``; a typed error for a local tensor
    that does not fit the plan."""
    import torch

    if not isinstance(plan, mesh.Reshard):
        raise BackendConfigError(f"reshard_tensor needs a mesh.Reshard plan, got {show(plan)}")
    in_src = plan.src.view.coordinate(rank) is not None
    in_dst = plan.dst.view.coordinate(rank) is not None
    if in_src and not isinstance(local, torch.Tensor):
        raise BackendConfigError(f"rank {rank} is in the plan's source: pass its local tensor "
                                 f"of shape {plan.src.local_shape(rank)}, got {show(local)}")
    if not in_src and local is not None:
        raise BackendConfigError(f"rank {rank} is not in the plan's source: pass None as its "
                                 f"local tensor, got {show(local)}")
    if in_src and tuple(local.shape) != plan.src.local_shape(rank):
        raise BackendConfigError(f"rank {rank}'s local tensor has shape {tuple(local.shape)}; "
                                 f"the plan's source gives it {plan.src.local_shape(rank)}")
    return in_src, in_dst


def reshard_tensor(plan: mesh.Reshard, local: Any, *, group: Any = None, dtype: Any = None,
                   device: Any = None) -> Any:
    """Move this rank's part of a tensor as ``plan`` says; return its destination local
    tensor (None if this rank is not in the destination).

    ``local`` is this rank's source local tensor (None if it is not in the source).  Every
    rank of either mesh must call this, with the same plan, in the same order with other
    collectives.  Transfers go over ``group`` (default: the world), which must hold every
    rank of both meshes.  ``dtype`` and ``device`` are the destination's where this rank
    has no source tensor to take them from (default: float32 on the CPU).
    """
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    in_src, in_dst = _checked(plan, local, rank)
    dtype = local.dtype if in_src else (dtype or torch.float32)
    device = local.device if in_src else (device or torch.device("cpu"))
    ops = []
    for t in plan.sends(rank):
        parts = [local[plan.src.local_slices(rank, box)].reshape(-1) for box in t.boxes]
        ops.append(dist.P2POp(dist.isend, torch.cat(parts).contiguous(), t.dest, group))
    inbox = []
    for t in plan.receives(rank):
        buf = torch.empty(t.elements, dtype=dtype, device=device)
        inbox.append((t, buf))
        ops.append(dist.P2POp(dist.irecv, buf, t.source, group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    if not in_dst:
        return None
    return _assembled(plan, rank, local, inbox, dtype, device)


def _assembled(plan: mesh.Reshard, rank: int, local: Any, inbox: list[tuple[Any, Any]],
               dtype: Any, device: Any) -> Any:
    """``rank``'s destination block from what it received and what it keeps, a partial
    source's contributions reduced."""
    import torch

    shape = plan.dst.local_shape(rank)
    blocks: dict[tuple[int, ...], Any] = {}

    def block(contribution: tuple[int, ...]) -> Any:
        if contribution not in blocks:
            blocks[contribution] = torch.zeros(shape, dtype=dtype, device=device)
        return blocks[contribution]

    keep = plan.keeps(rank)
    if keep is not None:
        out = block(keep.contribution)
        for box in keep.boxes:
            out[plan.dst.local_slices(rank, box)] = local[plan.src.local_slices(rank, box)]
    for t, buf in inbox:
        out, at = block(t.contribution), 0
        for box in t.boxes:
            where = plan.dst.local_slices(rank, box)
            n = out[where].numel()
            out[where] = buf[at:at + n].reshape(out[where].shape)
            at += n
    values = list(blocks.values()) or [torch.zeros(shape, dtype=dtype, device=device)]
    ops = [p.op for p in plan.src.placements if isinstance(p, mesh.Partial)]
    if not ops:
        return values[0]
    if ops[0] in ("sum", "avg"):
        total = torch.stack(values).sum(0)
        return total / len(values) if ops[0] == "avg" else total
    stacked = torch.stack(values)
    return stacked.amax(0) if ops[0] == "max" else stacked.amin(0)
