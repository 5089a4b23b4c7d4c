"""Every receiver of a reshard priced at once, with NumPy: what ``Reshard.receives`` and
``Reshard.lost`` give each rank, summed per link tier, without asking rank by rank.

A rank's block of a tensor is a product over tensor dims of index lists, and a sharding cuts
each tensor dim into segments labelled by the coordinates holding them
(``Sharding.segments``).  Merging the source's and the destination's cuts of a dim gives,
per destination label, its *pieces*: ``(source label, length)``.  A receiver's *cells* are
one piece per tensor dim; a cell lies in one source tile, held by every rank up with that
tile.  The plan (``mesh.reshard``) gives each cell as follows, and so does this module:
kept when the receiver holds the tile; else from a holder on its host, else in its fast
domain, else anywhere; read from storage when no holder is up.  So a receiver's bytes per
tier follow from its destination labels, its own source tile, and which (host, tile) and
(domain, tile) pairs some rank up holds: arrays over the ranks, a few cells per rank.

Cost: O(ranks × cells per rank) array work per tile pattern, plus sorting the ranks up by
their (host, tile) keys.  ``bulk_rows`` answers with the receivers' rows as an array.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from layout import Layout, complement

from .._core import MeshView, rank_table
from .._tensor import Sharding, pieces
from ._machine import Topology

__all__ = ["Ask", "Coordinates", "Kind", "Memo", "Near", "bulk_classes", "bulk_rows", "few_rows",
           "RowsSorted", "asked_across", "asked_near", "kind_of", "merged", "tiles_up"]


_SPARSE = 4
"""A universe whose ranks span more than this many times its size is sorted (else its
ranks are scattered into a table over their span)."""

_CLASS_TABLE, _CLASS_SPAN = 1 << 16, 4
"""Receiver classes are numbered through a table when their keys span at most this many,
or this many times the receivers, else by sorting."""

_DENSE_OLD = True
"""Whether an old universe of consecutive ranks is indexed by subtraction (else searched)."""

_ROW_SETS = True
"""Whether a regular machine's places are named by their rows of tiles (else by sets)."""

_ROW_MAJOR = True
"""Whether a compact row-major view over ascending ranks has its coordinates computed from
the offsets (else listed through rank tables, as every view's)."""

_COARSER = True
"""Whether groups whose receiver classes are functions of the finest group's are priced
through it (else every group's classes are numbered together)."""

_SHARED_CLASSES = True
"""Whether pattern groups of one source kind, destination view and destination sharding
dims (flattened) share one numbering of their receiver classes (else each numbers its own)."""

_BROUGHT = True
"""Whether a destination whose ranks are all old ranks numbers its receiver classes from
the old ranks' classes by what they bring (own tile, tiles near), numbered once per
failure and source kind (else from those features, per destination)."""

_MIX = 0x9E3779B97F4A7C15
"""The odd multiplier rows are hashed with (column ``k`` weighs ``_MIX * (2k + 1)``)."""


class _Digits:
    """The coordinates of a compact row-major view's ranks along each dim (``[k]``: the
    ``k``-th digit of every offset), each computed when first asked: a dim that shards no
    tensor (a replica dim) costs nothing."""

    def __init__(self, np: Any, shape: tuple[int, ...]) -> None:
        self.np, self.shape = np, shape
        self.offsets: Any = None
        self.got: dict[int, Any] = {}

    def __getitem__(self, k: int) -> Any:
        got = self.got.get(k)
        if got is None:
            if self.offsets is None:
                self.offsets = self.np.arange(math.prod(self.shape))
            got = self.got[k] = self.offsets // math.prod(self.shape[k + 1:]) % self.shape[k]
        return got


class Coordinates:
    """Every rank of a view's universe, ascending (``ranks``), with its coordinate along
    each dim (``dims[k]``, aligned with ``ranks``): one rank table per dim."""

    dims: list[Any] | _Digits

    def __init__(self, np: Any, view: MeshView) -> None:
        n = view.ranks.size
        if _ROW_MAJOR and self._row_major(np, view):
            return
        tables = []
        for k in range(view.ndim):
            mode = view.layout[k]
            table = rank_table(view.ranks, complement(mode, n), mode)
            tables.append((table.ravel(), np.tile(np.arange(table.shape[1]), table.shape[0])))
        if not tables:  # a view of no dims: one rank per instance
            self.ranks: Any = np.sort(np.asarray(view.ranks.array()))
            self.dims = []
            return
        flat = tables[0][0]  # each table lists every rank of the universe once
        low = int(flat.min())
        span = int(flat.max()) - low + 1
        if span > _SPARSE * n:  # sparse ranks: sorted, each table once
            orders = [np.argsort(f, kind="stable") for f, _ in tables]
            self.ranks = flat[orders[0]]
            self.dims = [c[o] for (_, c), o in zip(tables, orders)]
            return
        present = np.zeros(span, dtype=bool)  # dense ranks: scattered, no sort
        present[flat - low] = True
        self.ranks = np.flatnonzero(present) + low
        dims = self.dims = []
        at = np.empty(span, dtype=np.int64)
        for f, c in tables:
            at[f - low] = c
            dims.append(at[self.ranks - low])


    def _row_major(self, np: Any, view: MeshView) -> bool:
        """A compact row-major view over ascending ranks (a survivor world, and the plan's
        views of it, mostly): offset ``o`` holds the ``o``-th rank, its coordinates are
        ``o``'s digits (:class:`_Digits`); no table is listed.  False (nothing set) for any
        other view."""
        n = view.ranks.size
        if not view.ndim or view.layout.size != n or view.layout != Layout(view.shape):
            return False
        ranks = np.arange(n) if view.ranks.is_identity else view.ranks.array()
        if n > 1 and not bool((ranks[1:] > ranks[:-1]).all()):
            return False
        self.ranks, self.dims = ranks, _Digits(np, view.shape)
        return True


def _label_ids(np: Any, s: Sharding, d: int, coords: Coordinates, at: Any = None) -> Any:
    """Each rank's label on tensor dim ``d`` as one int (mixed radix over the sizes of the
    view dims sharding it); of the ranks at indices ``at`` only, when given."""
    out = None  # (the first dim's coordinates as they are: no array of zeros to grow)
    for i, _ in s.sharders(d):
        c = coords.dims[i] if at is None else coords.dims[i][at]
        out = c.astype(np.int64, copy=False) if out is None else out * s.view.shape[i] + c
    if out is None:
        return np.zeros(coords.ranks.shape if at is None else at.shape, dtype=np.int64)
    return out


def _label_id(s: Sharding, d: int, label: tuple[int, ...]) -> int:
    out = 0
    for (i, _), c in zip(s.sharders(d), label):
        out = out * s.view.shape[i] + c
    return out


def _labels(s: Sharding, d: int) -> int:
    return math.prod(s.view.shape[i] for i, _ in s.sharders(d))


def _piece_lists(src: Sharding, dst: Sharding, d: int) -> list[list[tuple[int, int]]]:
    """Per destination label id of tensor dim ``d``: its pieces, ``(source label id,
    length)``, in order (the two cuts merged as ``mesh.reshard`` merges them)."""
    got: list[list[tuple[int, int]]] = [[] for _ in range(_labels(dst, d))]
    for start, stop, ls, ld in pieces(src.segments(d), dst.segments(d)):
        got[_label_id(dst, d, ld)].append((_label_id(src, d, ls), stop - start))
    return got


def _places(np: Any, topology: Topology | None, ranks: Any) -> tuple[Any, Any] | None:
    """(host, domain) of each rank, by arithmetic on a regular topology."""
    if topology is None:
        return None
    per, per_domain = topology.devices_per_host, topology.hosts_per_domain
    if per is not None and per_domain is not None:
        hosts = ranks // per
        return hosts, hosts // per_domain
    listed = ranks.tolist()
    return (np.array([topology.host(r) for r in listed], dtype=np.int64),
            np.array([topology.domain(r) for r in listed], dtype=np.int64))


Kind = tuple[MeshView, tuple[int, ...]]
"""A source's view and the view dims that shard it, in tensor-dim order: what each rank's
tile depends on (its coordinates on those dims, in that order; not the tensor's shape nor
which tensor dims they shard), so the tensors of one kind share their ranks' tiles."""


def kind_of(src: Sharding) -> Kind:
    return src.view, tuple(i for d in range(len(src.shape)) for i, _ in src.sharders(d))


class Memo:
    """What pricing one failure computes once and reuses across ways: each view's
    :class:`Coordinates` and hosts, each source sharding's :class:`_Sources` and its ranks'
    tiles, each rank's coordinate in a view (NumPy: ``np``, None without it)."""

    def __init__(self, np: Any, failed: tuple[int, ...], topology: Topology | None) -> None:
        self.np, self.failed, self.topology = np, failed, topology
        self.views: dict[MeshView, Coordinates] = {}
        self.sources: dict[Kind, _Sources] = {}
        self.at: dict[tuple[MeshView, int], tuple[int, ...] | None] = {}
        self.places: dict[MeshView, tuple[Any, Any] | None] = {}
        self.olds: dict[tuple[MeshView, MeshView], tuple[Any, Any]] = {}
        self.tiles: dict[Kind, dict[int, int | None]] = {}
        self.near: dict[tuple[Kind, int, int], frozenset[int | None]] = {}
        self.nearby: dict[Kind, dict[int, list[frozenset[int | None]]]] = {}
        self.gone: dict[Kind, dict[int, int]] = {}
        self.cuts: dict[tuple[Any, ...], list[list[list[tuple[int, int]]]]] = {}
        self.where: dict[int, tuple[int, int]] = {}
        self.sets: dict[frozenset[int | None], frozenset[int | None]] = {}
        self.labels: dict[tuple[Any, ...], dict[int, tuple[int, ...]]] = {}
        self.classed: dict[tuple[Kind, Kind], tuple[Any, ...]] = {}
        self.brought: dict[Kind, tuple[Any, int]] = {}
        self.senders: dict[tuple[Kind, int], tuple[Any, ...]] = {}
        self.firsts: dict[tuple[Kind, int], tuple[Any, Any]] = {}
        self.up: dict[Kind, tuple[Any, Any, int, tuple[Any, Any] | None]] = {}
        self.rows_sorted: dict[tuple[Kind, int], RowsSorted] = {}

    def pieces(self, src: Sharding, dst: Sharding) -> list[list[list[tuple[int, int]]]]:
        """:func:`_piece_lists` of every tensor dim, kept per what they depend on (the
        views' shapes, the placements and the tensor's shape: many ways and tensors share
        them)."""
        key = (src.view.shape, src.placements, dst.view.shape, dst.placements, src.shape)
        got = self.cuts.get(key)
        if got is None:
            got = self.cuts[key] = [_piece_lists(src, dst, d) for d in range(len(src.shape))]
        return got

    def source(self, src: Sharding) -> _Sources:
        """The :class:`_Sources` of ``src``, kept per its :data:`Kind`."""
        key = kind_of(src)
        got = self.sources.get(key)
        if got is None:
            got = self.sources[key] = _Sources(self, src)
        return got

    def coordinates(self, view: MeshView) -> Coordinates:
        got = self.views.get(view)
        if got is None:
            got = self.views[view] = Coordinates(self.np, view)
        return got

    def placed(self, view: MeshView) -> tuple[Any, Any] | None:
        """(host, domain) of each rank of ``view``'s universe, ascending (None without a
        topology)."""
        if view not in self.places:
            self.places[view] = _places(self.np, self.topology, self.coordinates(view).ranks)
        return self.places[view]

    def old_of(self, old: MeshView, new: MeshView) -> tuple[Any, Any]:
        """For each rank of ``new``'s universe (ascending), its index among ``old``'s
        universe's ranks (ascending), and whether it is there."""
        key = (old, new)
        if key not in self.olds:
            np = self.np
            a, b = self.coordinates(old).ranks, self.coordinates(new).ranks
            if a.size and int(a[-1]) - int(a[0]) + 1 == a.size and _DENSE_OLD:  # [lo, hi]
                at = (b - a[0]).clip(0, a.size - 1)
            else:
                at = np.searchsorted(a, b).clip(0, max(a.size - 1, 0))
            self.olds[key] = (at, a[at] == b)
        return self.olds[key]

    def coordinate(self, view: MeshView, rank: int) -> tuple[int, ...] | None:
        key = (view, rank)
        if key not in self.at:
            self.at[key] = view.coordinate(rank)
        return self.at[key]


class _Sources:
    """Of one source sharding, every old rank's tile, which ranks are up, which tiles some
    rank up holds, and, per level (host, domain), the sets of tiles held by the ranks up
    on each place (for a topology)."""

    def __init__(self, memo: Memo, src: Sharding) -> None:
        np = memo.np
        old = memo.coordinates(src.view)
        self.tile, self.up, self.tiles = _tiles(memo, src)
        self.alive = np.zeros(self.tiles, dtype=bool)
        self.alive[self.tile[self.up]] = True
        self.sets = _tile_sets(memo, old.ranks, self.tile, self.up, self.tiles)


def tiles_up(memo: Memo, src: Sharding) -> tuple[Any, Any, int, tuple[Any, Any] | None]:
    """The old ranks up holding ``src``'s tiles (ascending), each one's tile, how many
    tiles there are, and each one's (host, domain) (None without a topology): kept in the
    :class:`Memo` per failure and source :data:`Kind` (a :class:`_Sources` is not built
    for it: the senders need no sets of tiles)."""
    key = kind_of(src)
    got = memo.up.get(key)
    if got is None:
        np = memo.np
        known = memo.sources.get(key)
        tile, up, tiles = (_tiles(memo, src) if known is None
                           else (known.tile, known.up, known.tiles))
        at = np.flatnonzero(up)
        places = memo.placed(src.view)
        got = memo.up[key] = (
            memo.coordinates(src.view).ranks[at], tile[at], tiles,
            None if places is None else (places[0][at], places[1][at]))
    return got


def _tiles(memo: Memo, src: Sharding) -> tuple[Any, Any, int]:
    """Of every old rank of ``src``'s view (ascending), its tile (its labels on every tensor
    dim, mixed radix) and whether it is up; and how many tiles there are."""
    np = memo.np
    old = memo.coordinates(src.view)
    tile = np.zeros(old.ranks.shape, dtype=np.int64)
    for d in range(len(src.shape)):
        tile = tile * _labels(src, d) + _label_ids(np, src, d, old)
    up = ~np.isin(old.ranks, np.array(memo.failed, dtype=np.int64))
    return tile, up, math.prod(_labels(src, d) for d in range(len(src.shape)))


def _tile_sets(memo: Memo, ranks: Any, tile: Any, up: Any, radix: int
               ) -> list[_TileSets] | None:
    """Per level (host, domain), the :class:`_TileSets` of the ranks up (None without a
    topology).  On a regular machine whose ranks are ``[0, N)``, a place's id names the
    row of its ranks' tiles in order (-1: a rank not up; equal rows hold equal sets: a
    finer naming, as exact); else the sets are read off the ``place * radix + tile`` keys
    of the ranks up."""
    np, t = memo.np, memo.topology
    places = _places(np, t, ranks[up])
    if places is None or t is None:
        return None
    per, per_domain = t.devices_per_host, t.hosts_per_domain
    if (not _ROW_SETS or per is None or per_domain is None or not ranks.size
            or int(ranks[0]) != 0 or int(ranks[-1]) != ranks.size - 1):
        return [_TileSets(np, _Keys(np, p * radix + tile[up]), radix) for p in places]
    held = np.where(up, tile, -1)
    return [_TileSets.of_rows(np, held, width, radix, places[k])
            for k, width in enumerate((per, per * per_domain))]


_MEMBERS = 1 << 22
"""Sets of tiles are answered from a table (distinct sets × tiles, one byte each) up to
this size, else from the keys of their members."""


class _TileSets:
    """Of one level (host or domain), each place's set of tiles held by ranks up there,
    named by an id (equal sets, equal ids; 0: a place with no rank of the universe), and
    which tiles each named set holds."""

    keys: _Keys | None  # the members' ``place * radix + tile`` keys, or
    member: Any  # a table (ids × tiles) of which tiles each set holds
    rows: Any  # named by rows: each id's row (ids × width; id 0's holds none), else None
    width: int  # the ranks per place, when named by rows

    @classmethod
    def of_rows(cls, np: Any, held: Any, width: int, radix: int, places: Any) -> _TileSets:
        """Places of ``width`` consecutive ranks from rank 0, each named by its row of
        ``held`` (a rank's tile, -1 when it is not up; the last row padded with -2);
        ``places``: the place of each rank up, in order."""
        out = cls.__new__(cls)
        rows = -(-held.size // width)
        table = np.full(rows * width, -2, dtype=np.int64)
        table[:held.size] = held
        table = table.reshape(rows, width)
        ids = _row_ids(np, table) + 1
        out.np, out.radix, out.count = np, radix, int(ids.max()) + 1
        out.table = np.append(ids, 0)  # the last entry: places beyond, none up there
        out.rows, out.width = table[_firsts(np, ids, out.count)], width
        out.rows[0] = -2  # (id 0: a place with no rank of the universe)
        out.keys, out.member = None, None
        if out.count * radix <= _MEMBERS:
            out.member = _members(np, table[_firsts(np, ids, out.count)[1:]], radix)
        else:
            out.keys = _Keys(np, places * radix + held[held >= 0])
        return out

    def __init__(self, np: Any, keys: _Keys, radix: int) -> None:
        got = keys.keys()
        place, tile = got // radix, got % radix  # by place, then tile
        starts = np.flatnonzero(np.concatenate(([True], place[1:] != place[:-1])))
        counts = np.diff(np.append(starts, got.size))
        self.np, self.radix, self.keys, self.member = np, radix, keys, None
        self.rows, self.width = None, 0
        ids = np.zeros(starts.size, dtype=np.int64)
        if starts.size:  # the sets as rows (padded with -1), numbered column by column
            row = np.repeat(np.arange(starts.size), counts)
            table = np.full((starts.size, int(counts.max())), -1, dtype=np.int64)
            table[row, np.arange(got.size) - starts[row]] = tile
            ids = _row_ids(np, table) + 1
        self.count = int(ids.max()) + 1 if starts.size else 1
        self.table = np.zeros(int(place[-1]) + 2 if got.size else 1, dtype=np.int64)
        self.table[place[starts]] = ids  # the last entry: places beyond, none up there

    def of(self, places: Any) -> Any:
        """The id of each of ``places``' set."""
        return self.table[self.np.minimum(places, self.table.size - 1)]

    def held(self, places: Any, tiles: Any) -> Any:
        """Whether ``tiles[i, j]`` is in the set of place ``places[i]``."""
        if self.keys is None:
            return self.member[self.of(places)[:, None], tiles]
        return self.keys.found(places[:, None] * self.radix + tiles)


def _members(np: Any, rows: Any, radix: int) -> Any:
    """A table (1 + rows × ``radix``): row ``i + 1`` marks the tiles (entries >= 0) of
    ``rows[i]``; row 0, the empty set, marks none."""
    out = np.zeros((rows.shape[0] + 1, radix), dtype=bool)
    at = np.nonzero(rows >= 0)
    out[at[0] + 1, rows[at]] = True
    return out


def _row_ids(np: Any, table: Any) -> Any:
    """Each row's id among the distinct rows of ``table`` (equal rows, equal ids): rows
    hashed and numbered by their hash, each checked equal to its number's first row; on
    a collision, numbered column by column instead."""
    mix = np.array([(_MIX * (2 * k + 1)) % (1 << 64)
                    for k in range(table.shape[1])], dtype=np.uint64)
    hashed = table.astype(np.uint64) @ mix  # (wrapping mod 2**64: a product's sum, in
    # one pass; ``sum(axis=1)`` of the products is ten times slower on short rows)
    _, first, ids = np.unique(hashed, return_index=True, return_inverse=True)
    ids = ids.reshape(-1)
    if (table == table[first[ids]]).all():
        return ids
    low = int(table.min())  # (-2: padding)
    span = int(table.max()) - low + 1
    return _numbered(np, [(column - low, span) for column in table.T], table.shape[0])[0]


_DENSE = 1 << 24
"""Key ranges up to this size are looked up in a table (one byte a key), larger ones by
binary search."""


class _Keys:
    """A set of ints answering membership for arrays of keys: a boolean table over
    ``[0, max]`` when that is at most :data:`_DENSE` long, else a sorted array."""

    def __init__(self, np: Any, keys: Any) -> None:
        self.np = np
        self.size = int(keys.max()) + 1 if keys.size else 0
        if self.size <= _DENSE:
            self.table = np.zeros(self.size + 1, dtype=bool)  # the last entry: out of range
            self.table[keys] = True
            self.sorted = None
        else:
            self.sorted = np.sort(keys)

    def keys(self) -> Any:
        """The set's ints, ascending, each once."""
        np = self.np
        if self.sorted is None:
            return np.flatnonzero(self.table[:-1])
        return self.sorted[np.concatenate(([True], self.sorted[1:] != self.sorted[:-1]))]

    def found(self, keys: Any) -> Any:
        """Which of ``keys`` (an array of non-negative ints) are in the set."""
        np = self.np
        if self.sorted is None:
            return self.table[np.minimum(keys, self.size)]
        at = np.searchsorted(self.sorted, keys).clip(0, self.sorted.size - 1)
        return self.sorted[at] == keys


Demand = Callable[[Sharding, int, Any, Any, bool], None]
"""Where a way's receivers' asks go (``_egress.Egress.add``): the source, the tier code (0
host, 1 domain, 2 across), the keys, their bytes, and whether the keys are holders (the
first rank up holding the tile in the place, the bytes each holder's share) or ``place *
tiles + tile`` (the tile alone across)."""

Ask = tuple[Sharding, Sharding, int]
"""One tensor pattern to price: its source and destination shardings and its weight (bytes
per element times the tensors sharing it)."""


def bulk_rows(memo: Memo, asks: list[Ask]) -> Any:
    """Bytes each rank of the destination's universe (ascending) gets of every asked
    pattern, summed with their weights: an array (ranks × 5) of host, domain, cross and
    storage bytes, and the bytes of the blocks it rebuilds (those it gets anything of)."""
    rows, cls = bulk_classes(memo, asks)
    return rows[cls]


def bulk_classes(memo: Memo, asks: list[Ask], asked: list[tuple[Any, ...]] | None = None
                 ) -> tuple[Any, Any]:
    """:func:`bulk_rows` kept by class: the distinct rows (classes × 5) and each rank's
    class (ascending ranks), so that the slowest receiver and the sums need no array over
    every rank and tier (``rows[cls]`` is :func:`bulk_rows`).

    A receiver's row is linear in the pieces' lengths: patterns that differ only there (the
    same views, placements and source labels of every piece, e.g. two weights whose dims
    the meshes cut alike) are priced in one pass over the ranks, their cell sizes summed
    first over the destination labels (a table of labels × cells, not ranks × cells).  Each
    such group classes the receivers its own way; a rank's class over all groups is the
    tuple of its groups' classes: the finest group's class when the others' are functions
    of it (their features are mostly among its own), else the tuples numbered.  Into
    ``asked``, each group puts what its receivers ask of the holders, by class
    (how, classes, cells' tiles, tier codes, bytes, and the near places' rows: ``_egress``
    reads them)."""
    groups: dict[tuple[Any, ...], list[tuple[Sharding, Sharding, int, list[Any]]]] = {}
    for src, dst, weight in asks:
        lists = memo.pieces(src, dst)
        shape = tuple(tuple(tuple(label for label, _ in g) for g in per) for per in lists)
        key = (src.view, dst.view, src.placements, dst.placements, shape)
        groups.setdefault(key, []).append((src, dst, weight, lists))
    got = [_group_rows(memo, members, asked) for members in groups.values()]
    np = memo.np
    rows, cls = max(got, key=lambda g: len(g[0]))  # the finest classes: the others' as
    maps = [_coarser(np, cls, len(rows), c) for _, c in got]  # functions of them, if so
    if _COARSER and all(m is not None for m in maps):
        return sum(r[m] for (r, _), m in zip(got, maps)), cls
    cls, size = _numbered(np, [(c, len(r)) for r, c in got], cls.size)
    first = _firsts(np, cls, size)
    return sum(r[c[first]] for r, c in got), cls


def _coarser(np: Any, fine: Any, count: int, other: Any) -> Any:
    """When the classes ``other`` are a function of the classes ``fine`` (``count`` of
    them: receivers in one fine class are in one other class), that function as a table;
    else None."""
    if other is fine:  # groups sharing their classes (_SHARED_CLASSES): the identity
        return np.arange(count)
    table = np.zeros(count, dtype=np.int64)
    table[fine] = other
    return table if bool((table[fine] == other).all()) else None


def _padded(np: Any, lists: list[list[tuple[int, int]]], at: int) -> Any:
    """Entry ``at`` (0: source label, 1: length) of each destination label's pieces, as an
    array (labels × most pieces) padded with 0 (a length 0 piece moves nothing)."""
    width = max((len(g) for g in lists), default=0) or 1
    out = np.zeros((len(lists), width), dtype=np.int64)
    for k, g in enumerate(lists):
        out[k, :len(g)] = [piece[at] for piece in g]
    return out


def _sizes(np: Any, members: list[tuple[Sharding, Sharding, int, list[Any]]]
           ) -> tuple[Any, list[tuple[Any, Any]]]:
    """Per destination tile (its labels, mixed radix) and cell (one piece per tensor dim,
    mixed radix): the cell's elements summed over the members with their weights; and, per
    distinct set of non-empty cells among the members, that set (tiles × cells) and the
    members' whole blocks summed per tile (a block is rebuilt when one of its non-empty
    cells is not kept)."""
    total: Any = None
    blocks: dict[bytes, tuple[Any, Any]] = {}
    for _, _, weight, lists in members:
        table = np.full((1, 1), weight, dtype=np.int64)
        for per in lists:
            lengths = _padded(np, per, 1)
            table = (table[:, None, :, None] * lengths[None, :, None, :]).reshape(
                table.shape[0] * lengths.shape[0], table.shape[1] * lengths.shape[1])
        total = table if total is None else total + table
        full = table > 0
        key = full.tobytes()
        mask, block = blocks.get(key, (full, 0))
        blocks[key] = (mask, block + table.sum(axis=1))
    return total, list(blocks.values())


def _group_rows(memo: Memo, members: list[tuple[Sharding, Sharding, int, list[Any]]],
                asked: list[tuple[Any, ...]] | None = None) -> tuple[Any, Any]:
    """:func:`bulk_classes` of patterns of one structure (see there): each class of
    receivers (the same own source tile, destination tile, and tiles held near it) priced
    once; the classes' rows and each receiver's class."""
    np = memo.np
    src, dst = members[0][0], members[0][1]
    source = memo.source(src)
    cls, first, own, mine, places = _classed(memo, source, src, dst)
    key, tile = _cells(np, [_labels(src, d) for d in range(len(src.shape))], members[0][3],
                       mine, first.size)
    sizes, blocks = _sizes(np, members)
    code = _codes(np, source, places, key, own)
    if asked is not None:  # (what its receivers ask of the holders: ``_egress``)
        near = None
        if places is not None and source.sets is not None and source.sets[0].rows is not None:
            near = [(sets, sets.of(p)) for sets, p in zip(source.sets, places)]
        asked.append(((src, dst, source.tiles), cls, key, code, sizes[tile], near))
    out = _tallied(np, code, sizes[tile],
                   sum(w * math.prod(s.shape) for s, _, w, _ in members))
    moved = code != _KEPT
    out[:, _KEPT] = 0  # the kept cells count only in the blocks rebuilt:
    for mask, block in blocks:
        out[:, _KEPT] += np.where((moved & mask[tile]).any(axis=1), block[tile], 0)
    return out, cls


def asked_across(how: tuple[Sharding, Sharding, int], cls: Any, key: Any, code: Any,
                 size: Any, np: Any) -> tuple[Any, Any] | None:
    """What receivers (each of class ``cls``; per class, its cells' source tiles ``key``,
    tier codes and bytes) ask across: the tiles and their bytes (a class's cells weighed
    by its receivers); None when nothing."""
    across = (code == 2) & (size > 0)
    if not across.any():
        return None
    counts = np.bincount(cls, minlength=code.shape[0])
    return key[across], (size * counts[:, None])[across]


def asked_near(memo: Memo, how: tuple[Sharding, Sharding, int], key: Any, code: Any,
               size: Any, near: Any, tier: int) -> tuple[Any, Any, int, bool] | None:
    """Per class (rows of ``key``, ``code``, ``size``), the cells asked on a host (``tier``
    0) or in a fast domain (1): each one's key within the place and its bytes, the place's
    radix, and whether the keys are holders.  Where places are named by their rows of
    tiles (``near``: per level, the :class:`_TileSets` and each class's place's id), the
    key is the place's first rank holding the tile (its index in the place) and the bytes
    are each of its holders' share there (the class's row says where they are and how
    many); else the key is the tile and the bytes are the cell's.  None when nothing is
    asked there (or without a topology)."""
    np = memo.np
    mine = (code == tier) & (size > 0)
    if memo.topology is None or not mine.any():
        return None
    cols = np.flatnonzero(mine.any(axis=0))  # (the cells asked there)
    weight = np.where(mine[:, cols], size[:, cols], 0).astype(np.float64)
    if near is None:
        return key[:, cols], weight, how[2], False
    sets, ids = near[tier]
    slot, count = RowsSorted.of(memo, how[0], tier).find(ids[:, None], key[:, cols])
    return slot, weight / np.maximum(count, 1), sets.width, True


class RowsSorted:
    """Of one source :data:`Kind` and level whose places are named by their rows of tiles
    (:class:`_TileSets`), each row's ranks sorted by tile (stably: equal tiles in rank
    order), all rows end to end with each row's tiles offset past the last's: where in a
    row a tile is first held and how often, by binary search.  Kept in the :class:`Memo`
    per failure, kind and level."""

    def __init__(self, np: Any, sets: _TileSets) -> None:
        rows, self.width = sets.rows, sets.width
        self.np, self.span = np, sets.radix + 3  # (tiles, -1 and -2: not up, beyond)
        self.order = np.argsort(rows, axis=1, kind="stable")
        ordered = np.take_along_axis(rows, self.order, axis=1)
        self.flat = (ordered + 2 + np.arange(rows.shape[0])[:, None] * self.span).ravel()

    @classmethod
    def of(cls, memo: Memo, src: Sharding, level: int) -> RowsSorted:
        key = (kind_of(src), level)
        got = memo.rows_sorted.get(key)
        if got is None:
            sets = memo.source(src).sets
            assert sets is not None, "asked for only where places are named by rows"
            got = memo.rows_sorted[key] = cls(memo.np, sets[level])
        return got

    def find(self, ids: Any, tiles: Any) -> tuple[Any, Any]:
        """For rows ``ids`` and ``tiles`` (broadcast together), the first place in the row
        holding the tile (any place where it is not held) and how many hold it there."""
        np = self.np
        want = ids * self.span + tiles + 2
        low = np.searchsorted(self.flat, want, side="left")
        high = np.searchsorted(self.flat, want, side="right")
        return self.order.ravel()[low.clip(0, self.flat.size - 1)], high - low

    def firsts(self) -> Any:
        """Per row and place in it, the first place of the row holding the same tile."""
        np = self.np
        ordered = self.flat.reshape(self.order.shape)
        starts = np.ones(ordered.shape, dtype=bool)
        starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        run = np.maximum.accumulate(np.where(starts, np.arange(self.width), 0), axis=1)
        out = np.empty_like(self.order)
        np.put_along_axis(out, self.order, np.take_along_axis(self.order, run, axis=1), axis=1)
        return out


def merged(asked: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Groups' asks (see :func:`bulk_classes`) with one source kind, the
    same classes and the same cells merged, their bytes summed (what they ask is linear
    in the bytes: two weights of one placement whose cuts differ only in length)."""
    out: dict[tuple[Any, ...], list[Any]] = {}
    for how, cls, key, code, size, near in asked:
        mine = out.setdefault((kind_of(how[0]), id(cls), key.tobytes(), code.tobytes()),
                              [how, cls, key, code, 0, near])
        mine[4] = mine[4] + size
    return [tuple(v) for v in out.values()]


def _classed(memo: Memo, source: _Sources, src: Sharding, dst: Sharding) -> tuple[Any, ...]:
    """The receiver classes of :func:`_group_rows`: each receiver's class, each class's
    first receiver, and of those its own source tile (-1: not an old rank up), destination
    labels and places.  The classes are kept per source :data:`Kind` and destination
    :data:`Kind` (the view and its dims sharding the tensor, flattened), all they depend
    on: a class is a tuple numbered in its order (:func:`_numbered`), and a rank's labels
    over the tensor dims, in order, are ordered as its coordinates on those dims."""
    how = (kind_of(src), kind_of(dst))
    got = memo.classed.get(how) if _SHARED_CLASSES else None
    if got is None:
        got = memo.classed[how] = _class_numbers(memo, source, src, dst)
    cls, first, own, places = got
    new = memo.coordinates(dst.view)
    return (cls, first, own, [_label_ids(memo.np, dst, d, new, first)
                              for d in range(len(src.shape))], places)


def _class_numbers(memo: Memo, source: _Sources, src: Sharding, dst: Sharding
                   ) -> tuple[Any, ...]:
    """:func:`_classed` numbered anew: each receiver's class, each class's first receiver,
    and of those its own source tile and places.  When every receiver is an old rank, its
    own tile and places are its old rank's, so the classes number (what it brings,
    destination labels), what it brings numbered once per failure (:func:`_brought`)."""
    np = memo.np
    new = memo.coordinates(dst.view)
    at, there = memo.old_of(src.view, dst.view)
    mine = [_label_ids(np, dst, d, new) for d in range(len(src.shape))]
    radix = [_labels(dst, d) for d in range(len(src.shape))]
    if _BROUGHT and bool(there.all()):  # (the places of the classes' first ranks only)
        brought, count = _brought(memo, source, src)
        cls, size = _numbered(np, [(brought[at], count), *zip(mine, radix)], at.size)
        first = _firsts(np, cls, size)
        own = np.where(source.up[at[first]], source.tile[at[first]], -1)
        return cls, first, own, _places(np, memo.topology, new.ranks[first])
    places = memo.placed(dst.view)
    own = np.where(there & source.up[at], source.tile[at], -1)
    cls, first = _classes(np, source, places, own, mine, radix)
    return (cls, first, own[first],
            None if places is None else (places[0][first], places[1][first]))


def _brought(memo: Memo, source: _Sources, src: Sharding) -> tuple[Any, int]:
    """Each old rank's class by what it brings to a receiver class (:func:`_classes`): its
    own tile (-1: not up) and the sets of tiles held by ranks up on its host and in its
    fast domain, numbered; and how many.  Kept per failure and source :data:`Kind`."""
    key = kind_of(src)
    got = memo.brought.get(key)
    if got is None:
        np = memo.np
        parts = [(np.where(source.up, source.tile, -1) + 1, source.tiles + 1)]
        places = memo.placed(src.view)
        if places is not None and source.sets is not None:
            parts += [(sets.of(p), sets.count) for sets, p in zip(source.sets, places)]
        got = memo.brought[key] = _numbered(np, parts, source.tile.size)
    return got


def _cells(np: Any, radix: list[int], lists: list[Any], mine: list[Any], n: int
           ) -> tuple[Any, Any]:
    """The cells of receivers with destination labels ``mine`` (per tensor dim): one piece
    per tensor dim, every combination, each cell's source tile (``n`` receivers × cells);
    and each receiver's destination tile (mixed radix), which the cells' sizes follow."""
    key = np.zeros((n, 1), dtype=np.int64)
    tile = np.zeros(n, dtype=np.int64)
    for d, m in enumerate(mine):
        labels = _padded(np, lists[d], 0)
        key = (key[:, :, None] * radix[d] + labels[m][:, None, :]
               ).reshape(key.shape[0], -1)
        tile = tile * labels.shape[0] + m
    return key, tile


def _classes(np: Any, source: _Sources, places: tuple[Any, Any] | None, own: Any,
             mine: list[Any], radix: list[int]) -> tuple[Any, Any]:
    """Receivers whose rows are equal by construction: the same own tile, destination
    labels, and sets of tiles held by ranks up on their host and in their fast domain
    (nothing else enters a row).  Each receiver's class, and each class's first receiver."""
    parts = [(own + 1, source.tiles + 1), *zip(mine, radix)]
    if places is not None and source.sets is not None:
        parts += [(sets.of(p), sets.count) for sets, p in zip(source.sets, places)]
    cls, size = _numbered(np, parts, own.size)
    return cls, _firsts(np, cls, size)


def _numbered(np: Any, parts: list[tuple[Any, int]], n: int) -> tuple[Any, int]:
    """Each of ``n`` tuples (part ``k`` gives their ``k``-th entries, ints in ``[0,
    count)``) numbered ``0 .. m - 1`` (equal tuples, equal numbers), and ``m``.

    The key grows one part at a time and is renumbered densely (through a table) before
    it would outgrow the table's bound; a part too wide even then is numbered by sorting."""
    bound = max(_CLASS_SPAN * n, _CLASS_TABLE)
    key, size = np.zeros(n, dtype=np.int64), 1
    for values, count in parts:
        if count == 1:  # every value 0: nothing to add
            continue
        if size == 1 and count <= bound:  # the key is all zeros: the part is the key
            key, size = values.astype(np.int64, copy=False), count
            continue
        if size * count > bound:
            key, size = _renumbered(np, key, size)
        if size * count > bound:  # too many classes for a table: sorted
            key = np.unique(key * count + values, return_inverse=True)[1].reshape(-1)
            size = int(key.max()) + 1 if key.size else 1
            continue
        key, size = key * count + values, size * count
    return _renumbered(np, key, size)


def _firsts(np: Any, ids: Any, count: int) -> Any:
    """Of each number ``0 .. count - 1`` in ``ids``, the first place holding it."""
    out = np.zeros(count, dtype=np.int64)
    out[ids[::-1]] = np.arange(ids.size - 1, -1, -1)
    return out


def _renumbered(np: Any, key: Any, size: int) -> tuple[Any, int]:
    """``key`` (ints in ``[0, size)``) renumbered ``0 .. k - 1`` in the order of their
    values, and ``k``: one scatter into a table of ``size``."""
    seen = np.zeros(size, dtype=bool)
    seen[key] = True
    distinct = np.flatnonzero(seen)
    ids = np.empty(size, dtype=np.int64)  # read only where seen
    ids[distinct] = np.arange(distinct.size)
    return ids[key], distinct.size


_KEPT = 4
"""The tier code of a cell the receiver keeps (counted nowhere)."""


def _codes(np: Any, source: _Sources, places: tuple[Any, Any] | None, key: Any, own: Any
           ) -> Any:
    """Each cell's tier code (receivers × cells, ``key``: the cell's source tile): 0 when a
    rank up on the receiver's host holds it, else 1 in its fast domain, else 2; 3 when no
    rank up holds it (storage); :data:`_KEPT` for the receiver's own tile."""
    code = np.full(key.shape, 2, dtype=np.int64)
    if source.sets is not None and places is not None:
        code[source.sets[1].held(places[1], key)] = 1
        code[source.sets[0].held(places[0], key)] = 0
    code[key == own[:, None]] = _KEPT  # (alive: the receiver is up)
    code[~source.alive[key]] = 3
    return code


def _tallied(np: Any, code: Any, size: Any, bound: int) -> Any:
    """Per row of ``code`` (tier codes 0-3, :data:`_KEPT`), the sizes summed per code: by
    one weighted ``bincount`` while every sum stays below 2**53 (``bound`` bounds them:
    float64 adds such integers exactly), else code by code in int64."""
    rows = code.shape[0]
    if bound < 1 << 53:
        at = code + (np.arange(rows, dtype=np.int64) * (_KEPT + 1))[:, None]
        got = np.bincount(at.ravel(), weights=size.ravel(), minlength=rows * (_KEPT + 1))
        return got.reshape(rows, _KEPT + 1).astype(np.int64)
    out = np.zeros((rows, _KEPT + 1), dtype=np.int64)
    for t in range(_KEPT + 1):
        out[:, t] = np.where(code == t, size, 0).sum(axis=1)
    return out


def _tile_of(s: Sharding, coordinate: tuple[int, ...]) -> int:
    """A rank's tile (its labels on every tensor dim, mixed radix) from its coordinate."""
    out = 0
    for d in range(len(s.shape)):
        out = out * _labels(s, d) + _label_id(s, d, s.label(coordinate, d))
    return out


class Near:
    """Of one source sharding, for one failure: each rank's tile (None for a rank not up),
    the tiles held on a host or in a fast domain by ranks up, and how many holders of each
    tile failed (shared through the :class:`Memo` by the ways priced from this source)."""

    def __init__(self, memo: Memo, src: Sharding) -> None:
        self.memo, self.src, self.dead = memo, src, set(memo.failed)
        shape = src.view.shape  # a tile is a mixed-radix number over the sharding dims
        self.axes = [(i, shape[i]) for d in range(len(src.shape)) for i, _ in src.sharders(d)]
        self.radix = [_labels(src, d) for d in range(len(src.shape))]
        self.kind = kind_of(src)
        self.tiles = memo.tiles.setdefault(self.kind, {})
        self.nearby = memo.nearby.setdefault(self.kind, {})  # per rank, its near sets
        gone = memo.gone.get(self.kind)
        if gone is None:
            gone = memo.gone[self.kind] = {}
            for r in memo.failed:
                t = self.tile_at(src.coordinate(r))
                gone[t] = gone.get(t, 0) + 1
        self.gone = gone

    def tile_at(self, coordinate: tuple[int, ...]) -> int:
        """:func:`_tile_of` ``(src, coordinate)``, with the radix found once."""
        out = 0
        for i, size in self.axes:
            out = out * size + coordinate[i]
        return out

    def tile(self, q: int) -> int | None:
        if q not in self.tiles:
            c = self.memo.coordinate(self.src.view, q)
            self.tiles[q] = None if c is None or q in self.dead else self.tile_at(c)
        return self.tiles[q]

    def near(self, topology: Topology, r: int) -> list[frozenset[int | None]]:
        """The tiles held by ranks up on ``r``'s host, then in its fast domain (kept per
        source :data:`Kind` and rank: the patterns of a kind ask for the same receivers)."""
        got = self.nearby.get(r)
        if got is None:
            got = self.nearby[r] = self._near(topology, r)
        return got

    def _near(self, topology: Topology, r: int) -> list[frozenset[int | None]]:
        out = []
        where = self.memo.where.get(r)
        if where is None:
            where = self.memo.where[r] = (topology.host(r), topology.domain(r))
        for level, place in enumerate(where):
            key = (self.kind, level, place)
            if key not in self.memo.near:
                hosts = [place] if level == 0 else topology.hosts_in(place)
                got = frozenset({self.tile(q) for h in hosts for q in topology.ranks_on(h)})
                self.memo.near[key] = self.memo.sets.setdefault(got, got)  # equal: one
            out.append(self.memo.near[key])
        return out


def few_rows(memo: Memo, src: Sharding, dst: Sharding, receivers: tuple[int, ...],
             demand: Demand | None = None, weight: int = 1) -> dict[int, list[int]]:
    """:func:`bulk_rows` for a few receivers, without listing the world: per receiver its
    host, domain, cross and storage elements, and its block's elements if it gets any.  A
    tile's holders number ``ranks / tiles``; the failed ones are counted from the failed
    ranks; holders near a receiver are looked for among the ranks of its host and fast
    domain only.  Receivers alike (the same own tile, destination labels and tiles held
    near them: a repaired host's ranks) share one row's work.  With ``demand``, what each
    receiver asks of the holders goes there (its elements times ``weight``: bytes)."""
    dims = range(len(src.shape))
    per_tile = src.view.ranks.size // math.prod(_labels(src, d) for d in dims)
    found = Near(memo, src)
    tiles = math.prod(found.radix)
    pieces = memo.pieces(src, dst)
    out: dict[int, list[int]] = {}
    alike: dict[tuple[Any, ...], tuple[list[int], list[tuple[int, int, int]]]] = {}
    asked: list[tuple[list[int], list[int]]] = [([], []) for _ in range(3)]  # per tier
    mine = memo.labels.setdefault(  # destination labels per rank: per view dims, shared
        (dst.view, tuple(tuple(i for i, _ in dst.sharders(d)) for d in dims)), {})
    for r in receivers:
        near = [] if memo.topology is None else found.near(memo.topology, r)
        own = found.tile(r)
        labels = mine.get(r)
        if labels is None:
            c = memo.coordinate(dst.view, r) or ()  # (a receiver is in the view)
            labels = mine[r] = tuple(_label_id(dst, d, dst.label(c, d)) for d in dims)
        key = (own, labels, *map(id, near))  # (near sets are kept by the memo, equal ones
        # as one object: their ids name them)
        got = alike.get(key)
        if got is None:
            got = alike[key] = _few_row(found, [pieces[d][k] for d, k in zip(dims, labels)],
                                        own, near, per_tile)
        out[r] = list(got[0])
        _few_asked(asked, got[1], memo.where.get(r, (0, 0)), tiles, weight)
    for tier, (keys, sizes) in enumerate(asked):
        if demand is not None and keys:
            demand(src, tier, keys, sizes, False)
    return out


def _few_asked(asked: list[tuple[list[int], list[int]]], cells: list[tuple[int, int, int]],
               where: tuple[int, int], tiles: int, weight: int) -> None:
    """One receiver's ``cells`` (tier code, source tile, elements) put in ``asked`` per
    tier: its (host, domain) ``where`` times ``tiles`` plus the tile (the tile alone
    across), and the bytes."""
    for tier, tile, n in cells:
        asked[tier][0].append(tile if tier == 2 else where[tier] * tiles + tile)
        asked[tier][1].append(n * weight)


def _few_row(found: Near, lists: list[list[tuple[int, int]]], own: int | None,
             near: list[frozenset[int | None]], per_tile: int
             ) -> tuple[list[int], list[tuple[int, int, int]]]:
    """One receiver's row of :func:`few_rows`: its cells (one piece of each of ``lists``
    per tensor dim), each kept, from a tier, or read from storage; and the cells it gets
    over a link, as (tier code, source tile, elements)."""
    row = [0, 0, 0, 0, 0]
    asked = []
    for combo in itertools.product(*lists):
        key, n = 0, 1
        for radix, (label, length) in zip(found.radix, combo):
            key, n = key * radix + label, n * length
        row[4] += n
        if key == own or not n:
            continue
        tier = (3 if found.gone.get(key, 0) == per_tile else
                next((k for k, there in enumerate(near) if key in there), 2))
        row[tier] += n
        if tier < 3:
            asked.append((tier, key, n))
    if not any(row[:4]):
        row[4] = 0  # nothing gets there: the block stays as it is
    return row, asked
