"""Executing :class:`mesh.Reshard` plans over torch's point-to-point calls: one tensor
(:func:`reshard_tensor`), or a whole state dict in one batch (:func:`reshard_state`).

Every rank of either mesh calls :func:`reshard_tensor` with the same plan.  A rank posts
all its sends and receives as one ``batch_isend_irecv`` batch; a pair of ranks exchanges
at most one message each way (the plan groups a pair's boxes into one transfer), the
sender packs its boxes in the transfer's order and the receiver unpacks them in the same
order, so every send meets its receive and no order between ranks can deadlock (it is
:func:`reshard_state` of one tensor).

A model's state is hundreds of tensors, and one batch each costs a round of messages each
(200 small tensors moved one by one took 1.2-1.9 s here against 0.02-0.04 s for the same
bytes in one message): :func:`reshard_state` posts one batch for every tensor of a state,
at most one message each way per pair of ranks, the sender packing the bytes of the pair's
transfers (any dtypes) tensor by tensor in name order, box by box in each plan's order, and
the receiver unpacking them in the same order.  Every rank computes the same message sizes
from the same plans and dtypes.  A partial source's contributions are reduced
at the destination, as the plan says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mesh
from layout import show

from .._core import BackendConfigError

__all__ = ["reshard_state", "reshard_tensor"]


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

    in_src, _ = _checked(plan, local, dist.get_rank())
    kind = local.dtype if in_src else (dtype or torch.float32)
    moved = reshard_state({"": plan}, {"": local}, dtypes={"": kind}, group=group,
                          device=device)
    return moved[""]


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


def _named_plans(plans: object) -> list[tuple[str, mesh.Reshard]]:
    """The plans in name order (the same on every rank, whatever order a mapping was built in)."""
    if not isinstance(plans, Mapping):
        raise BackendConfigError(f"reshard_state takes a mapping tensor name -> mesh.Reshard, "
                                 f"got {show(plans)}")
    out = []
    for name, plan in plans.items():
        if not isinstance(name, str):
            raise BackendConfigError(f"reshard_state: tensor names must be strings, got "
                                     f"{show(name)}")
        if not isinstance(plan, mesh.Reshard):
            raise BackendConfigError(f"reshard_state: the plan of {name!r} must be a "
                                     f"mesh.Reshard, got {show(plan)}")
        out.append((name, plan))
    return sorted(out, key=lambda item: item[0])


def _dtype(name: str, local: Any, dtypes: Mapping[str, Any] | None) -> Any:
    """The tensor's dtype: its local source tensor's, else the one ``dtypes`` gives (a rank
    that only receives cannot guess it: a wrong guess changes the message's size)."""
    given = None if dtypes is None else dtypes.get(name)
    if local is not None:
        if given is not None and given != local.dtype:
            raise BackendConfigError(f"reshard_state: {name!r} is {local.dtype} here, but "
                                     f"dtypes gives {given}")
        return local.dtype
    if given is None:
        raise BackendConfigError(f"reshard_state: this rank holds no source of {name!r} and "
                                 f"dtypes does not name its dtype (dtypes={{{name!r}: ...}})")
    return given


Side = tuple[str, mesh.Reshard, Any, tuple[bool, bool]]
Incoming = dict[int, list[tuple[str, Any, int]]]  # peer -> (tensor name, transfer, bytes)


def reshard_state(plans: Mapping[str, mesh.Reshard], state: Mapping[str, Any], *,
                  dtypes: Mapping[str, Any] | None = None, group: Any = None,
                  device: Any = None) -> dict[str, Any]:
    """Move this rank's part of every tensor of a state as its plan says, in one
    ``batch_isend_irecv`` with at most one message each way per peer; return each tensor's
    destination local tensor (None where this rank is not in that tensor's destination).

    ``plans`` maps a tensor name to its :class:`mesh.Reshard`; ``state`` maps the same names
    to this rank's source local tensor (None, or absent, where it holds none).  ``dtypes``
    names the dtype of each tensor this rank receives but holds no source of.  Every rank of
    any plan must call this with the same plans, in the same order with other collectives;
    transfers go over ``group`` (default: the world), which must hold every rank of every
    plan.  ``device`` is where a rank with no source of a tensor builds it (default: the CPU).

    >>> # new = reshard_state({"w": mesh.reshard(old_w, new_w)}, {"w": w_local})["w"]
    """
    import torch
    import torch.distributed as dist

    named = _named_plans(plans)
    if not isinstance(state, Mapping):
        raise BackendConfigError(f"reshard_state: state must be a mapping tensor name -> local "
                                 f"tensor, got {show(state)}")
    unknown = sorted(set(state) - {n for n, _ in named}, key=str)
    if unknown:
        raise BackendConfigError(f"reshard_state: state names {unknown[:5]} that no plan moves")
    rank = dist.get_rank()
    device = device or torch.device("cpu")
    sides: list[Side] = [
        (n, p, state.get(n), _checked(p, state.get(n), rank)) for n, p in named]
    kinds = {n: _dtype(n, local, dtypes) for n, plan, local, (_, in_dst) in sides
             if local is not None or in_dst or plan.receives(rank)}  # what this rank needs
    outgoing, incoming = _packed(sides, kinds, rank)
    received = _exchanged(outgoing, incoming, kinds, group, device)
    return {name: _assembled(plan, rank, local, received.get(name, []), kinds[name],
                            local.device if local is not None else device)
            if in_dst else None
            for name, plan, local, (_, in_dst) in sides}


def _packed(sides: list[Side], kinds: Mapping[str, Any], rank: int
            ) -> tuple[dict[int, list[Any]], Incoming]:
    """What this rank sends each peer (its boxes' bytes, tensor by tensor in name order) and
    what it receives from each (the transfers and their sizes in bytes, in the same order)."""
    import torch

    outgoing: dict[int, list[Any]] = {}
    incoming: Incoming = {}
    for name, plan, local, _ in sides:
        if name not in kinds:
            continue  # this rank neither holds, sends nor receives any of it
        size = torch.empty((), dtype=kinds[name]).element_size()
        for t in plan.sends(rank):
            parts = [local[plan.src.local_slices(rank, box)].reshape(-1) for box in t.boxes]
            outgoing.setdefault(t.dest, []).append(
                torch.cat(parts).contiguous().view(torch.uint8))
        for t in plan.receives(rank):
            incoming.setdefault(t.source, []).append((name, t, t.elements * size))
    return outgoing, incoming


def _exchanged(outgoing: dict[int, list[Any]], incoming: Incoming, kinds: Mapping[str, Any],
               group: Any, device: Any) -> dict[str, list[tuple[Any, Any]]]:
    """One ``batch_isend_irecv``, one message each way per peer; each tensor's received
    pieces, as (transfer, values)."""
    import torch
    import torch.distributed as dist

    ops, inbox = [], []
    for peer in sorted(outgoing):
        ops.append(dist.P2POp(dist.isend, torch.cat(outgoing[peer]), peer, group))
    for peer in sorted(incoming):
        buf = torch.empty(sum(n for _, _, n in incoming[peer]), dtype=torch.uint8,
                          device=device)
        inbox.append((peer, buf))
        ops.append(dist.P2POp(dist.irecv, buf, peer, group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    received: dict[str, list[tuple[Any, Any]]] = {}
    for peer, buf in inbox:
        at = 0
        for name, t, n in incoming[peer]:
            received.setdefault(name, []).append((t, buf[at:at + n].clone().view(kinds[name])))
            at += n
    return received
