"""The senders' side of the law of :class:`~mesh.Costs`: each rank's bytes out per link tier.

A receiver gets a cell from the holders nearest it (on its host, else in its fast domain,
else anywhere), and the plan takes those holders in turn (``g mod h``).  The law spreads
each cell evenly over them: each of the ``h`` sends ``1/h`` of it (exact where one holder
sends, as a rank a drop leaves out sends its block; the plan's share on average where
replicas share the sending).  So, per tensor, a holder's bytes out on a tier are the
*demand* at its place for its tile (what the receivers on its host ask on the host tier,
in its fast domain on the domain tier, anywhere across) divided by the holders up of that
tile there; summed over the tensors.

The pricing side (``_bulk``) hands the demand in per source :data:`~._bulk.Kind` and tier,
keyed one of three ways: across, by tile; on a host or in a domain, by ``place * tiles +
tile``, or, where the machine names places by their rows of tiles, by *holder* (the first
rank up of the place holding the tile, each of its holders' share already divided out).
Each kind and tier's largest share comes from its keys alone (a table as long as the
ranks, or the holders counted from the failed ranks and a few places), and their sum
bounds the slowest sender; only where that bound could change the way's time is every
rank up listed with its share (arrays over the old ranks, once per failure, kind and tier).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .._tensor import Sharding
from ._bulk import (
    Kind,
    Memo,
    Near,
    RowsSorted,
    asked_across,
    asked_near,
    kind_of,
    merged,
    tiles_up,
)
from ._costs import LINK_TIERS, Costs, slowest

__all__ = ["Egress"]

_FEW = 4096
"""Keys (place, tile) asked of a kind on a host or in a domain up to this many are counted
from the places' ranks (a few receivers), more from every rank up."""

_TABLE, _SPAN = 1 << 22, 4
"""Holders are counted and asked for in a table over their keys (``place * tiles + tile``)
when it is at most this long (or this many entries per rank), else through the sorted
keys."""

_ASKING = 0.25
"""Where fewer than this fraction of the receiver classes ask on a host or in a domain,
only their receivers are listed (else every receiver, those asking nothing with 0)."""

_BOUND = True
"""Whether a way's slowest sender is bounded first (else every sender is listed)."""

ACROSS = 2
"""The tier code of a cell sent from anywhere (0: the receiver's host, 1: its domain)."""

Part = tuple[int, float, Callable[[], tuple[Any, Any]]]
"""One kind and tier's demand: the tier, its largest share of one holder, and, when asked,
the ranks up holding the kind's tiles with each one's share."""


class Egress:
    """One way's demand on the holders, gathered tensor by tensor (:meth:`add`; the bulk
    receivers' by class into :attr:`asked`), and the slowest sender it makes
    (:meth:`seconds`)."""

    def __init__(self, memo: Memo) -> None:
        self.memo = memo
        self.parts: dict[tuple[Kind, int, bool], tuple[Sharding, list[Any], list[Any]]] = {}
        self.asked: list[tuple[Any, ...]] = []

    def add(self, src: Sharding, tier: int, keys: Any, weights: Any,
            holders: bool = False) -> None:
        """Demand on ``src``'s holders on ``tier`` (0-2): at each key its bytes; the keys
        are holders (each one's share) or ``place * tiles + tile`` (the tile alone across,
        or without a topology)."""
        if self.memo.topology is None:
            tier = ACROSS
        got = self.parts.setdefault((kind_of(src), tier, holders), (src, [], []))
        got[1].append(keys)
        got[2].append(weights)

    def seconds(self, costs: Costs, below: float = 0.0) -> float:
        """The slowest sender's time: its bytes out on each tier at that tier's bandwidth,
        plus the tier's latency where it sends anything (a receiver's own law, mirrored).

        Where that is surely at most ``below``, a bound on it instead (the caller takes
        the larger of this and ``below``, which the bound cannot change): per tier, the
        largest share of one holder of each kind, summed over the kinds, as if one rank
        held them all.  Only a way the bound does not settle lists every sender."""
        np = self.memo.np
        if np is None:
            return max((costs.link_seconds(dict(zip(LINK_TIERS, row)))
                        for row in self._listed().values()), default=0.0)
        self._ask_bulk()
        parts = self._parts()
        most = [0.0] * len(LINK_TIERS)
        for tier, top, _ in parts:
            most[tier] += top
        bound = costs.link_seconds(dict(zip(LINK_TIERS, most)))
        if bound <= below and _BOUND:
            return bound
        return slowest(np, costs, np.stack(self._per_rank(parts)[1], axis=1))

    def _ask_bulk(self) -> None:
        """The bulk receivers' asks (:attr:`asked`, by class) handed to :meth:`add`: across
        per tile; on a host or in a domain receiver by receiver."""
        np = self.memo.np
        for one in merged(self.asked):
            how, cls, key, code, size, rows = one
            got = asked_across(how, cls, key, code, size, np)
            if got is not None:
                self.add(how[0], ACROSS, *got)
            for tier in (0, 1):
                cells = asked_near(self.memo, how, key, code, size, rows, tier)
                if cells is not None:
                    self._ask_near(how, cls, tier, *cells)

    def _ask_near(self, how: tuple[Sharding, Sharding, int], cls: Any, tier: int,
                  local: Any, weight: Any, radix: int, holders: bool) -> None:
        """Receivers (of classes ``cls``) asking on ``tier`` (0 host, 1 domain) the cells
        :func:`~._bulk.asked_near` gives, handed to :meth:`add` receiver by receiver."""
        np = self.memo.np
        placed = self.memo.placed(how[1].view)
        assert placed is not None, "cells are asked near only with a topology"
        place = placed[tier]
        asking = weight.any(axis=1)
        if np.count_nonzero(asking) < asking.size * _ASKING:  # (few classes ask there:
            at = np.flatnonzero(asking[cls])  # their receivers only)
            cls, place = cls[at], place[at]
        # (cell by cell, each cell's receivers in a row: np.take is a gather without fancy
        # indexing's overhead, += adds in place)
        keys = np.take(np.ascontiguousarray(local.T), cls, axis=1)
        keys += place * radix
        self.add(how[0], tier, keys.ravel(),
                 np.take(np.ascontiguousarray(weight.T), cls, axis=1).ravel(), holders)

    def _parts(self) -> list[Part]:
        """Every kind and tier's :data:`Part`."""
        return [self._part(src, kind, tier, holders, keys, weights)
                for (kind, tier, holders), (src, keys, weights) in self.parts.items()]

    def _part(self, src: Sharding, kind: Kind, tier: int, holders: bool, keys: list[Any],
              weights: list[Any]) -> Part:
        """One kind and tier's :data:`Part`."""
        memo, np = self.memo, self.memo.np
        key, weight = _joined(np, keys, np.int64), _joined(np, weights, np.float64)
        if holders:  # (each holder's share, at the first holder of its place)
            demand = np.bincount(key, weights=weight)

            def by_holder() -> tuple[Any, Any]:
                ranks, first = _first_holders(memo, src, tier)
                table = np.zeros(max(demand.size, int(first.max(initial=-1)) + 1))
                table[:demand.size] = demand
                return ranks, table[first]
            return tier, float(demand.max(initial=0.0)), by_holder
        if tier == ACROSS or key.size <= _FEW:  # holders counted without listing the world
            distinct, at = np.unique(key, return_inverse=True)
            demand = np.bincount(at.reshape(-1), weights=weight, minlength=distinct.size)
            share = demand / _holders(memo, src, tier, distinct)
            top = float(share.max(initial=0.0))
            if tier == ACROSS:
                def by_tile() -> tuple[Any, Any]:
                    ranks, tile, tiles, _ = tiles_up(memo, src)
                    table = np.zeros(tiles)
                    table[distinct] = share
                    return ranks, table[tile]
                return tier, top, by_tile
            return tier, top, lambda: self._by_key(src, kind, tier, key, weight)
        ranks, share = self._by_key(src, kind, tier, key, weight)
        return tier, float(share.max(initial=0.0)), lambda: (ranks, share)

    def _by_key(self, src: Sharding, kind: Kind, tier: int, key: Any, weight: Any
                ) -> tuple[Any, Any]:
        """The ranks up holding ``src``'s tiles and each one's share of the demand at
        ``place * tiles + tile`` keys on ``tier`` (every rank up listed: :meth:`_senders`)."""
        np = self.memo.np
        ranks, first, index, distinct, inverse = self._senders(src, kind, tier)
        if distinct is None:
            at = index[key]
        else:  # keys too wide for a table: the holders' sorted (a key asked for has
            # holders; one with no holder weighs 0: it lands anywhere)
            at = np.searchsorted(distinct, key).clip(0, max(distinct.size - 1, 0))
            at = np.where(distinct[at] == key, index[at], ranks.size)
        demand = np.bincount(at, weights=weight, minlength=ranks.size + 1)
        return ranks, demand[first] * inverse

    def _per_rank(self, parts: list[Part]) -> tuple[Any, list[Any]]:
        """The ranks up that hold anything (ascending) and each one's bytes out per tier
        (arrays over those ranks), the shares of every kind and tier summed by rank."""
        np = self.memo.np
        shares = [(tier, *got()) for tier, _, got in parts]
        size = max((int(ranks[-1]) + 1 for _, ranks, _ in shares if ranks.size), default=0)
        total = [np.zeros(size) for _ in LINK_TIERS]
        held = np.zeros(size, dtype=bool)
        for tier, ranks, share in shares:
            total[tier][ranks] += share  # (a kind's ranks are distinct: one share each)
            held[ranks] = True
        at = np.flatnonzero(held)
        return at, [t[at] for t in total]

    def _senders(self, src: Sharding, kind: Kind, tier: int) -> tuple[Any, ...]:
        """Of the ranks up holding ``src``'s tiles (ascending): those ranks; each one's key
        at ``tier`` numbered by the first of them holding it (so tables over the keys are
        as long as the ranks); a table from a key to that number (the ranks' count where
        none holds it), or, where keys are too wide for a table, the same over the sorted
        distinct keys with those keys; and one over each rank's key's holders.  Kept in
        the :class:`Memo` per failure, kind and tier."""
        memo = self.memo
        found = memo.senders.get((kind, tier))
        if found is None:
            np = memo.np
            ranks, tile, tiles, places = tiles_up(memo, src)
            if tier == ACROSS or places is None:
                key, width = tile, tiles
            else:
                key = places[tier] * tiles + tile
                width = (int(places[tier][-1]) + 1) * tiles if key.size else 0
            distinct = None
            if width > max(_TABLE, _SPAN * key.size):
                distinct, key = np.unique(key, return_inverse=True)
                key, width = key.reshape(-1), distinct.size
            index = np.full(width, ranks.size, dtype=np.int64)
            index[key[::-1]] = np.arange(ranks.size - 1, -1, -1)  # the first holder
            first = index[key]
            counts = np.bincount(first, minlength=ranks.size + 1)
            found = memo.senders[(kind, tier)] = (ranks, first, index, distinct,
                                                  1 / counts[first])
        return found

    def _listed(self) -> dict[int, list[float]]:
        """Each sender's bytes out per tier, rank by rank, without NumPy."""
        out: dict[int, list[float]] = {}
        for (_, tier, _), (src, keys, weights) in self.parts.items():
            demand: dict[int, float] = {}
            for ks, ws in zip(keys, weights):
                for k, w in zip(ks, ws):
                    demand[k] = demand.get(k, 0.0) + w
            held: dict[int, list[int]] = {}
            for q, k in _listed_keys(self.memo, src, tier):
                held.setdefault(k, []).append(q)
            for k, b in demand.items():
                for q in held.get(k, ()):
                    out.setdefault(q, [0.0] * len(LINK_TIERS))[tier] += b / len(held[k])
        return out


def _holders(memo: Memo, src: Sharding, tier: int, keys: Any) -> Any:
    """How many ranks up hold each of ``keys`` at ``tier`` (at least 1), without listing the
    world: across, a tile's ``ranks / tiles`` holders less its failed ones; on a host or
    in a domain, the place's ranks (a few) asked for their tiles."""
    np = memo.np
    found = Near(memo, src)
    tiles = math.prod(found.radix)
    if tier == ACROSS or memo.topology is None:  # (keys: distinct, ascending)
        gone = np.zeros(keys.size, dtype=np.int64)
        if found.gone:
            tile = np.array(list(found.gone), dtype=np.int64)
            at = np.searchsorted(keys, tile).clip(0, max(keys.size - 1, 0))
            hit = keys[at] == tile
            gone[at[hit]] = np.array(list(found.gone.values()), dtype=np.int64)[hit]
        return np.maximum(src.view.ranks.size // tiles - gone, 1)
    t = memo.topology
    out = []
    for k in keys.tolist():
        place, tile = divmod(k, tiles)
        hosts = [place] if tier == 0 else t.hosts_in(place)
        out.append(sum(found.tile(q) == tile for h in hosts for q in t.ranks_on(h)))
    return np.maximum(np.array(out, dtype=np.int64), 1)


def _first_holders(memo: Memo, src: Sharding, tier: int) -> tuple[Any, Any]:
    """The ranks up holding ``src``'s tiles (ascending) and, of each, the first rank of its
    place (host or domain, named by its row of tiles) holding its tile (from the rows
    sorted: :class:`~._bulk.RowsSorted`).  Kept in the :class:`Memo` per failure, kind and
    tier."""
    key = (kind_of(src), tier)
    found = memo.firsts.get(key)
    if found is None:
        ranks = tiles_up(memo, src)[0]
        rows = RowsSorted.of(memo, src, tier)
        sets = memo.source(src).sets
        assert sets is not None, "holders are asked for only where places have rows"
        place = ranks // rows.width
        firsts = rows.firsts()[sets[tier].of(place), ranks % rows.width]
        found = memo.firsts[key] = (ranks, place * rows.width + firsts)
    return found


def _joined(np: Any, parts: list[Any], dtype: Any) -> Any:
    """The arrays (or lists) ``parts`` end to end, as one array of ``dtype``."""
    if len(parts) == 1:
        return np.asarray(parts[0], dtype=dtype).reshape(-1)
    return np.concatenate([np.asarray(p, dtype=dtype).reshape(-1) for p in parts])


def _listed_keys(memo: Memo, src: Sharding, tier: int) -> Iterable[tuple[int, int]]:
    """Each rank up holding ``src``'s tiles with its key at ``tier``, rank by rank."""
    found = Near(memo, src)  # (the few-receiver path's tiles, shared through the memo)
    tiles = math.prod(found.radix)
    t = memo.topology
    universe = src.view.ranks
    for q in range(universe.size) if universe.ranks is None else universe.ranks:
        tile = found.tile(q)
        if tile is None:
            continue
        if tier == ACROSS or t is None:
            yield q, tile
        else:
            yield q, (t.host(q) if tier == 0 else t.domain(q)) * tiles + tile
