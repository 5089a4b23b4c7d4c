"""Rank maps: the injective map from mesh offsets ``[0, N)`` to global ranks."""

from __future__ import annotations

import functools
from typing import Any

import attrs

from ._errors import (
    InvalidMeshDataError,
    InvalidRanksError,
    InvalidSizeError,
    OffsetOutOfRangeError,
)
from ._input import MAX_UNIVERSE, as_int, as_size, ordered, show
from ._numpy import need_numpy, numpy

__all__ = ["RankMap"]


def _as_ranks(ranks: object) -> tuple[int, ...]:
    """Distinct plain ints in ``[0, MAX_UNIVERSE)``, in the given order.

    Checked in bulk (a plain-int list is not converted one by one; duplicates are found by
    sorting, with NumPy from 2**20 ranks), so a refusal costs about what a copy does.
    """
    if isinstance(ranks, (list, tuple)) and type(ranks) in (list, tuple) and \
            set(map(type, ranks)) <= {int}:  # a plain list or tuple of plain ints (in C)
        rs: tuple[int, ...] = tuple(ranks)
    else:
        rs = tuple([as_int(r, "every rank", error=InvalidRanksError)
                    for r in ordered(ranks, "ranks")])
    low, high = (min(rs), max(rs)) if rs else (0, 0)
    if not (0 <= low and high < MAX_UNIVERSE):
        raise InvalidRanksError(f"ranks must be ints in [0, 2**63), got "
                                f"{show(low if low < 0 else high)}")
    twice = _repeated(rs)
    if twice is not None:
        first = rs.index(twice)
        raise InvalidRanksError(f"rank {twice} appears twice (at offsets {first} and "
                                f"{rs.index(twice, first + 1)}); ranks must be distinct")
    return rs


def _repeated(rs: tuple[int, ...]) -> int | None:
    """A rank that appears more than once in ``rs``, if any."""
    np = numpy() if len(rs) >= 1 << 20 else None
    if np is not None:
        a = np.sort(np.asarray(rs, dtype=np.int64))
        hits = np.flatnonzero(a[1:] == a[:-1])
        return int(a[hits[0]]) if hits.size else None
    if len(set(rs)) == len(rs):
        return None
    seen: set[int] = set()
    for r in rs:
        if r in seen:
            return r
        seen.add(r)
    return None


_DTYPES = ("int32", "int64")

_SCANS = 64
"""An explicit map whose ranks are an array answers its first this many look-ups by
scanning the array (C speed; a survivor world is often asked a few ranks), then builds
its inverse dict."""


_HASHED = 64
"""A rank map's hash reads its size and about this many of its ranks, evenly spaced (the
same from the tuple and from the array: a gathered map is hashed without its tuple)."""


@attrs.frozen(init=False, eq=False, hash=False, repr=False)
class RankMap:
    """An injective map from offsets ``[0, size)`` to global ranks.

    ``RankMap.identity(n)`` stores only ``n``; ``RankMap.explicit(ranks)``
    stores the ranks and answers inverse look-ups in O(1).  An explicit map
    equal to ``range(n)`` is the identity map.  Offsets outside ``[0, size)``
    raise :class:`~mesh.OffsetOutOfRangeError`.

    >>> RankMap.identity(4)(3), RankMap.explicit([4, 0, 2])(1)
    (3, 0)
    >>> RankMap.explicit([4, 0, 2]).offset_of(2), RankMap.identity(4).offset_of(9)
    (2, None)

    Listings read the public :attr:`ranks` and :meth:`array`, an explicit map's ranks as
    a NumPy array (built once per dtype).  A map gathered from an array (a survivor world)
    keeps the array and makes its :attr:`ranks` tuple on first read: hashing, comparing,
    listing, look-ups and calls read the array.
    """

    size: int
    ranks: tuple[int, ...] | None

    def __init__(self, size: object, ranks: object = None) -> None:
        """``RankMap(n)`` is the identity on ``[0, n)``; ``RankMap(n, ranks)`` maps offset
        ``i`` to ``ranks[i]`` (an ordered sequence of ``n`` distinct ranks >= 0)."""
        n = as_size(size, "the number of ranks")
        if n > MAX_UNIVERSE:
            raise InvalidSizeError(f"a universe has at most 2**63 ranks, got {show(n)}")
        rs = None if ranks is None else _as_ranks(ranks)
        if rs is not None and len(rs) != n:
            raise InvalidRanksError(f"a rank map of size {n} needs {n} ranks, got {len(rs)}")
        self.__attrs_init__(n, None if rs is None or rs == tuple(range(n)) else rs)

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:  # computed once: views and rank maps key caches
        found = self._arrays.get("int64")
        step = max(1, self.size // _HASHED)
        if found is not None:
            return hash((self.size, tuple(found[::step].tolist())))
        return hash((self.size, None if self.ranks is None else self.ranks[::step]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RankMap):
            return NotImplemented
        if self is other:
            return True
        if self.size != other.size or self._hash != other._hash:
            return False
        mine, theirs = self._arrays.get("int64"), other._arrays.get("int64")
        if mine is not None and theirs is not None:
            return bool((mine == theirs).all())
        return self.ranks == other.ranks

    def __getattr__(self, name: str) -> Any:
        if name != "ranks":
            raise AttributeError(name)
        got = tuple(self._arrays["int64"].tolist())  # a gathered map's tuple, on first read
        object.__setattr__(self, "ranks", got)
        return got

    def __reduce__(self) -> tuple[Any, ...]:
        return RankMap, (self.size, self.ranks)  # unpickling validates again

    @classmethod
    def identity(cls, n: int) -> RankMap:
        """The map ``offset -> offset`` on ``[0, n)``."""
        return cls(n)

    @classmethod
    def explicit(cls, ranks: object) -> RankMap:
        """The map ``offset -> ranks[offset]``; ranks are an ordered sequence of distinct
        non-negative ints."""
        rs = _as_ranks(ranks)
        if not rs:
            raise InvalidRanksError("a rank map needs at least one rank, got none")
        return cls._trusted(rs)

    @classmethod
    def _trusted(cls, rs: tuple[int, ...]) -> RankMap:
        """The explicit map of ``rs``, known to be distinct ranks in ``[0, 2**63)`` (at
        least one): what the survival ways build from a checked view, not checked again."""
        out = cls.__new__(cls)
        n = len(rs)
        same = rs[0] == 0 and rs[-1] == n - 1 and rs == tuple(range(n))
        out.__attrs_init__(n, None if same else rs)
        return out

    @classmethod
    def _gathered(cls, array: Any) -> RankMap:
        """:meth:`_trusted` of the ranks of a NumPy array (as trusted: distinct, at least
        one), which the map keeps as :meth:`array`'s int64 array (a survivor world is
        gathered so, and asked through the array again)."""
        got = array.astype("int64")  # a copy of its own, made read-only below
        n = int(got.size)
        if int(got[0]) == 0 and bool((got[1:] - got[:-1] == 1).all()):  # 0, 1, .., n - 1
            return cls(n)
        out = cls.__new__(cls)
        object.__setattr__(out, "size", n)  # ranks: made from the array when read
        got.flags.writeable = False
        out._arrays["int64"] = got
        return out

    @property
    def is_identity(self) -> bool:
        """Whether this is ``RankMap.identity(size)``."""
        return "int64" not in self._arrays and self.ranks is None

    @functools.cached_property
    def max_rank(self) -> int:
        """The largest global rank in the map."""
        found = self._arrays.get("int64")
        if found is not None:
            return int(found.max())
        return self.size - 1 if self.ranks is None else max(self.ranks)

    @functools.cached_property
    def _inverse(self) -> dict[int, int]:
        return dict(zip(self.ranks or (), range(self.size)))

    @functools.cached_property
    def _arrays(self) -> dict[str, Any]:
        """The explicit ranks as NumPy arrays by dtype name, built once each (for gathers)."""
        return {}

    def array(self, dtype: str = "int64") -> Any:
        """An explicit map's ranks as a read-only NumPy array of ``dtype`` (``"int32"`` or
        ``"int64"``), built once per dtype: what listings gather from (needs NumPy).

        >>> RankMap.explicit([4, 0, 2]).array("int32").tolist()
        [4, 0, 2]
        """
        if type(dtype) is not str or dtype not in _DTYPES or self.is_identity:
            raise InvalidRanksError(
                f"array() lists an explicit map's ranks as one of {_DTYPES}, got dtype "
                f"{show(dtype)} for {self!r}" if not self.is_identity else
                f"array() lists an explicit map's ranks; {self!r} is the identity")
        found = self._arrays.get(dtype)
        if found is None:
            wide = self._arrays.get("int64")
            found = (need_numpy("RankMap.array").asarray(self.ranks, dtype=dtype)
                     if wide is None else wide.astype(dtype))
            found.flags.writeable = False
            self._arrays[dtype] = found
        return found

    def _check(self, offset: int) -> int:
        if not 0 <= offset < self.size:
            raise OffsetOutOfRangeError(
                f"offset {show(offset)} is outside {self!r} (valid: 0 <= offset < {self.size})")
        return offset

    def __call__(self, offset: int) -> int:
        """The global rank at ``offset``."""
        o = self._check(as_int(offset, "an offset"))
        found = self._arrays.get("int64")
        return int(found[o]) if found is not None else o if self.ranks is None else self.ranks[o]

    def take(self, offsets: object) -> tuple[int, ...]:
        """The global ranks at each of ``offsets`` (an ordered sequence)."""
        offs = tuple([self._check(as_int(o, "an offset")) for o in ordered(offsets, "offsets")])
        found = self._arrays.get("int64")
        if found is not None:  # (a gathered map: its tuple not made for a few ranks)
            return tuple(found[list(offs)].tolist())
        return offs if self.ranks is None else tuple([self.ranks[o] for o in offs])

    def offset_of(self, rank: int) -> int | None:
        """The offset holding ``rank``, or ``None`` if ``rank`` is not in this map."""
        r = as_int(rank, "a rank")
        if self.is_identity:
            return r if 0 <= r < self.size else None
        scans = self._scans
        if scans[0] < _SCANS:
            found = self._arrays.get("int64")  # a few look-ups: a scan, not a dict
            if found is not None:
                scans[0] += 1
                at = (found == r).nonzero()[0]
                return int(at[0]) if at.size else None
        return self._inverse.get(r)

    @functools.cached_property
    def _scans(self) -> list[int]:
        """How many look-ups :meth:`offset_of` answered by scanning :meth:`array` (at
        most :data:`_SCANS`; after that, the inverse dict)."""
        return [0]

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able data: ``{"size": n}`` or ``{"ranks": [...]}``."""
        return {"size": self.size} if self.ranks is None else {"ranks": list(self.ranks)}

    @classmethod
    def from_dict(cls, d: object) -> RankMap:
        """Inverse of :meth:`to_dict`: exactly one of the keys ``size`` (an int) and
        ``ranks`` (a list of ints); anything else is :class:`~mesh.InvalidMeshDataError`."""
        if type(d) is not dict or len(d) != 1 or not ({"size", "ranks"} & set(d)):
            raise InvalidMeshDataError(
                "a rank map is {'size': n} or {'ranks': [r0, r1, ...]} (exactly one key), got "
                + show(d))
        if "size" in d:
            n = d["size"]
            if type(n) is not int:
                raise InvalidMeshDataError(f"'size' must be an int, got {show(n)}")
            return cls(n)
        ranks = d["ranks"]
        if type(ranks) is not list or not all([type(r) is int for r in ranks]):
            raise InvalidMeshDataError(f"'ranks' must be a list of ints, got {show(ranks)}")
        return cls.explicit(ranks)

    def __repr__(self) -> str:
        if self.is_identity:
            return f"RankMap.identity({self.size})"
        found = self._arrays.get("int64")
        first = (self.ranks or ())[:8] if found is None else found[:8].tolist()
        shown = ", ".join(map(str, first)) + (", ..." if self.size > 8 else "")
        return f"RankMap.explicit([{shown}])"
