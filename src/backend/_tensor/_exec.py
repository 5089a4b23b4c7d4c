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
bytes in one message): :func:`reshard_state` posts one payload batch for every tensor of a
state, at most one message each way per pair of ranks, the sender packing the bytes of the pair's
transfers (any dtypes) tensor by tensor in name order, box by box in each plan's order, and
the receiver unpacking them in the same order.  Every rank computes the same message sizes
from the same plans and dtypes.  A partial source's contributions are reduced
at the destination, as the plan says.  Given a :class:`mesh.StateReshard` instead
(``mesh.reshard_state`` under a memory cap), it moves the state bucket by bucket, in the
plan's order: each bucket one such batch (its headers first), its blocks assembled before
the next moves, so no rank holds more send and receive buffers at once than the cap.

A receiver cannot see the sender's dtype, and a message longer than its buffer aborts the
process on Gloo (and hangs or corrupts on NCCL), so the payload batch is preceded by a
header batch, 32 bytes each way per peer: each side's digest of the (tensor, dtype, bytes)
it sends and expects.  A pair whose headers disagree (a receiver told another dtype than
the sender holds, or two ranks running different plans) moves nothing; both of its ranks
raise a typed error once the other pairs have moved, so no rank waits for a message that
never comes.  Before the headers, the ranks compare their plans' digests over the store
(:mod:`._agree`): a rank given another plan moving the same bytes per pair would pass the
headers and move wrong elements, and one expecting a peer its peer's plan does not name
would wait for ever; both are a typed error on every rank of the plans instead.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any, Literal, overload

import attrs

import mesh
from layout import show

from .._core import BackendConfigError
from ._agree import same_plans
from ._work import StateWork

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
                   device: Any = None, source_dtype: Any = None, into: Any = None,
                   group_ranks: bool = False) -> Any:
    """Move this rank's part of a tensor as ``plan`` says; return its destination local
    tensor (None if this rank is not in the destination).

    ``local`` is this rank's source local tensor (None if it is not in the source).  Every
    rank of either mesh must call this, with the same plan, in the same order with other
    collectives.  Transfers go over ``group`` (default: the world), which must hold every
    rank of both meshes.  ``dtype``: the destination tensor's dtype, converted at this rank
    once the elements arrive (they move in the source's dtype; default: that one).
    ``source_dtype``: the source's dtype, named where this rank has no source tensor to take
    it from (default: ``dtype``, else ``into``'s, else float32; a wrong one is a typed error
    on both ranks of the pair, before it moves anything).  ``device``: where a rank with no
    source tensor builds its block (default: the CPU).  ``into``: an existing tensor of this
    rank's destination shape (and of ``dtype``, if given) that receives the block and is
    returned (:func:`reshard_state` says how it is checked).  ``group_ranks``: the plan
    numbers ``group``'s own ranks (as :func:`reshard_state` says).
    """
    import torch

    in_src, _ = _checked(plan, local, _numbered(group, group_ranks)[0])
    kind = local.dtype if in_src else (source_dtype or dtype or getattr(into, "dtype", None)
                                       or torch.float32)
    moved = reshard_state({"": plan}, {"": local}, dtypes=None if dtype is None else {"": dtype},
                          source_dtypes={"": kind}, into=None if into is None else {"": into},
                          group=group, device=device, group_ranks=group_ranks)
    return moved[""]


def _assembled(plan: mesh.Reshard, rank: int, local: Any, inbox: list[tuple[Any, Any]],
               dtype: Any, device: Any, reduced: dict[Any, Any], target: Any = None) -> Any:
    """``rank``'s destination block from what it received and what it keeps, a partial
    source's contributions reduced (``reduced``: the parts this rank reduced itself, where
    the sums happen on the way).  ``target``: an ``into`` tensor, written in place where
    nothing is reduced (each piece converted to its dtype as it is placed)."""
    import torch

    if _staged(plan):
        return _assembled_staged(plan, rank, inbox, dtype, device, reduced)
    # every element arrives once (kept, received, or later read from the checkpoint as
    # plan.lost says): zeros only where some may not (a partial source, lost boxes)
    fresh = (torch.zeros if plan.src.partial_dims or plan.dst.partial_dims or plan.lost(rank)
             else torch.empty)
    first = None
    if target is not None and not plan.src.partial_dims and plan.divisor == 1:
        first = target.zero_() if fresh is torch.zeros else target

    def new(shape: tuple[int, ...]) -> Any:
        return fresh(shape, dtype=dtype, device=device)

    return plan.assemble(rank, _pieces(plan, rank, local, inbox), new, _reduced, first)


def _pieces(plan: mesh.Reshard, rank: int, local: Any, inbox: list[tuple[Any, Any]]
            ) -> Iterator[tuple[tuple[int, ...], Any, Any]]:
    """What ``rank`` places in its block: the boxes it keeps, from its source tensor, then
    each received transfer's boxes, unpacked in order from its buffer."""
    keep = plan.keeps(rank)
    if keep is not None:
        for box in keep.boxes:
            yield keep.contribution, box, local[plan.src.local_slices(rank, box)]
    for t, buf in inbox:
        for box, values in _unpacked(t, buf):
            yield t.contribution, box, values


def _unpacked(t: mesh.Transfer, buf: Any) -> Iterator[tuple[Any, Any]]:
    """Transfer ``t``'s boxes with their values, packed in ``buf`` in order (a box lies in
    one run of the receiver's indices: its local shape is its extents)."""
    at = 0
    for box in t.boxes:
        shape = tuple(b - a for a, b in box)
        n = math.prod(shape)
        yield box, buf[at:at + n].reshape(shape)
        at += n


def _assembled_staged(plan: mesh.Reshard, rank: int, inbox: list[tuple[Any, Any]],
                      dtype: Any, device: Any, reduced: dict[Any, Any]) -> Any:
    """:func:`_assembled` where the sums happen on the way: the reduced parts this rank
    keeps and those it receives at stage 2."""
    import torch

    out = torch.zeros(plan.dst.local_shape(rank), dtype=dtype, device=device)
    keep = plan.keeps(rank)
    for box in () if keep is None else keep.boxes:
        out[plan.dst.local_slices(rank, box)] = reduced[box]
    for t, buf in inbox:
        for box, values in _unpacked(t, buf) if t.stage == 2 else ():  # (a reducer's stage-1
            out[plan.dst.local_slices(rank, box)] = values  # receipts are summed already)
    return out / plan.divisor if plan.divisor > 1 else out


def _sums(plan: mesh.Reshard, rank: int, local: Any, inbox: list[tuple[Any, Any]]
          ) -> dict[Any, Any]:
    """The parts ``rank`` reduces (:meth:`mesh.Reshard.reduces`), by box: its own
    contribution with those it received at stage 1."""
    parts = {box: local[plan.src.local_slices(rank, box)].clone() for box in plan.reduces(rank)}
    if not parts:
        return parts
    op = next(p.op for p in plan.src.placements if isinstance(p, mesh.Partial))
    for t, buf in inbox:
        for box, piece in _unpacked(t, buf) if t.stage == 1 else ():
            part = parts[box]
            if op in ("sum", "avg"):
                part += piece
            else:
                torch_max_min = part.maximum if op == "max" else part.minimum
                parts[box] = torch_max_min(piece)
    if op == "avg":
        parts = {box: part / plan.summed for box, part in parts.items()}
    return parts


def _reduced(values: list[Any], op: str) -> Any:
    import torch

    stacked = torch.stack(values)
    if op in ("sum", "avg"):
        total = stacked.sum(0)
        return total / len(values) if op == "avg" else total
    return stacked.amax(0) if op == "max" else stacked.amin(0)


def _named_plans(plans: object) -> list[tuple[str, mesh.Reshard]]:
    """The plans in name order (the same on every rank, whatever order a mapping was built
    in); a state plan's in its own order."""
    if isinstance(plans, mesh.StateReshard):
        return list(plans.named)
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


def _wire(name: str, local: Any, source_dtypes: Mapping[str, Any], want: Any) -> Any:
    """The dtype the tensor moves in: its local source tensor's, else the one
    ``source_dtypes`` gives, else the destination's asked for (``want``; a rank that only
    receives cannot see it, and a wrong one changes the message's size: the headers catch
    it)."""
    given = source_dtypes.get(name)
    if local is not None:
        if given is not None and given != local.dtype:
            raise BackendConfigError(f"reshard_state: {name!r} is {local.dtype} here, but "
                                     f"source_dtypes gives {given}")
        return local.dtype
    if given is None and want is None:
        raise BackendConfigError(
            f"reshard_state: this rank holds no source of {name!r} and neither "
            f"source_dtypes, dtypes nor into names its dtype (source_dtypes={{{name!r}: ...}}: "
            "the dtype its senders hold)")
    return given if given is not None else want


def _wanted(name: str, dtypes: Mapping[str, Any], into: Mapping[str, Any]) -> Any:
    """The destination dtype asked for: ``dtypes``', else ``into``'s tensor's (None: the
    dtype it moves in); refused where the two differ."""
    kind, target = dtypes.get(name), into.get(name)
    have = getattr(target, "dtype", None)
    if kind is not None and have is not None and kind != have:
        raise BackendConfigError(f"reshard_state: {name!r}: dtypes asks for {kind}, but its "
                                 f"into tensor is {have}; give one dtype")
    return kind if kind is not None else have


def _checked_into(name: str, plan: mesh.Reshard, rank: int, target: Any, local: Any,
                  kind: Any, device: Any) -> None:
    """A typed error naming the value unless ``target`` can receive ``rank``'s block of
    ``name``: a tensor of its destination shape and of ``kind``, on ``device`` where one is
    given, sharing no memory with the source tensor ``local``."""
    import torch

    want = plan.dst.local_shape(rank) if plan.dst.view.coordinate(rank) is not None else None
    if want is None or not isinstance(target, torch.Tensor):
        raise BackendConfigError(
            f"reshard_state: into[{name!r}] must be a torch.Tensor of rank {rank}'s destination "
            f"shape" + (f" {want}" if want is not None else f", but rank {rank} is not in "
                        "its destination: give it no into tensor") + f"; got {show(target)}")
    fault = (f"has shape {tuple(target.shape)}; the destination gives rank {rank} {want}"
             if tuple(target.shape) != want else
             f"is {target.dtype}; the destination dtype asked for is {kind}"
             if target.dtype != kind else
             f"is on {target.device}, but device={device}"
             if device is not None and target.device != torch.device(device) else
             "shares memory with this rank's source tensor of it (give a tensor of its own)"
             if local is not None and target.untyped_storage().data_ptr() ==
             local.untyped_storage().data_ptr() else "")
    if fault:
        raise BackendConfigError(f"reshard_state: into[{name!r}] {fault}")


Side = tuple[str, mesh.Reshard, Any, tuple[bool, bool]]
Incoming = dict[int, list[tuple[str, Any, int]]]  # peer -> (tensor name, transfer, bytes)


@overload
def reshard_state(plans: mesh.StateReshard | Mapping[str, mesh.Reshard],
                  state: Mapping[str, Any], *,
                  dtypes: Mapping[str, Any] | None = ...,
                  source_dtypes: Mapping[str, Any] | None = ...,
                  into: Mapping[str, Any] | None = ..., group: Any = ...,
                  device: Any = ..., async_op: Literal[False] = ...,
                  group_ranks: bool = ...) -> dict[str, Any]: ...


@overload
def reshard_state(plans: mesh.StateReshard | Mapping[str, mesh.Reshard],
                  state: Mapping[str, Any], *,
                  dtypes: Mapping[str, Any] | None = ...,
                  source_dtypes: Mapping[str, Any] | None = ...,
                  into: Mapping[str, Any] | None = ..., group: Any = ...,
                  device: Any = ..., async_op: Literal[True],
                  group_ranks: bool = ...) -> StateWork: ...


def reshard_state(plans: mesh.StateReshard | Mapping[str, mesh.Reshard],
                  state: Mapping[str, Any], *,
                  dtypes: Mapping[str, Any] | None = None,
                  source_dtypes: Mapping[str, Any] | None = None,
                  into: Mapping[str, Any] | None = None, group: Any = None,
                  device: Any = None, async_op: bool = False,
                  group_ranks: bool = False) -> dict[str, Any] | StateWork:
    """Move this rank's part of every tensor of a state as its plan says, in one
    ``batch_isend_irecv`` with at most one message each way per peer; return each tensor's
    destination local tensor (None where this rank is not in that tensor's destination).

    ``plans`` maps a tensor name to its :class:`mesh.Reshard`; ``state`` maps the same names
    to this rank's source local tensor (None, or absent, where it holds none).  Every rank of
    any plan must call this with the same plans, in the same order with other collectives;
    transfers go over ``group`` (default: the world), which must hold every rank of every
    plan.  ``device`` is where a rank with no source of a tensor builds it (default: the CPU).
    ``plans`` may instead be a :class:`mesh.StateReshard` (``mesh.reshard_state``): its
    tensors move bucket by bucket, in its order, one batch per bucket (one message each way
    per peer in each), each bucket's blocks assembled before the next moves, so a rank's
    send and receive buffers stay within its ``cap``; every tensor must move in a dtype of
    its plan's ``itemsize`` (else a typed error on every rank, before anything moves), and
    the plans' agreement covers the buckets.
    A rank whose block of a tensor does not change (it receives none of it and keeps it
    where it was) gets its own tensor back, not a copy, as torch's ``redistribute`` to the
    same placements does.

    Elements move in their source's dtype (a partial source is reduced in it) and are
    converted where they arrive, so senders never need to know what each receiver asks:
    ``dtypes`` names the dtype of a destination tensor (a bf16 trainer's weights served in
    float16: ``dtypes={"w": torch.float16}``); ``source_dtypes`` the dtype a tensor moves in,
    which a rank that receives it but holds no source of it names (default: its ``dtypes``,
    else its ``into`` tensor's; a wrong one is a typed error on both ranks of each pair it
    concerns, before the pair moves anything).  ``into`` maps names to existing tensors that
    receive this rank's destination blocks in place and are returned (an inference engine's
    weights): each of the destination's local shape, of the dtype asked, on ``device`` if
    one is given, sharing no memory with this rank's source tensor; else a typed error
    naming it, before anything moves.

    Before its first message every rank of the plans compares their digest with the others'
    over the default store (:mod:`._agree`, a few store calls per rank): a rank given
    another plan is a typed error on every rank, naming it, before anything moves.

    With ``group_ranks=True`` the plans number ``group``'s own ranks (0 to its size - 1), not
    the world's: a trainer-inference group of its own, whose ranks 0-3 are the world's 4-7,
    takes plans over views of ranks 0-7 of that group; only its members call (the agreement
    keys on the group's name, so the same numbers in another group never meet).

    With ``async_op=True`` the call returns a :class:`StateWork` once the plans are agreed
    and this rank's arguments checked (their errors still raise here), and the move runs on
    a thread of its own, bucket by bucket, while the caller computes: ``work.bucket(k)``
    gives bucket ``k``'s tensors as soon as they land, ``work.wait()`` all of them (as the
    blocking call returns them) or the move's error.  Every rank must still make the same
    calls in the same order; collectives the caller makes meanwhile on other groups, or
    on the same one on Gloo, run beside it.

    >>> # new = reshard_state({"w": mesh.reshard(old_w, new_w)}, {"w": w_local})["w"]
    >>> # reshard_state(plans, {}, source_dtypes=bf16s, into=engine_weights)  # fp16 there
    >>> # reshard_state(mesh.reshard_state(old, new, itemsize=2, cap=1 << 30), bf16_weights)
    """
    named = _named_state(plans, state)
    rank, group = _numbered(group, group_ranks)
    whole = plans if isinstance(plans, mesh.StateReshard) else None
    sides, kinds, wants, targets = _ready(named, state, rank, dtypes, source_dtypes, into,
                                          device, whole, group)
    moving = _moving(whole, sides, kinds, wants, targets, rank, group, device or "cpu")
    if async_op:
        return StateWork(moving, 1 if whole is None else whole.buckets)
    out: dict[str, Any] = {}
    for landed in moving:
        out.update(landed)
    return out


def _moving(whole: mesh.StateReshard | None, sides: list[Side], kinds: dict[str, Any],
            wants: dict[str, Any], targets: dict[str, Any], rank: int, group: Any,
            device: Any) -> Iterator[dict[str, Any]]:
    """The move, bucket by bucket: each bucket's destination tensors once it landed; the
    typed error of :func:`_refuse` at the end where a pair disagreed (no bucket is given
    from the one where it did: every rank raises)."""
    bad: dict[int, str] = {}
    wrong: list[int] = []
    for part in _parts(whole, sides):
        received, sums, refused, short = _exchange(part, kinds, rank, group, device)
        for peer, text in refused.items():
            bad[peer] = f"{bad[peer]}; {text}" if peer in bad else text
        wrong += [peer for peer in short if peer not in wrong]
        if not (bad or wrong):  # nothing is returned once a pair disagreed: all raise
            yield _results(part, rank, kinds, wants, targets, received, sums, device)
    _refuse(rank, bad, wrong)


def _parts(whole: mesh.StateReshard | None, sides: list[Side]) -> Iterator[list[Side]]:
    """The sides moved together: each bucket's, in turn, or all of them at once."""
    if whole is None:
        yield sides
        return
    for k in range(whole.buckets):
        names = set(whole.bucket_of(k))
        yield [side for side in sides if side[0] in names]


def _exchange(sides: list[Side], kinds: dict[str, Any], rank: int, group: Any,
              device: Any) -> tuple[dict[str, list[Any]], dict[str, Any], dict[int, str],
                                    list[int]]:
    """One bucket's moves (headers, payloads, and the reduced parts where sums happen on
    the way): what arrived, this rank's sums, the peers whose headers disagreed (in words)
    and those that could not reduce what they send here."""
    outgoing, incoming, sending = _packed(sides, kinds, rank)
    later_in, later_out = _later(sides, kinds, rank)
    bad = _headers(_joined(sending, later_out, kinds), _joined(incoming, later_in, kinds),
                   group)
    received, _ = _moved(outgoing, incoming, kinds, group, device, bad)
    sums = {name: _sums(plan, rank, local, received.get(name, []))
            for name, plan, local, _ in sides if local is not None and _staged(plan)}
    wrong: list[int] = []
    if later_in or later_out:  # the reduced parts, once the sums are done
        wrong = _reduced_phase(sides, kinds, rank, sums, later_in, group, device, bad,
                               received)
    return received, sums, bad, wrong


def _ready(named: list[tuple[str, mesh.Reshard]], state: Mapping[str, Any], rank: int,
           dtypes: Mapping[str, Any] | None, source_dtypes: Mapping[str, Any] | None,
           into: Mapping[str, Any] | None, device: Any, whole: mesh.StateReshard | None,
           group: Any) -> tuple[list[Side], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """This rank's sides and :func:`_prepared`'s answers, once every rank of the plans has
    agreed it runs them (:func:`~._agree.same_plans`; a state plan's buckets included); a
    rank that refuses its arguments tells the others so before it raises, and they raise
    too."""
    salt = "" if whole is None else f"|state {whole.digest}"
    try:
        sides: list[Side] = [
            (n, p, state.get(n), _checked(p, state.get(n), rank)) for n, p in named]
        kinds, wants, targets = _prepared(sides, rank, dtypes, source_dtypes, into, device)
        if whole is not None:
            _sized(kinds, whole)
    except BackendConfigError:
        with contextlib.suppress(BackendConfigError):  # (this rank's own error is the one)
            same_plans(named, rank, _store(), refused=True, salt=salt, space=_space(group))
        raise
    same_plans(named, rank, _store(), salt=salt, space=_space(group))  # all agree, or all raise
    return sides, kinds, wants, targets


def _sized(kinds: Mapping[str, Any], whole: mesh.StateReshard) -> None:
    """A typed error unless every tensor this rank moves travels in a dtype of its plan's
    ``itemsize`` (the buckets' cap counts bytes in it)."""
    import torch

    plans = whole.plans
    for name, kind in kinds.items():
        size = torch.empty((), dtype=kind).element_size()
        if size != plans[name].itemsize:
            raise BackendConfigError(
                f"reshard_state: {name!r} moves as {kind} ({size} bytes an element), but its "
                f"plan counts itemsize={plans[name].itemsize} (mesh.reshard_state(..., "
                f"itemsize=...) sizes the buckets in it)")


def _refuse(rank: int, bad: Mapping[int, str], wrong: list[int]) -> None:
    """The typed error of a rank whose peers disagreed on what moves, once the others moved."""
    if bad or wrong:
        raise BackendConfigError(
            "reshard_state: rank " + str(rank) + " and its peers disagree on what "
            "moves (nothing moved between them): " + "; ".join(bad[p] for p in sorted(bad))
            + "".join(f"; rank {peer} could not reduce what it sends here (a peer of its "
                      "disagreed on what moves)" for peer in wrong))


def _prepared(sides: list[Side], rank: int, dtypes: Mapping[str, Any] | None,
              source_dtypes: Mapping[str, Any] | None, into: Mapping[str, Any] | None,
              device: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the dtype each tensor this rank needs moves in, the dtype asked of each, the
    ``into`` tensors), every check that can fail made before any message."""
    given = [_mapping(m, what) for m, what in ((dtypes, "dtypes"), (into, "into"),
                                               (source_dtypes, "source_dtypes"))]
    dtypes, into, source_dtypes = given
    unknown = sorted(set(into) - {n for n, *_ in sides}, key=str)
    if unknown:
        raise BackendConfigError(f"reshard_state: into names {unknown[:5]} that no plan moves")
    kinds, wants = {}, {}
    for name, plan, local, (_, in_dst) in sides:
        want = _wanted(name, dtypes, into)
        if local is not None or in_dst or plan.receives(rank):  # what this rank needs
            kinds[name] = _wire(name, local, source_dtypes, want)
            wants[name] = kinds[name] if want is None else want
        if name in into:
            _checked_into(name, plan, rank, into[name], local, want, device)
    return kinds, wants, dict(into)


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BackendConfigError(f"reshard_state: {what} must be a mapping tensor name -> "
                                 f"value, got {show(value)}")
    return value


def _results(sides: list[Side], rank: int, kinds: Mapping[str, Any], wants: Mapping[str, Any],
             targets: Mapping[str, Any], received: dict[str, list[Any]],
             sums: Mapping[str, Any], device: Any) -> dict[str, Any]:
    """Each tensor's destination block (None where ``rank`` is not in its destination), in
    the dtype asked, in its ``into`` tensor where one is given."""
    out: dict[str, Any] = {}
    for name, plan, local, (_, in_dst) in sides:
        if not in_dst:
            out[name] = None
            continue
        target = targets.get(name)
        value = (local if _unchanged(plan, rank, local, name in received) else
                 _assembled(plan, rank, local, received.get(name, []), kinds[name],
                            local.device if local is not None else device,
                            sums.get(name, {}), target))
        if target is not None:
            out[name] = target if value is target else target.copy_(value)
        else:
            out[name] = value if value.dtype == wants[name] else value.to(wants[name])
    return out


@attrs.frozen
class _Own:
    """A process group whose own ranks the plans number (``group_ranks=True``)."""

    group: Any


def _numbered(group: Any, own: bool) -> tuple[int, Any]:
    """This rank in the plans' numbering, and the group the messages go over (wrapped in
    :class:`_Own` where the plans number its own ranks); a typed error for a rank outside
    it."""
    import torch.distributed as dist

    if not own:
        return dist.get_rank(), group
    if group is None:
        raise BackendConfigError("reshard_state: group_ranks=True needs the group whose ranks "
                                 "the plans number (group=...)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise BackendConfigError(f"reshard_state: rank {dist.get_rank()} is not in the group "
                                 "given (group_ranks=True): only its members call")
    return rank, _Own(group)


def _p2p(op: Any, tensor: Any, peer: int, group: Any) -> Any:
    """One point-to-point op to ``peer`` in the plans' numbering."""
    import torch.distributed as dist

    if isinstance(group, _Own):
        return dist.P2POp(op, tensor, group=group.group, group_peer=peer)
    return dist.P2POp(op, tensor, peer, group)


def _space(group: Any) -> str:
    """The agreement's key space: the group's name where the plans number its own ranks."""
    return f"group-{group.group.group_name}" if isinstance(group, _Own) else ""


def _store() -> Any:
    from ._torch_private import get_default_store

    return get_default_store()


def _named_state(plans: mesh.StateReshard | Mapping[str, mesh.Reshard], state: object
                 ) -> list[tuple[str, mesh.Reshard]]:
    """The plans, checked, in order; refused: a state that is not a mapping, or that names
    a tensor no plan moves."""
    named = _named_plans(plans)
    if not isinstance(state, Mapping):
        raise BackendConfigError(f"reshard_state: state must be a mapping tensor name -> local "
                                 f"tensor, got {show(state)}")
    unknown = sorted(set(state) - {n for n, _ in named}, key=str)
    if unknown:
        raise BackendConfigError(f"reshard_state: state names {unknown[:5]} that no plan moves")
    return named


def _reduced_phase(sides: list[Side], kinds: dict[str, Any], rank: int,
                   sums: dict[str, Any], later_in: Any, group: Any, device: Any,
                   bad: dict[int, str], received: dict[str, list[Any]]) -> list[int]:
    """The second exchange: the parts reduced at this rank sent on, each message flagged
    with whether this rank's sums are whole (its first exchange agreed with every peer);
    what arrives is added to ``received``.  The peers whose flag says they could not
    reduce."""
    import torch

    outgoing, _, _ = _packed(sides, kinds, rank, sums, reduced=True)
    ok = torch.tensor([0 if bad else 1], dtype=torch.uint8)  # sums short of a peer's part
    outgoing = {peer: [*parts, ok] for peer, parts in outgoing.items()}
    more, flags = _moved(outgoing, later_in, kinds, group, device, bad, flagged=True)
    for name, pieces in more.items():
        received.setdefault(name, []).extend(pieces)
    return sorted(peer for peer, flag in flags.items() if not flag)


def _unchanged(plan: mesh.Reshard, rank: int, local: Any, received: bool) -> bool:
    """Whether ``rank``'s destination block is its source block as it is: it receives and
    loses nothing, neither side is partial, and every box it keeps sits at the same place
    in both blocks (the block is then returned, not copied: a recovery's survivors keep
    their blocks of every tensor the way does not re-cut)."""
    if received or local is None or plan.src.partial_dims or plan.dst.partial_dims:
        return False
    if plan.dst.local_shape(rank) != tuple(local.shape) or plan.lost(rank):
        return False
    keep = plan.keeps(rank)
    return keep is not None and all(
        plan.dst.local_slices(rank, box) == plan.src.local_slices(rank, box)
        for box in keep.boxes)


def _staged(plan: mesh.Reshard) -> bool:
    """Whether the plan's sums happen on the way (two phases: :mod:`mesh._tensor._staged`)."""
    return plan.partial not in (None, "sum at destination")


def _packed(sides: list[Side], kinds: Mapping[str, Any], rank: int,
            sums: Mapping[str, Mapping[Any, Any]] | None = None, *, reduced: bool = False
            ) -> tuple[dict[int, list[Any]], Incoming, dict[int, list[tuple[str, int]]]]:
    """What this rank sends each peer (its boxes' bytes, tensor by tensor in name order),
    what it receives from each (the transfers and their sizes in bytes, in the same order),
    and what it sends each, as (tensor name, bytes): in the first phase (stages 0 and 1,
    from the local tensors), or with ``reduced`` in the second (stage 2, the reduced parts
    ``sums`` holds; its receipts are :func:`_later`'s)."""
    import torch

    outgoing: dict[int, list[Any]] = {}
    incoming: Incoming = {}
    sending: dict[int, list[tuple[str, int]]] = {}
    for name, plan, local, _ in sides:
        if name not in kinds:
            continue  # this rank neither holds, sends nor receives any of it
        size = torch.empty((), dtype=kinds[name]).element_size()
        for t in plan.sends(rank):  # views (a copy only where a box is not contiguous);
            if (t.stage == 2) != reduced:  # the peer's message is then one cat
                continue
            parts = [(sums[name][box] if sums is not None and reduced else
                      local[plan.src.local_slices(rank, box)]).reshape(-1).contiguous()
                     .view(torch.uint8) for box in t.boxes]
            outgoing.setdefault(t.dest, []).extend(parts)
            sending.setdefault(t.dest, []).append((name, sum(p.numel() for p in parts)))
        for t in () if reduced else plan.receives(rank):
            if t.stage < 2:
                incoming.setdefault(t.source, []).append((name, t, t.elements * size))
    return outgoing, incoming, sending


def _later(sides: list[Side], kinds: Mapping[str, Any], rank: int
           ) -> tuple[Incoming, dict[int, list[tuple[str, int]]]]:
    """The second phase's receipts and sends (stage 2: reduced parts), by peer, known from
    the plans before any sum is done."""
    import torch

    incoming: Incoming = {}
    sending: dict[int, list[tuple[str, int]]] = {}
    for name, plan, _, _ in sides:
        if name not in kinds or not _staged(plan):
            continue
        size = torch.empty((), dtype=kinds[name]).element_size()
        for t in plan.receives(rank):
            if t.stage == 2:
                incoming.setdefault(t.source, []).append((name, t, t.elements * size))
        for t in plan.sends(rank):
            if t.stage == 2:
                sending.setdefault(t.dest, []).append((name, t.elements * size))
    return incoming, sending


def _joined(first: Mapping[int, list[Any]], second: Mapping[int, list[Any]],
            kinds: Mapping[str, Any]) -> dict[int, list[tuple[str, Any, int]]]:
    """Both phases' items per peer, as (tensor name, dtype, bytes), the second's names
    marked: what a header's digest covers."""
    out: dict[int, list[tuple[str, Any, int]]] = {}
    for phase, items in (("", first), ("/reduced", second)):
        for peer, got in items.items():
            out.setdefault(peer, []).extend((item[0] + phase, kinds[item[0]], item[-1])
                                            for item in got)
    return out


def _moved(outgoing: dict[int, list[Any]], incoming: Incoming, kinds: Mapping[str, Any],
           group: Any, device: Any, bad: Mapping[int, str], *, flagged: bool = False
           ) -> tuple[dict[str, list[tuple[Any, Any]]], dict[int, int]]:
    """One ``batch_isend_irecv``, one message each way per peer, for the pairs whose
    headers agree; each tensor's received pieces, as (transfer, values); and, ``flagged``,
    the one-byte flag that ends each message received, by peer."""
    import torch
    import torch.distributed as dist

    ops, inbox = [], []
    for peer in sorted(outgoing):
        if peer not in bad:
            ops.append(_p2p(dist.isend, torch.cat(outgoing[peer]), peer, group))
    for peer in sorted(incoming):
        if peer not in bad:
            buf = torch.empty(sum(n for _, _, n in incoming[peer]) + flagged,
                              dtype=torch.uint8, device=device)
            inbox.append((peer, buf))
            ops.append(_p2p(dist.irecv, buf, peer, group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    received: dict[str, list[tuple[Any, Any]]] = {}
    flags = {}
    for peer, buf in inbox:
        at = 0
        for name, t, n in incoming[peer]:
            piece = buf[at:at + n]  # a view of the fresh buffer, copied only where its
            size = torch.empty((), dtype=kinds[name]).element_size()  # dtype needs an
            piece = piece if at % size == 0 else piece.clone()  # aligned start
            received.setdefault(name, []).append((t, piece.view(kinds[name])))
            at += n
        if flagged:
            flags[peer] = int(buf[at])
    return received, flags


_HEADER = 4
"""int64s in a header: digest and bytes of what this side sends, then of what it expects."""


def _digest(items: list[tuple[str, Any, int]]) -> int:
    """A 63-bit digest of (tensor name, dtype, bytes) items, the same on every rank."""
    import hashlib

    text = "|".join(f"{name}:{kind}:{n}" for name, kind, n in items).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def _headers(sending: Mapping[int, list[tuple[str, Any, int]]],
             expecting: Mapping[int, list[tuple[str, Any, int]]], group: Any
             ) -> dict[int, str]:
    """Exchange headers with every peer this rank sends to or receives from (one batch):
    per peer, a digest of the (tensor, dtype, bytes) it sends and of those it expects, in
    both phases; the peers whose header disagrees with this rank's, each with the
    disagreement in words.  Both ranks of a pair compare the same two pairs of numbers, so
    both find it."""
    import torch
    import torch.distributed as dist

    peers = sorted(set(sending) | set(expecting))
    if not peers:
        return {}
    theirs, ops = {}, []
    for peer in peers:
        out, wanted = list(sending.get(peer, [])), list(expecting.get(peer, []))
        header = torch.tensor([_digest(out), sum(n for *_, n in out), _digest(wanted),
                               sum(n for *_, n in wanted)], dtype=torch.int64)
        theirs[peer] = torch.empty(_HEADER, dtype=torch.int64)
        ops += [_p2p(dist.isend, header, peer, group),
                _p2p(dist.irecv, theirs[peer], peer, group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    bad = {}
    for peer in peers:
        out, wanted = list(sending.get(peer, [])), list(expecting.get(peer, []))
        sends, sent, expects, expected = theirs[peer].tolist()
        if sends != _digest(wanted) or expects != _digest(out):
            bad[peer] = (f"rank {peer} sends {sent} bytes here and expects {expected}; this "
                         f"rank expects {_shown(wanted)} from it and sends {_shown(out)} (a "
                         "dtype, or the plan, differs between the two)")
    return bad


def _shown(items: list[tuple[str, Any, int]]) -> str:
    if not items:
        return "nothing"
    listed = ", ".join(f"{name!r} as {kind} ({n} bytes)" for name, kind, n in items[:4])
    return listed + (f" and {len(items) - 4} more" if len(items) > 4 else "")
