"""A whole state's reshard: :func:`reshard_state`, one :class:`Reshard` per tensor, moved
in buckets under a memory cap, as a :class:`StateReshard` of :class:`Message` values.

A model's weights are hundreds of tensors; moved one plan at a time they cost a round of
messages each.  Moved together, a rank posts one message per peer and direction, carrying
every tensor's boxes for that peer, in the state's order, each tensor's transfers in its
plan's order.  A rank then holds every send and receive buffer at once; ``cap`` bounds
that: the tensors are cut into *buckets*, moved one after the other, one message per peer
and direction in each.

The bucket rule (the same on every process: it reads the plans alone).  A tensor's
*buffer bytes* on a rank are the bytes of every transfer it sends or receives in the
plan (every stage; what it keeps moves nothing), times the plan's ``itemsize``.  Tensors
are taken in the state's order, greedily: a tensor joins the open bucket unless that
would take some rank's buffer bytes in the bucket past ``cap``; then the bucket closes and
the tensor opens the next one.  A tensor whose own buffer bytes on some rank exceed
``cap`` fits no bucket: a :class:`~mesh.ShardingError` naming it, the rank, its bytes and
the cap.  ``cap=None``: one bucket.  Building the buckets under a cap lists every rank's
bytes of every tensor once (each distinct plan's :meth:`Reshard.traffic`); the per-rank
queries (:meth:`StateReshard.messages`, :meth:`StateReshard.peak_extra`) then list only
that rank's transfers.  What the cap counts is the messages' buffers: ``backend.reshard_state``
also holds, for a moment, the copy of a box it sends that is not contiguous in its local
tensor (before it joins its message), and the parts a rank reduces.

A plan whose partial source is reduced on the way (:attr:`Reshard.partial`) moves its
reduced parts in a second exchange of its bucket (stage 2: they exist only once the sums
are done): its messages are phase 1, every other transfer's phase 0.

>>> from mesh import MeshView, Replicate, Shard, Sharding, reshard_state
>>> old, new = MeshView.from_ranks([0, 1], ("tp",)), MeshView.from_ranks([2, 3], ("tp",))
>>> src = {n: Sharding(old, (Shard(0),), (4, 2)) for n in ("a", "b", "c")}
>>> dst = {n: Sharding(new, (Shard(0),), (4, 2)) for n in ("a", "b", "c")}
>>> state = reshard_state(src, dst, itemsize=4)  # rank 0 sends rows 0-1 of each to rank 2
>>> [(m.bucket, m.dest, m.nbytes, [n for n, _ in m.items]) for m in state.messages(0)]
[(0, 2, 48, ['a', 'b', 'c'])]
>>> capped = reshard_state(src, dst, itemsize=4, cap=32)  # 16 bytes a tensor per rank
>>> capped.buckets, [(m.bucket, m.nbytes) for m in capped.messages(2)], capped.peak_extra(2)
(2, [(0, 32), (1, 16)], 32)
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from .._core import MeshTypeError, ShardingError, as_int, ordered, show
from .._topology import Topology
from ._reshard import Reshard, Transfer, reshard
from ._sharding import Sharding

__all__ = ["Message", "StateReshard", "reshard_state"]

Item = tuple[str, Transfer]


def _count(value: object) -> int:
    """A message's bucket, rank or byte count: an int >= 0."""
    n = as_int(value, "a message's bucket, rank or byte count")
    if n < 0:
        raise ShardingError(f"a message's bucket, ranks and byte count are >= 0, got {n}")
    return n


def _phase_of(value: object) -> int:
    n = as_int(value, "a message's phase")
    if n not in (0, 1):
        raise ShardingError(f"a message's phase is 0 (from the local tensors) or 1 (reduced "
                            f"parts), got {n}")
    return n


def _items(value: object) -> tuple[Item, ...]:
    """(tensor name, :class:`Transfer`) pairs, as a message carries them."""
    out = ordered(value, "a message's items")
    for pair in out:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], Transfer)):
            raise MeshTypeError(f"a message's items are (tensor name, Transfer) pairs, got "
                                f"{show(pair)}")
    return out


@attrs.frozen
class Message:
    """One message of a state's reshard: ``source`` sends ``dest`` the ``items`` (tensor
    name, transfer), packed in that order, ``nbytes`` in all, in bucket ``bucket``; phase 0
    carries stages 0 and 1 (from the local tensors), phase 1 stage 2 (reduced parts, once
    the sums are done).  Made by :meth:`StateReshard.messages`; built by hand, its fields
    are checked (typed errors)."""

    bucket: int = attrs.field(converter=_count)
    phase: int = attrs.field(converter=_phase_of)
    source: int = attrs.field(converter=_count)
    dest: int = attrs.field(converter=_count)
    items: tuple[Item, ...] = attrs.field(converter=_items)
    nbytes: int = attrs.field(converter=_count)


def _named(value: object) -> tuple[tuple[str, Reshard], ...]:
    """(name, plan) pairs: string names, distinct, each with a :class:`Reshard`."""
    pairs = tuple(value.items()) if isinstance(value, Mapping) else tuple(
        value) if isinstance(value, tuple) else None
    if pairs is None:
        raise MeshTypeError(f"a state's plans are a mapping tensor name -> Reshard, got "
                            f"{show(value)}")
    for pair in pairs:
        name, plan = pair if isinstance(pair, tuple) and len(pair) == 2 else (None, None)
        if not isinstance(name, str) or not isinstance(plan, Reshard):
            raise MeshTypeError(f"a state's plans are (tensor name, Reshard) pairs, got "
                                f"{show(pair)}")
    if len({n for n, _ in pairs}) != len(pairs):
        raise ShardingError(f"a state names each tensor once, got {[n for n, _ in pairs]}")
    return pairs


def _cap(value: object) -> int | None:
    if value is None:
        return None
    n = as_int(value, "cap (bytes per rank)")
    if n < 1:
        raise ShardingError(f"cap is bytes per rank, a positive int or None, got {n}")
    return n


@functools.lru_cache(maxsize=64)
def _loads(plan: Reshard) -> dict[int, int]:
    """Buffer bytes of ``plan`` on every rank that sends or receives any (the whole plan's
    traffic, listed once per plan: a model's tensors share few plans)."""
    out: dict[int, int] = defaultdict(int)
    for (s, d), n in plan.traffic().items():
        out[s] += n * plan.itemsize
        out[d] += n * plan.itemsize
    return dict(out)


def _phase(t: Transfer) -> int:
    return 1 if t.stage == 2 else 0


@attrs.frozen(eq=False, init=False, repr=False)
class StateReshard:
    """The plan moving a whole state (made by :func:`reshard_state`): ``named``, each
    tensor's :class:`Reshard` in the state's order (:attr:`plans` as a mapping); ``cap``,
    the most buffer bytes one rank holds at once (None: unbounded, one bucket).

    :attr:`buckets` and :meth:`bucket_of` say which tensors move together (the module's
    rule); :meth:`messages` what one rank posts; :meth:`peak_extra` the most bytes it holds
    in send and receive buffers at once; :attr:`digest` what every rank compares before
    anything moves.  Refused at construction: a tensor whose own buffers on some rank
    exceed ``cap`` (:class:`~mesh.ShardingError`)."""

    named: tuple[tuple[str, Reshard], ...]
    cap: int | None

    def __init__(self, named: object, cap: object = None) -> None:
        self.__attrs_init__(_named(named), _cap(cap))
        _ = self._starts  # valid by construction: the cap error now, not at a query

    def __repr__(self) -> str:  # a model's state is a thousand plans: their count
        return (f"StateReshard({len(self.named)} tensors, {self.buckets} buckets, "
                f"cap={self.cap})")

    @property
    def plans(self) -> dict[str, Reshard]:
        """Each tensor's plan, in the state's order (a fresh dict)."""
        return dict(self.named)

    @functools.cached_property
    def _starts(self) -> tuple[int, ...]:
        """The index in :attr:`named` where each bucket begins (the module's rule)."""
        if not self.named:
            return ()
        if self.cap is None:
            return (0,)
        starts, held = [0], defaultdict[int, int](int)  # this bucket's bytes per rank
        for k, (name, plan) in enumerate(self.named):
            loads = _loads(plan)
            self._fits(name, loads)
            if any(held[r] + n > self.cap for r, n in loads.items()):
                starts.append(k)
                held.clear()
            for r, n in loads.items():
                held[r] += n
        return tuple(starts)

    def _fits(self, name: str, loads: Mapping[int, int]) -> None:
        assert self.cap is not None, "only a capped state fits tensors in buckets"
        over = [(n, -r) for r, n in loads.items() if n > self.cap]
        if over:
            n, r = max(over)
            raise ShardingError(
                f"tensor {name!r} alone needs {n:,} bytes of send and receive buffers on rank "
                f"{-r}, over the cap of {self.cap:,} bytes per rank: no bucket holds it (raise "
                "the cap, or shard the tensor finer)")

    @property
    def buckets(self) -> int:
        """How many buckets the tensors move in (0 for an empty state)."""
        return len(self._starts)

    def bucket_of(self, k: int) -> tuple[str, ...]:
        """The names of bucket ``k``'s tensors, in the state's order (``0 <= k <
        buckets``, else a :class:`~mesh.ShardingError`)."""
        k = as_int(k, "a bucket")
        if not 0 <= k < self.buckets:
            raise ShardingError(f"bucket {k} is not one of this state's {self.buckets} "
                                f"(0 to {self.buckets - 1})")
        ends = (*self._starts[1:], len(self.named))
        return tuple(n for n, _ in self.named[self._starts[k]:ends[k]])

    def _bucketed(self) -> Iterator[tuple[int, str, Reshard]]:
        """(bucket, name, plan) for every tensor, in the state's order."""
        ends = (*self._starts[1:], len(self.named))
        for b, (a, z) in enumerate(zip(self._starts, ends)):
            yield from ((b, n, p) for n, p in self.named[a:z])

    def messages(self, rank: int) -> tuple[Message, ...]:
        """The messages ``rank`` posts (sends and receives), by bucket, phase, then sends
        before receives, by peer: at most one per peer, direction and phase in a bucket,
        each listing the transfers it carries in packing order (the state's order, then
        each plan's).  Lists ``rank``'s transfers alone."""
        r = as_int(rank, "a rank")
        grouped: dict[tuple[int, int, int, int], list[Item]] = defaultdict(list)
        size: dict[tuple[int, int, int, int], int] = defaultdict(int)
        for b, name, plan in self._bucketed():
            for way, ts in ((0, plan.sends(r)), (1, plan.receives(r))):
                for t in ts:
                    key = (b, _phase(t), way, t.dest if way == 0 else t.source)
                    grouped[key].append((name, t))
                    size[key] += t.elements * plan.itemsize
        return tuple(Message(b, ph, r if way == 0 else peer, peer if way == 0 else r,
                             tuple(grouped[b, ph, way, peer]), size[b, ph, way, peer])
                     for b, ph, way, peer in sorted(grouped))

    def peak_extra(self, rank: int) -> int:
        """The most bytes ``rank`` holds at once in send and receive buffers beyond its own
        tensors: the largest bucket's (at most :attr:`cap`)."""
        r = as_int(rank, "a rank")
        held: dict[int, int] = defaultdict(int)
        for b, _, plan in self._bucketed():
            held[b] += sum(t.elements for t in (*plan.sends(r), *plan.receives(r))) \
                * plan.itemsize
        return max(held.values(), default=0)

    @functools.cached_property
    def digest(self) -> str:
        """16 hex digits of the names, plans (:attr:`Reshard.digest`), order and buckets:
        equal on ranks that post the same messages."""
        text = "|".join([*(f"{n}={p.digest}" for n, p in self.named),
                         ",".join(map(str, self._starts))])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _sides(src: object, dst: object) -> list[str]:
    """The state's names, in ``src``'s order; refused: not two mappings of the same names."""
    for what, side in (("src", src), ("dst", dst)):
        if not isinstance(side, Mapping):
            raise MeshTypeError(f"reshard_state's {what} must be a mapping tensor name -> "
                                f"mesh.Sharding, got {show(side)}")
    assert isinstance(src, Mapping) and isinstance(dst, Mapping), "checked above"
    only_src = sorted(set(src) - set(dst), key=str)
    only_dst = sorted(set(dst) - set(src), key=str)
    if only_src or only_dst:
        raise ShardingError(f"reshard_state needs the same tensor names on both sides: only in "
                            f"src {only_src[:8]}, only in dst {only_dst[:8]}")
    for name in src:
        for what, side in (("src", src), ("dst", dst)):
            if not isinstance(name, str) or not isinstance(side[name], Sharding):
                raise MeshTypeError(f"reshard_state's {what} maps tensor names (str) to "
                                    f"mesh.Sharding; {show(name)} -> {show(side[name])}")
    return list(src)


def _itemsizes(itemsize: object, names: list[str]) -> dict[str, Any]:
    """Each tensor's item size: one int for all, or a mapping naming every tensor."""
    if not isinstance(itemsize, Mapping):
        return dict.fromkeys(names, itemsize)
    missing = [n for n in names if n not in itemsize]
    if missing:
        raise ShardingError(f"reshard_state's itemsize mapping names no item size for "
                            f"{missing[:8]}")
    return {n: itemsize[n] for n in names}


def reshard_state(src: Mapping[str, Sharding], dst: Mapping[str, Sharding],
                  topology: Topology | None = None, *, itemsize: int | Mapping[str, int] = 4,
                  cap: int | None = None) -> StateReshard:
    """The plan moving a whole state: ``src`` and ``dst`` map the same tensor names to
    their shardings; each tensor's :func:`reshard` plan (``topology`` and ``itemsize``, one
    int or a mapping name -> bytes of an element, passed on), in ``src``'s order, moved in
    buckets of at most ``cap`` bytes of send and receive buffers per rank (the module's
    rule; None: one bucket).  Refused: states whose names differ (a
    :class:`~mesh.ShardingError` naming them), anything but shardings, a tensor whose
    buffers on some rank alone exceed ``cap`` (naming the tensor, rank, bytes and cap)."""
    names = _sides(src, dst)
    sizes = _itemsizes(itemsize, names)
    return StateReshard(tuple((n, reshard(src[n], dst[n], topology, itemsize=sizes[n]))
                              for n in names), cap)
