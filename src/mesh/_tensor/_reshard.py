"""A reshard plan between two shardings of one tensor: :func:`reshard`, as a :class:`Reshard`.

The destination composed with the source's inverse, per tensor dim: each sharding cuts a
tensor dim into runs labelled by the coordinates that hold them (:meth:`Sharding.segments`);
merging the two cuts gives *pieces* that lie in one source run and one destination run.  A
*cell* is one piece per tensor dim: a box held by every source rank with the cell's source
labels (its *holders*) and needed by every destination rank with its destination labels
(its *receivers*).  A rank's transfers are its cells, found through the labels of its own
coordinate, so one rank's plan never lists the world; the whole plan's traffic lists
every destination rank once.

Who sends a cell to a receiver (the same answer on every rank, from the plan alone):

- a receiver that holds the cell keeps it: 0 bytes;
- otherwise the holders nearest it (the same host, then the same fast domain, then any,
  with a topology), and among those the ``g mod h``-th, ``g`` numbering the destination
  ranks tile by tile: replicas share the sending, and no holder sends more than the first
  holder would if it sent everything;
- a source rank that is ``down`` (failed: its memory is gone) is no holder; a cell none of
  whose holders is up is *lost*: no rank sends it, and :meth:`Reshard.lost` names the boxes
  each receiver must read from elsewhere (a checkpoint);
- a :class:`Partial` source: reduced where it costs least (:mod:`._staged`, named by
  :attr:`Reshard.partial`): summed at each destination (every receiver gets one
  contribution per partial coordinate, its own free), reduce-scattered among one holder
  per coordinate and then gathered, or reduced at one holder and then scattered; the
  last two in two phases (:attr:`Transfer.stage`; :meth:`Reshard.reduces` says where each
  sum happens).  The way that moves the fewest elements is taken (on torch's own meshes
  never more bytes than torch's collectives: ``tests/test_reshard_gloo.py``).  (Where the
  partial holders share a host and the receivers are elsewhere, the choice counts bytes,
  not tiers: not priced per tier yet.)
- a :class:`Partial` destination (:func:`partial_destination`): on a view dim whose source
  dim (the one with the same groups) is the same ``Partial``, each receiver takes only the
  contributions of its own coordinate there (they stay partial, as torch's
  ``DTensor.redistribute`` keeps them); on one whose source dim is ``Replicate()``, the
  value is partitioned as torch's ``Partial._partition_value`` does (``"sum"``: divided by
  the dim's size, :attr:`Reshard.divisor`; the others: the value itself), moving nothing.

>>> from mesh import MeshView, Replicate, Shard, Sharding, StridedShard, reshard
>>> train = MeshView.from_shape((2, 2), ("dp", "tp"))  # ranks 0-3
>>> serve = MeshView.from_ranks([4, 5, 6, 7], ("tp",))  # other ranks
>>> plan = reshard(Sharding(train, (Replicate(), Shard(0)), (8, 4)),
...                Sharding(serve, (Shard(1),), (8, 4)))
>>> [(t.source, t.elements, t.boxes) for t in plan.receives(5)]
[(2, 4, (((0, 4), (1, 2)),)), (3, 4, (((4, 8), (1, 2)),))]
>>> plan.elements_moved, plan.busiest
(32, (0, 32))
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, cast

import attrs

from .._core import (
    MeshTypeError,
    ShardingError,
    TooManyRanksError,
    as_int,
    need_numpy,
    ordered,
    show,
)
from .._topology import Topology
from . import _staged, _totals
from ._asked import Asked, MemoKey
from ._placement import Partial, Replicate
from ._sharding import HOLDERS_LIMIT, Label, Sharding, check_boxes

__all__ = ["TIERS", "Reshard", "Transfer", "partial_destination", "pieces", "reshard"]

TIERS = ("kept", "host", "domain", "across")
"""Link tiers, nearest first: kept on the rank itself (0 bytes), inside a host, across hosts
inside a fast domain, across fast domains."""

Box = _staged.Box


def _count(value: object) -> int:
    """A rank or an element count: an int >= 0."""
    n = as_int(value, "a transfer's rank or element count")
    if n < 0:
        raise ShardingError(f"a transfer's ranks and element count are >= 0, got {n}")
    return n


def _boxes(value: object) -> tuple[Box, ...]:
    """Boxes as tuples of ``(start, stop)`` int pairs, ``0 <= start <= stop``."""
    out = []
    for box in ordered(value, "a transfer's boxes"):
        pairs = []
        for pair in ordered(box, "a box"):
            ab = ordered(pair, "a box's (start, stop)", 2)
            a, b = (as_int(x, "a box's bound") for x in ab) if len(ab) == 2 else (1, 0)
            if not 0 <= a <= b:
                raise ShardingError(f"a box is (start, stop) pairs, 0 <= start <= stop; got "
                                    f"{show(box)}")
            pairs.append((a, b))
        out.append(tuple(pairs))
    return tuple(out)


def _stage(value: object) -> int:
    n = as_int(value, "a transfer's stage")
    if n not in (0, 1, 2):
        raise ShardingError(f"a transfer's stage is 0, 1 or 2, got {n}")
    return n


def _coords(value: object) -> tuple[int, ...]:
    return tuple(as_int(c, "a contribution's coordinate") for c in
                 ordered(value, "a transfer's contribution"))


@attrs.frozen
class Transfer:
    """Elements one rank sends another: ``boxes`` of the global tensor, ``elements`` in all.
    ``contribution`` is the source's coordinates on the partial dims (a :class:`Partial`
    source; ``()`` otherwise, and for a reduced part).  ``stage``: 0, from the source's
    local data; 1, a contribution to the rank that reduces it; 2, a reduced part from that
    rank, sent once the sums are done (:mod:`._staged`).  Made by a :class:`Reshard`; built
    by hand, its fields are checked (typed errors)."""

    source: int = attrs.field(converter=_count)
    dest: int = attrs.field(converter=_count)
    elements: int = attrs.field(converter=_count)
    boxes: tuple[Box, ...] = attrs.field(converter=_boxes)
    contribution: tuple[int, ...] = attrs.field(default=(), converter=_coords)
    stage: int = attrs.field(default=0, converter=_stage)


@attrs.frozen
class _Holders:
    """The ranks holding one source tile (one partial coordinate: ``key`` is both)."""

    key: tuple[Label, tuple[int, ...]]
    ranks: tuple[int, ...]
    members: frozenset[int]

    @classmethod
    def of(cls, key: tuple[Label, tuple[int, ...]], ranks: tuple[int, ...]) -> _Holders:
        return cls(key, ranks, frozenset(ranks))


MEMO_WEIGHT = 1 << 21
"""The most ranks (and cells) the plans of a process keep, together, from their per-rank
queries (2,097,152: about 150 MiB): the holders and receivers of the tiles asked last, the
ranks of the hosts and domains asked last.  What a query needs past it is computed again
when asked again."""


_T = TypeVar("_T")
_A = TypeVar("_A")


def _weight(answer: Any) -> int:
    """What a per-rank answer weighs in the memo: its boxes (a transfer's, or one each)."""
    if answer is None:
        return 1
    if isinstance(answer, Transfer):
        return len(answer.boxes)
    return sum(len(a.boxes) if isinstance(a, Transfer) else 1 for a in answer)


class _Memo:
    """The plans' memo of per-tile and per-host answers (:data:`MemoKey`), least recently
    used dropped first so that the weights (ranks held) stay at most :data:`MEMO_WEIGHT`;
    an answer heavier than that alone is given and not kept."""

    def __init__(self) -> None:
        self.kept: OrderedDict[MemoKey, tuple[Any, int]] = OrderedDict()  # (value, weight)
        self.weight = 0
        self.lock = threading.Lock()

    def get(self, key: MemoKey, make: Callable[[], _T],
            weigh: Callable[[Any], int] = len) -> _T:
        """The answer kept at ``key`` (keys of one kind always hold values of one type:
        the type ``make`` gives), else ``make()``'s, kept if it fits."""
        with self.lock:
            got = self.kept.get(key)
            if got is not None:
                self.kept.move_to_end(key)
                return cast(_T, got[0])
        value = make()
        weight = max(1, weigh(value))
        with self.lock:
            if weight <= MEMO_WEIGHT and key not in self.kept:
                while self.weight + weight > MEMO_WEIGHT:
                    self.weight -= self.kept.popitem(last=False)[1][1]
                self.kept[key] = (value, weight)
                self.weight += weight
        return value


_MEMO = _Memo()
_TOKENS = itertools.count()  # one per plan, never reused: a dead plan's entries age out


def pieces(a: tuple[tuple[int, int, Label], ...], b: tuple[tuple[int, int, Label], ...]
            ) -> list[tuple[int, int, Label, Label]]:
    """Two cuts of one range merged: ``(start, stop, label in a, label in b)``."""
    out = []
    i = j = 0
    pos = 0
    while i < len(a) and j < len(b):
        end = min(a[i][0] + a[i][1], b[j][0] + b[j][1])
        if end > pos:
            out.append((pos, end, a[i][2], b[j][2]))
        pos = end
        if a[i][0] + a[i][1] == end:
            i += 1
        if j < len(b) and b[j][0] + b[j][1] == end:
            j += 1
    return out


def _tile(s: Sharding, coordinate: tuple[int, ...]) -> Label:
    """The coordinates on every view dim that shards some tensor dim, in view order."""
    return tuple(coordinate[i] for i in _tile_dims(s))


def _tile_dims(s: Sharding) -> tuple[int, ...]:
    return tuple(sorted(i for d in range(len(s.shape)) for i, _ in s.sharders(d)))


@attrs.frozen(eq=False, repr=False, init=False)
class Reshard:
    """The plan moving a tensor from ``src`` to ``dst`` (made by :func:`reshard`).

    Per rank: :meth:`receives` and :meth:`sends` (its :class:`Transfer` values, computed
    for that rank alone), :meth:`keeps` and :meth:`kept` (what it already holds).  The whole plan:
    :meth:`traffic` (elements per (source, destination)), :attr:`elements_moved`,
    :attr:`bytes_moved`, :attr:`tier_bytes`, :attr:`busiest`, :attr:`rounds`; and
    :meth:`apply`, the offline executor.  ``down``: source ranks that send nothing (failed);
    what only they held is :meth:`lost` (read from a checkpoint instead).
    """

    src: Sharding
    dst: Sharding
    topology: Topology | None
    itemsize: int
    down: frozenset[int]

    def __init__(self, src: Sharding, dst: Sharding, topology: Topology | None = None, *,
                 itemsize: int = 4, down: object = ()) -> None:
        self.__attrs_init__(src, dst, topology, _checked(src, dst, topology, itemsize),
                            _down(down))

    @classmethod
    def _checked_already(cls, src: Sharding, dst: Sharding, topology: Topology | None,
                         itemsize: int, down: frozenset[int]) -> Reshard:
        """A plan of arguments :func:`reshard` has checked (its check runs once)."""
        plan = cls.__new__(cls)
        plan.__attrs_init__(src, dst, topology, itemsize, down)
        return plan

    def __repr__(self) -> str:
        return f"Reshard({self.src!r} -> {self.dst!r})"  # cheap: traffic lists every receiver

    @functools.cached_property
    def digest(self) -> str:
        """16 hex digits of what defines the plan (both shardings with their views' ranks,
        the topology, the item size, the ``down`` ranks), the same in every process: equal
        plans have equal digests, so ranks comparing them find a rank given another plan
        (``backend.reshard_state`` does, before anything moves).

        >>> from mesh import MeshView, Replicate, Shard, Sharding, reshard
        >>> v = MeshView.from_shape((4,), ("tp",))
        >>> a = reshard(Sharding(v, (Shard(0),), (8,)), Sharding(v, (Replicate(),), (8,)))
        >>> b = reshard(Sharding(v, (Shard(0),), (8,)), Sharding(v, (Shard(0),), (8,)))
        >>> len(a.digest), a.digest == b.digest
        (16, False)
        """
        text = "|".join([_defined(self.src), _defined(self.dst), repr(self.topology),
                         str(self.itemsize), str(sorted(self.down))])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    @functools.cached_property
    def partial(self) -> str | None:
        """How a :class:`Partial` source is reduced (:mod:`._staged`): ``"sum at
        destination"``, ``"reduce-scatter then gather"`` or ``"reduce at one holder then
        scatter"``, whichever moves the fewest elements (then: the less busy busiest rank,
        the fewer rounds); None without one.  Only summed at the destination with ``down``
        ranks, or past :data:`~._staged.STAGED_LIMIT` destination ranks."""
        if not self.src.partial_dims:
            return None
        if self.down or self.dst.view.ranks.size > _staged.STAGED_LIMIT:
            return _staged.SUM_AT_DESTINATION
        return min(_staged.STRATEGIES, key=lambda way: self._totals_of(way).price)

    @functools.cached_property
    def summed(self) -> int:
        """How many contributions each reduced value combines: the product of the sizes of
        the source's partial dims the destination does not keep partial (1 without)."""
        kept = {k for k, _ in self._kept_partial}
        return math.prod(self.src.view.shape[i] for k, i in enumerate(self.src.partial_dims)
                         if k not in kept)

    def _memo(self, asked: Asked, of: Hashable, make: Callable[[], _T]) -> _T:
        """``make()``, kept in the plans' memo as this plan's answer to ``asked`` of ``of``."""
        return _MEMO.get((self._token, asked, of), make)

    @property
    def _staged(self) -> bool:
        return self.partial not in (None, _staged.SUM_AT_DESTINATION)

    @functools.cached_property
    def _kept_partial(self) -> tuple[tuple[int, int], ...]:
        """(position in a contribution, destination view dim) of each source partial dim the
        destination keeps partial (:func:`partial_destination`)."""
        return tuple((self.src.partial_dims.index(j), i)
                     for j, i in partial_destination(self.src, self.dst))

    @functools.cached_property
    def divisor(self) -> int:
        """What each destination rank divides its value by: the product of the sizes of the
        destination's ``Partial("sum")`` dims made from ``Replicate()`` (torch's
        ``Partial._partition_value``: each rank holds ``v / n``); 1 without one."""
        kept = {i for _, i in self._kept_partial}
        return math.prod(self.dst.view.shape[i] for i in self.dst.partial_dims
                         if i not in kept and getattr(self.dst.placements[i], "op", "") == "sum")

    def _wants(self, combo: tuple[int, ...], rank: int) -> bool:
        """Whether destination ``rank`` takes the contribution ``combo``: only those of its
        own coordinate on the partial dims it keeps (all of them without one)."""
        if not self._kept_partial:
            return True
        c = self.dst.coordinate(rank)
        return all(combo[k] == c[i] for k, i in self._kept_partial)

    # ---- the symbolic plan ------------------------------------------------------------
    @functools.cached_property
    def _pieces(self) -> tuple[list[tuple[int, int, Label, Label]], ...]:
        return tuple(pieces(self.src.segments(d), self.dst.segments(d))
                     for d in range(len(self.src.shape)))

    def _cells_of(self, side: str, tile: Label) -> tuple[tuple[Box, int, Label], ...]:
        """The cells of a source (``side="src"``) or destination tile: (box, elements, the
        other side's tile), memoized per tile."""
        return _MEMO.get((self._token, "src cells" if side == "src" else "dst cells", tile),
                         lambda: self._list_cells(side, tile))

    def _list_cells(self, side: str, tile: Label) -> tuple[tuple[Box, int, Label], ...]:
        mine, other = (self.src, self.dst) if side == "src" else (self.dst, self.src)
        labels = _labels(mine, tile)
        per_dim = [[(a, b, lo) for a, b, ls, ld in pieces
                    if (ls if side == "src" else ld) == label
                    for lo in ((ld if side == "src" else ls),)]
                   for pieces, label in zip(self._pieces, labels)]
        check_boxes(math.prod(len(p) for p in per_dim), "one rank's part of the plan")
        order = _order(other)
        return tuple((tuple((a, b) for a, b, _ in combo), math.prod(b - a for a, b, _ in combo),
                      _reordered(order, combo))
                     for combo in itertools.product(*per_dim))

    @functools.cached_property
    def _token(self) -> int:
        """This plan's part of :data:`_MEMO`'s keys: per tile holders, receivers and cells;
        per rank its host and domain; per host and domain its ranks."""
        return next(_TOKENS)

    def _holders(self, tile: Label) -> dict[tuple[int, ...], _Holders]:
        """The source ranks holding ``tile``, by their partial dims' coordinates."""
        return _MEMO.get((self._token, "holders", tile), lambda: self._list_holders(tile),
                              lambda got: sum(len(h.ranks) for h in got.values()))

    def _list_holders(self, tile: Label) -> dict[tuple[int, ...], _Holders]:
        s = self.src
        fixed = dict(zip(_tile_dims(s), tile))
        down = self.down
        if not s.partial_dims:
            return {(): _Holders.of((tile, ()), tuple(
                r for r in _tile_ranks(s, fixed, "source ranks holding") if r not in down))}
        out: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for r in _tile_ranks(s, fixed, "source ranks holding"):
            if r in down:
                out.setdefault(_combo(s, r), [])
                continue
            c = s.coordinate(r)
            out[tuple(c[i] for i in s.partial_dims)].append(r)
        return {k: _Holders.of((tile, k), tuple(v)) for k, v in out.items()}

    def _where(self, rank: int) -> tuple[int, int]:
        """(host, fast domain) of ``rank``, memoized; (0, 0) without a topology."""
        t = self.topology
        if t is None:
            return (0, 0)
        return _MEMO.get((self._token, "where", rank), lambda: (t.host(rank), t.domain(rank)),
                              lambda _: 1)

    def _placed(self, holders: _Holders) -> tuple[dict[int, tuple[int, ...]],
                                                  dict[int, tuple[int, ...]]]:
        """The holders by host (ascending) and by fast domain (host by host), memoized per
        tile: what it keeps is the holders themselves, so a plan's are linear in its ranks
        (kept per (tile, place) they grew as tiles x hosts: ranks^2 where every rank holds
        its own tile)."""
        def make() -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
            at = sorted((self._where(h), h) for h in holders.ranks)  # ((host, domain), rank)
            by_host: dict[int, list[int]] = defaultdict(list)
            by_domain: dict[int, list[int]] = defaultdict(list)
            for (host, domain), h in at:
                by_host[host].append(h)
                by_domain[domain].append(h)
            return ({k: tuple(v) for k, v in by_host.items()},
                    {k: tuple(v) for k, v in by_domain.items()})
        return _MEMO.get((self._token, "placed", holders.key), make,
                         lambda _: len(holders.ranks))

    def _receivers(self, tile: Label) -> dict[int, int]:
        """The destination ranks needing ``tile``'s cells, each with its *spread index*: its
        index among them, plus the tile's number times their count.  Holders are picked by
        this index, so one source tile's replicas serve the destination tiles in turn."""
        return _MEMO.get((self._token, "receivers", tile), lambda: self._list_receivers(tile))

    def _list_receivers(self, tile: Label) -> dict[int, int]:
        dims = _tile_dims(self.dst)
        number = 0
        for i, c in zip(dims, tile):
            number = number * self.dst.view.shape[i] + c
        ranks = list(_tile_ranks(self.dst, dict(zip(dims, tile)), "destination ranks needing"))
        return {r: number * len(ranks) + k for k, r in enumerate(ranks)}

    def _tier(self, a: int, b: int) -> int:
        if a == b:
            return 0
        if self.topology is None:
            return 3
        (ha, da), (hb, db) = self._where(a), self._where(b)
        return 1 if ha == hb else 2 if da == db else 3

    def _pick(self, holders: _Holders, receiver: int, k: int) -> int:
        """The holder that sends to ``receiver`` (spread index ``k``): itself if it holds
        the cell, else among the holders nearest it the ``k mod n``-th; -1 when no holder
        is up (the cell is lost)."""
        if receiver in holders.members:
            return receiver
        if not holders.ranks:
            return -1
        if self.topology is None:
            return holders.ranks[k % len(holders.ranks)]
        host, domain = self._where(receiver)
        by_host, by_domain = self._placed(holders)
        near = by_host.get(host) or by_domain.get(domain) or holders.ranks
        return near[k % len(near)]

    # ---- per rank -----------------------------------------------------------------------
    def receives(self, rank: int) -> tuple[Transfer, ...]:
        """What ``rank`` receives (nothing if it is not in the destination), by source.
        Computed once per rank (kept in the plans' memo, as every per-rank answer)."""
        return self._per_rank("receives", rank, self._list_receives)

    def _per_rank(self, kind: Asked, rank: object, make: Callable[[int], _A]) -> _A:
        """``make(rank)``, kept in the plans' memo weighing its boxes: an executor asks
        its own rank's answers several times per call, and every step."""
        r = as_int(rank, "a rank")
        return _MEMO.get((self._token, kind, r), lambda: make(r), _weight)

    def _list_receives(self, rank: int) -> tuple[Transfer, ...]:
        if self._staged:
            return self._staged_receives(rank)
        if self.dst.view.coordinate(rank) is None:
            return ()
        tile = _tile(self.dst, self.dst.coordinate(rank))
        k = self._receivers(tile)[rank]
        got: _staged.Table = defaultdict(list)
        for box, _, src in self._cells_of("dst", tile):
            for combo, holders in self._holders(src).items():
                h = self._pick(holders, rank, k)
                if h != rank and h >= 0 and self._wants(combo, rank):
                    got[h, combo, 0].append(box)
        return _transfers(got, rank, source_side=False)

    def lost(self, rank: int) -> tuple[Box, ...]:
        """The boxes of ``rank``'s destination block that no source rank up holds (every
        holder is ``down``): read from a checkpoint, never sent.  A partial source's box is
        listed once per lost contribution.  Empty without ``down``."""
        return self._per_rank("lost", rank, self._list_lost)

    def _list_lost(self, rank: int) -> tuple[Box, ...]:
        if not self.down or self.dst.view.coordinate(rank) is None:
            return ()
        tile = _tile(self.dst, self.dst.coordinate(rank))
        return tuple(sorted(box for box, n, src in self._cells_of("dst", tile)
                            for combo, holders in self._holders(src).items()
                            if n and not holders.ranks and self._wants(combo, rank)))

    def keeps(self, rank: int) -> Transfer | None:
        """What ``rank`` already holds of its destination block, as a transfer from itself
        to itself (moved 0 bytes; its contribution is ``rank``'s own partial coordinate);
        None if it keeps nothing."""
        return self._per_rank("keeps", rank, self._list_keeps)

    def _list_keeps(self, rank: int) -> Transfer | None:
        if self.dst.view.coordinate(rank) is None or self.src.view.coordinate(rank) is None:
            return None
        tile = _tile(self.dst, self.dst.coordinate(rank))
        if self._staged:
            assert self.partial is not None, "a staged plan has a partial source"
            boxes = _staged.keeps(self, self.partial, rank, tile)
            return _transfers({(rank, (), 2): boxes}, rank, source_side=True)[0] \
                if any(map(_staged.elements, boxes)) else None
        own: _staged.Table = defaultdict(list)
        for box, _, src in self._cells_of("dst", tile):
            for combo, holders in self._holders(src).items():
                if rank in holders.members:
                    own[rank, combo, 0].append(box)
        found = _transfers(own, rank, source_side=True)
        return found[0] if found else None

    def kept(self, rank: int) -> int:
        """Elements of ``rank``'s destination block it already holds (moved 0 bytes)."""
        t = self.keeps(rank)
        return 0 if t is None else t.elements

    def sends(self, rank: int) -> tuple[Transfer, ...]:
        """What ``rank`` sends (nothing if it is not in the source), by destination."""
        return self._per_rank("sends", rank, self._list_sends)

    def _list_sends(self, rank: int) -> tuple[Transfer, ...]:
        if self.src.view.coordinate(rank) is None or rank in self.down:
            return ()
        coord = self.src.coordinate(rank)
        combo = tuple(coord[i] for i in self.src.partial_dims)
        tile = _tile(self.src, coord)
        if self._staged:
            assert self.partial is not None, "a staged plan has a partial source"
            return _transfers(_staged.sends(self, self.partial, rank, tile, combo), rank,
                              source_side=True)
        holders = self._holders(tile)[combo]
        out: _staged.Table = defaultdict(list)
        for box, _, dst in self._cells_of("src", tile):
            for r, k in self._receivers(dst).items():
                if r != rank and self._pick(holders, r, k) == rank and self._wants(combo, r):
                    out[r, combo, 0].append(box)
        return _transfers(out, rank, source_side=True)

    def reduces(self, rank: int) -> tuple[Box, ...]:
        """The boxes ``rank`` reduces (where the sums happen: :mod:`._staged`): its own
        contribution and the contributions it receives at stage 1, reduced, then sent at
        stage 2 (and kept where it needs them); empty unless the plan is staged."""
        return self._per_rank("reduces", rank, self._list_reduces)

    def _list_reduces(self, rank: int) -> tuple[Box, ...]:
        if not self._staged or self.src.view.coordinate(rank) is None:
            return ()
        assert self.partial is not None, "a staged plan has a partial source"
        tile = _tile(self.src, self.src.coordinate(rank))
        return tuple(sorted(_staged.reduces(self, self.partial, rank, tile)))

    def _staged_receives(self, rank: int) -> tuple[Transfer, ...]:
        assert self.partial is not None, "a staged plan has a partial source"
        src = None if self.src.view.coordinate(rank) is None else \
            _tile(self.src, self.src.coordinate(rank))
        dst = None if self.dst.view.coordinate(rank) is None else \
            _tile(self.dst, self.dst.coordinate(rank))
        return _transfers(_staged.receives(self, self.partial, rank, src, dst), rank,
                          source_side=False)

    # ---- the whole plan -------------------------------------------------------------------
    def _dst_ranks(self) -> Iterator[int]:
        return self.dst.holders({})

    def _walk(self, way: str) -> tuple[Iterable[_totals.Pair], ...]:
        """Each phase's pairs (one, or two where sums happen on the way), each pair listed
        once, lazily where the sums happen at the destination (a receiver at a time)."""
        n = self.dst.view.ranks.size
        if n > HOLDERS_LIMIT:
            raise TooManyRanksError(
                f"a plan's totals (traffic, bytes moved, bytes per tier, the busiest rank, "
                f"rounds) list every destination rank, at most {HOLDERS_LIMIT:,}, and this "
                f"destination has {n:,}", "ask Reshard.receives(rank) and Reshard.sends(rank) "
                "per rank: they list no other rank's part")
        tiles = sorted({_tile(self.dst, self.dst.coordinate(r)) for r in self._dst_ranks()})
        if way != _staged.SUM_AT_DESTINATION:
            return tuple(((s, d, k) for (s, d), k in phase.items())
                         for phase in _staged.pairs(self, way, tiles))
        return (self._summed_pairs(tiles),)

    def _summed_pairs(self, tiles: list[Label]) -> Iterator[_totals.Pair]:
        """(holder, receiver, elements) where every receiver sums its contributions."""
        for tile in tiles:
            cells = self._cells_of("dst", tile)
            for r, k in self._receivers(tile).items():
                got: dict[int, int] = defaultdict(int)
                for _, n, src in cells:
                    for combo, holders in self._holders(src).items():
                        h = self._pick(holders, r, k)
                        if h != r and n and h >= 0 and self._wants(combo, r):
                            got[h] += n
                yield from ((h, r, n) for h, n in got.items())

    def _totals_of(self, way: str) -> _totals.Totals:
        return _MEMO.get((self._token, "totals", way),
                         lambda: _totals.tally(self._walk(way), self._tier), lambda _: 1)

    @functools.cached_property
    def _totals(self) -> _totals.Totals:
        """The totals of the way taken: four numbers, kept on the plan (its pairs are not)."""
        return self._totals_of(self.partial or _staged.SUM_AT_DESTINATION)

    def traffic(self) -> dict[tuple[int, int], int]:
        """Elements per (source rank, destination rank), for the pairs that move any.
        Listed afresh on each call (the plan keeps its totals, not its pairs, which can
        outgrow its ranks): one entry per pair."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for phase in self._walk(self.partial or _staged.SUM_AT_DESTINATION):
            for s, d, n in phase:
                out[s, d] += n
        return dict(out)

    @property
    def elements_moved(self) -> int:
        """Elements sent between ranks (a partial source's contributions counted each);
        computed once, as every total of a finished plan is."""
        return self._totals.elements

    @property
    def bytes_moved(self) -> int:
        return self.elements_moved * self.itemsize

    @property
    def tier_bytes(self) -> dict[str, int]:
        """Bytes per link tier (:data:`TIERS`): ``"kept"`` counts what receivers already
        hold (moved 0 bytes); without a topology every move is ``"across"``.  Computed once
        (a copy is returned each time)."""
        return dict(self._tier_bytes)

    @functools.cached_property
    def _tier_bytes(self) -> dict[str, int]:
        out = {t: n * self.itemsize for t, n in zip(TIERS, self._totals.tiers)}
        out["kept"] = sum(self.kept(r) for r in self._dst_ranks()) * self.itemsize
        return out

    @property
    def busiest(self) -> tuple[int, int]:
        """(rank, bytes): the rank whose larger direction (sent or received; links are full
        duplex) carries the most bytes; (-1, 0) when nothing moves.  Computed once."""
        rank, n = self._totals.busiest
        return (rank, n * self.itemsize)

    @property
    def rounds(self) -> int:
        """Rounds in which no rank sends twice or receives twice: the most peers one rank
        sends to or receives from (a bipartite multigraph's edges colour in its largest
        degree, König's theorem), summed over the phases where sums happen on the way.
        Computed once."""
        return self._totals.rounds

    # ---- the offline executor -----------------------------------------------------------
    def assemble(self, rank: int, pieces: Iterable[tuple[tuple[int, ...], Box, Any]],
                 new: Callable[[tuple[int, ...]], Any],
                 reduce: Callable[[list[Any], str], Any], first: Any = None) -> Any:
        """``rank``'s destination block from its ``pieces``, in any array library: each
        ``(contribution, box, values)`` written where ``box`` lies in the block of its
        contribution (a partial source's coordinates; ``()`` otherwise), each block made by
        ``new(shape)`` (``first``, where given, is contribution ``()``'s), then the blocks
        reduced by the partial source's op (``reduce(blocks, op)``) and divided by
        :attr:`divisor`.  The one assembly both executors share: :meth:`apply` on NumPy
        arrays, ``backend``'s on the tensors it received.  (A plan whose sums happen on the
        way places reduced parts instead: its executors do.)

        >>> import numpy as np
        >>> from mesh import MeshView, Shard, Sharding, reshard
        >>> two, one = MeshView.from_ranks([0, 1], ("a",)), MeshView.from_ranks([2], ("b",))
        >>> plan = reshard(Sharding(two, (Shard(0),), (4,)), Sharding(one, (Shard(0),), (4,)))
        >>> halves = {0: np.array([1, 2]), 1: np.array([3, 4])}
        >>> plan.assemble(2, [(t.contribution, box, halves[t.source]) for t in plan.receives(2)
        ...                   for box in t.boxes], np.zeros, lambda blocks, op: blocks[0])
        array([1., 2., 3., 4.])
        """
        shape = self.dst.local_shape(rank)
        blocks: dict[tuple[int, ...], Any] = {} if first is None else {(): first}
        for contribution, box, values in pieces:
            block = blocks.get(contribution)
            if block is None:
                block = blocks[contribution] = new(shape)
            block[self.dst.local_slices(rank, box)] = values
        found = list(blocks.values()) or [new(shape)]
        ops = [p.op for p in self.src.placements if isinstance(p, Partial)]
        value = reduce(found, ops[0]) if ops else found[0]
        return value / self.divisor if self.divisor > 1 else value

    def apply(self, shards: Mapping[int, Any], checkpoint: Any = None) -> dict[int, Any]:
        """Each destination rank's local NumPy array, from each source rank's (``shards``:
        source rank -> its local array, as :meth:`Sharding.local` gives it), moving exactly
        what :meth:`receives` and :meth:`keeps` say and reducing a partial source's
        contributions (``backend.reshard_tensor`` does the same over process groups); the
        :meth:`lost` boxes are copied from ``checkpoint``, the full array (left zero
        without one).  A partial source's lost contribution is not rebuilt."""
        np = self._checked_shards(shards)
        ops = [p.op for p in self.src.placements if isinstance(p, Partial)]
        dtype = next((a.dtype for a in shards.values()), None)
        if self._staged:
            return self._apply_staged(shards, ops[0], dtype, np)

        def new(shape: tuple[int, ...]) -> Any:
            return np.zeros(shape, dtype=dtype)

        def reduce(blocks: list[Any], op: str) -> Any:
            return _reduced(blocks, op, np)

        return {r: self.assemble(r, self._apply_pieces(r, shards, checkpoint), new, reduce)
                for r in self._dst_ranks()}

    def _apply_pieces(self, r: int, shards: Mapping[int, Any], checkpoint: Any
                ) -> Iterator[tuple[tuple[int, ...], Box, Any]]:
        """What :meth:`apply` places in destination rank ``r``'s block: each box it receives
        or keeps, from its source rank's local array; then its lost boxes from
        ``checkpoint``, where one is given."""
        keep = self.keeps(r)
        for t in (*self.receives(r), *(() if keep is None else (keep,))):
            if t.source not in shards:
                raise ShardingError(f"Reshard.apply: no local array for source rank "
                                    f"{t.source} (it sends to rank {r})")
            for box in t.boxes:
                yield t.contribution, box, shards[t.source][self.src.local_slices(t.source, box)]
        for box in () if checkpoint is None else self.lost(r):
            yield (), box, checkpoint[tuple(slice(a, b) for a, b in box)]

    def _apply_staged(self, shards: Mapping[int, Any], op: str, dtype: Any, np: Any
                      ) -> dict[int, Any]:
        """:meth:`apply` of a plan whose sums happen on the way: each reducer sums its
        parts (its own contribution and those it receives at stage 1), then every
        destination rank places the reduced parts it receives at stage 2 and keeps."""
        def local(rank: int, box: Box) -> Any:
            if rank not in shards:
                raise ShardingError(f"Reshard.apply: no local array for source rank {rank}")
            return shards[rank][self.src.local_slices(rank, box)]

        pairwise = "sum" if op == "avg" else op  # an average: summed, then divided once
        reduced: dict[tuple[int, Box], Any] = {}
        for g in self.src.holders({}):
            for box in self.reduces(g):
                reduced[g, box] = np.array(local(g, box), copy=True)
            for t in self.receives(g):
                for box in t.boxes if t.stage == 1 else ():
                    reduced[g, box] = _reduced([reduced[g, box], local(t.source, box)],
                                               pairwise, np)
        if op == "avg":
            reduced = {k: v / self.summed for k, v in reduced.items()}
        out = {}
        for r in self._dst_ranks():
            block = np.zeros(self.dst.local_shape(r), dtype=dtype)
            keep = self.keeps(r)
            for t in (*self.receives(r), *(() if keep is None else (keep,))):
                for box in t.boxes if t.stage == 2 else ():
                    block[self.dst.local_slices(r, box)] = reduced[t.source, box]
            out[r] = block / self.divisor if self.divisor > 1 else block
        return out

    def _checked_shards(self, shards: object) -> Any:
        """NumPy, once ``shards`` is checked to map source ranks to NumPy arrays of their
        local shapes (else the typed error :meth:`apply` raises)."""
        np = need_numpy("Reshard.apply")
        if not isinstance(shards, Mapping):
            raise MeshTypeError(f"Reshard.apply needs a mapping of source rank -> local "
                                f"array, got a {type(shards).__name__}: {show(shards)}")
        for r, a in shards.items():
            want = self.src.local_shape(r)
            if not isinstance(a, np.ndarray):
                raise MeshTypeError(f"Reshard.apply: source rank {show(r)}'s local array must "
                                    f"be a NumPy array of shape {want}, got a "
                                    f"{type(a).__name__}: {show(a)}")
            if a.shape != want:
                raise ShardingError(f"Reshard.apply: source rank {show(r)}'s local array has "
                                    f"shape {a.shape}; the source gives it {want}")
        return np


def _defined(s: Sharding) -> str:
    """What defines a sharding, as text: its view (names, layout, ranks), placements, shape."""
    v = s.view
    return f"{v.names}{v.layout!r}{v.ranks.size}{v.ranks.ranks}{list(s.placements)!r}{s.shape}"


def _reduced(values: list[Any], op: str, np: Any) -> Any:
    if op in ("sum", "avg"):
        total = functools.reduce(np.add, values)
        return total / len(values) if op == "avg" else total
    return functools.reduce(np.maximum if op == "max" else np.minimum, values)


def _labels(s: Sharding, tile: Label) -> list[Label]:
    """A tile (coordinates on the sharding dims, in view order) as one label per tensor dim."""
    at = dict(zip(_tile_dims(s), tile))
    return [tuple(at[i] for i, _ in s.sharders(d)) for d in range(len(s.shape))]


def _order(s: Sharding) -> list[int]:
    """Where each coordinate of labels listed tensor dim by tensor dim goes in a tile."""
    dims = [i for d in range(len(s.shape)) for i, _ in s.sharders(d)]
    rank = {i: n for n, i in enumerate(sorted(dims))}
    return [rank[i] for i in dims]


def _reordered(order: list[int], combo: tuple[tuple[int, int, Label], ...]) -> Label:
    """The tile of one cell's labels (one per tensor dim), in view order."""
    flat = [x for _, _, label in combo for x in label]
    out = [0] * len(flat)
    for at, x in zip(order, flat):
        out[at] = x
    return tuple(out)


def _transfers(table: _staged.Table, rank: int, source_side: bool) -> tuple[Transfer, ...]:
    """One transfer per (peer, contribution, stage), its non-empty boxes sorted."""
    out = []
    for (peer, combo, stage), boxes in sorted(table.items()):
        kept = sorted(box for box in boxes if _staged.elements(box))
        n = sum(map(_staged.elements, kept))
        if n == 0:
            continue
        s, d = (rank, peer) if source_side else (peer, rank)
        out.append(Transfer(s, d, n, tuple(kept), combo, stage))
    return tuple(out)


def _tile_ranks(s: Sharding, fixed: dict[int, int], who: str) -> Iterator[int]:
    """The ranks of ``s`` with the coordinates ``fixed`` (the ``who`` one tile), refused
    past :data:`~mesh._tensor._sharding.HOLDERS_LIMIT`: a plan takes no ``limit``."""
    n = s.holder_count(fixed)
    if n > HOLDERS_LIMIT:
        raise TooManyRanksError(f"a reshard plan lists the {who} one tile, at most "
                                f"{HOLDERS_LIMIT:,}, and {s.view!r} has {n:,} of them")
    return s.holders(fixed)


def _combo(s: Sharding, rank: int) -> tuple[int, ...]:
    """``rank``'s coordinates on the partial dims of ``s``."""
    c = s.coordinate(rank)
    return tuple(c[i] for i in s.partial_dims)


def _down(value: object) -> frozenset[int]:
    """Ranks that send nothing, as a frozenset of ints (an ordered sequence or a set: the
    answer does not depend on their order)."""
    items = tuple(value) if isinstance(value, (set, frozenset)) else ordered(value, "down")
    return frozenset(as_int(r, "every rank in down") for r in items)


def _twin(src: Sharding, dst: Sharding, i: int) -> int | None:
    """The source view dim whose groups are the destination view dim ``i``'s (the same
    universe and the same dim layout: every rank has the same coordinate on both), or
    None."""
    if src.view.ranks != dst.view.ranks:
        return None
    mode = dst.view.layout[i]
    return next((j for j in range(src.view.ndim) if src.view.layout[j] == mode
                 and src.view.shape[j] == dst.view.shape[i]), None)


def partial_destination(src: Sharding, dst: Sharding) -> tuple[tuple[int, int], ...]:
    """The destination's :class:`Partial` dims that keep the source's partial values, as
    (source view dim, destination view dim); refused (:class:`~mesh.ShardingError`) unless
    every destination Partial dim is, on the source dim with its groups, the same
    ``Partial`` (kept: each rank keeps its own contribution, as torch's
    ``DTensor.redistribute`` does) or ``Replicate()`` (partitioned, as torch's
    ``Partial._partition_value``: ``"sum"`` holds the value divided by the dim's size,
    ``"avg"``, ``"max"`` and ``"min"`` the value itself)."""
    kept = []
    for i in dst.partial_dims:
        want = dst.placements[i]
        j = _twin(src, dst, i)
        name = dst.view.names[i]
        if j is None:
            raise ShardingError(
                f"a reshard's destination is {want!r} on view dim {name!r}, which no source "
                f"view dim matches (the same ranks in the same groups): a Partial destination "
                f"dim is made from the same dim of the same mesh, as torch's "
                f"DTensor.redistribute makes it; valid there: Replicate() or {want!r} on a "
                "source dim with those groups, or any placement but Partial on this dim")
        have = src.placements[j]
        if have == want:
            kept.append((j, i))
        elif not isinstance(have, Replicate):
            raise ShardingError(
                f"reshard cannot make {want!r} on view dim {name!r} from {have!r} (source "
                f"view dim {src.view.names[j]!r}): a Partial destination dim is made from "
                f"Replicate() (partitioned) or {want!r} (kept), as torch's "
                "DTensor.redistribute; reduce or gather it first")
    return tuple(kept)


def _checked(src: object, dst: object, topology: object, itemsize: object) -> int:
    """The checks of :func:`reshard`; the item size."""
    for name, s in (("src", src), ("dst", dst)):
        if not isinstance(s, Sharding):
            raise MeshTypeError(f"reshard's {name} must be a mesh.Sharding, got {show(s)}")
    assert isinstance(src, Sharding) and isinstance(dst, Sharding), "checked above"
    if src.shape != dst.shape:
        raise ShardingError(f"reshard needs one tensor shape on both sides, got {src.shape} "
                            f"-> {dst.shape}")
    for name, s in (("source", src), ("destination", dst)):
        ops = sorted({p.op for p in s.placements if isinstance(p, Partial)})
        if len(ops) > 1:
            raise ShardingError(
                f"a {name} partial over several reductions {ops} has no one order to reduce "
                f"in (placements {list(s.placements)}); reduce all but one kind first")
    partial_destination(src, dst)
    size = as_int(itemsize, "itemsize")
    if size < 1:
        raise ShardingError(f"itemsize must be a positive int, got {size}")
    if topology is not None and not isinstance(topology, Topology):
        raise MeshTypeError(f"topology must be a mesh.Topology or None, got {show(topology)}")
    return size


def reshard(src: Sharding, dst: Sharding, topology: Topology | None = None, *,
            itemsize: int = 4, down: object = ()) -> Reshard:
    """The plan moving a tensor sharded as ``src`` to the sharding ``dst``: any two views,
    of one universe, disjoint ones or overlapping ones.

    Exact and minimal: every destination element arrives once (one contribution per
    partial coordinate of a :class:`Partial` source), from a holder of it; a rank keeps
    what it already holds; with a ``topology`` an element crosses hosts only when no holder
    shares the receiver's host; replicas share the sending.  ``itemsize`` is the bytes of
    one element (4: float32).  A :class:`Partial` destination dim is made from the source
    dim with its groups (the same mesh, as in torch): from the same ``Partial`` (kept
    partial) or from ``Replicate()`` (partitioned: ``"sum"`` holds ``v / n``).  Refused
    with :class:`~mesh.ShardingError`: shardings of different shapes, any other Partial
    destination (from a ``Shard``, another reduction, another mesh), a side partial over
    several kinds of reduction (``Partial("sum")`` on one dim and ``Partial("max")`` on
    another).
    ``down``: source ranks that have failed: they send nothing, and what only they held is
    :meth:`Reshard.lost` (each receiver's boxes to read from a checkpoint).

    A model's weights share few patterns (every layer's ``wq`` is sharded alike), so the
    last plans made are kept and given again for equal arguments: a plan is a value of its
    arguments, and what it computes is kept inside it.
    """
    return _planned(src, dst, topology, _checked(src, dst, topology, itemsize), _down(down))


@functools.lru_cache(maxsize=256)
def _planned(src: Sharding, dst: Sharding, topology: Topology | None, itemsize: int,
             down: frozenset[int]) -> Reshard:
    return Reshard._checked_already(src, dst, topology, itemsize, down)
