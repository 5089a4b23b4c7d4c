"""Rank maps: the injective map from mesh offsets ``[0, N)`` to global ranks."""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence

import attrs

from ._errors import InvalidRanksError, InvalidSizeError, MeshError, MeshTypeError

__all__ = ["RankMap", "as_int", "as_size"]


def as_int(value: object, what: str, error: type[MeshError] = MeshTypeError) -> int:
    """``value`` as an int (anything with ``__index__`` but a bool), else ``error`` naming it."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise error(f"{what} must be an int, got the bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise error(f"{what} must be an int, got {value!r} of type {type(value).__name__}"
                    ) from None


def as_size(value: object, what: str) -> int:
    """``value`` as a positive int, or a typed error naming it."""
    n = as_int(value, what)
    if n < 1:
        raise InvalidSizeError(f"{what} must be a positive int, got {n}")
    return n


def _as_rank(value: object) -> int:
    r = as_int(value, "every rank", InvalidRanksError)
    if r < 0:
        raise InvalidRanksError(f"ranks must be non-negative ints, got {r}")
    return r


@attrs.frozen(cache_hash=True, repr=False)
class RankMap:
    """An injective map from offsets ``[0, size)`` to global ranks.

    ``RankMap.identity(n)`` stores only ``n``; ``RankMap.explicit(ranks)``
    stores the ranks and answers inverse look-ups in O(1).  An explicit map
    equal to ``range(n)`` is the identity map.

    >>> RankMap.identity(4)(3), RankMap.explicit([4, 0, 2])(1)
    (3, 0)
    >>> RankMap.explicit([4, 0, 2]).offset_of(2), RankMap.identity(4).offset_of(9)
    (2, None)
    """

    size: int
    ranks: tuple[int, ...] | None = None

    @classmethod
    def identity(cls, n: int) -> RankMap:
        """The map ``offset -> offset`` on ``[0, n)``."""
        return cls(as_size(n, "the number of ranks"))

    @classmethod
    def explicit(cls, ranks: Iterable[object]) -> RankMap:
        """The map ``offset -> ranks[offset]``; ranks are distinct non-negative ints."""
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
            raise MeshTypeError(f"ranks must be a sequence of ints, got {ranks!r}")
        rs = tuple(ranks)
        return cls(len(rs), rs)  # type: ignore[arg-type]

    def __attrs_post_init__(self) -> None:
        as_size(self.size, "the number of ranks")
        if self.ranks is None:
            return
        rs = tuple(_as_rank(r) for r in self.ranks)
        if len(rs) != self.size:
            raise InvalidRanksError(f"a rank map of size {self.size} needs {self.size} ranks, "
                                    f"got {len(rs)}")
        seen: dict[int, int] = {}
        for i, r in enumerate(rs):
            if r in seen:
                raise InvalidRanksError(
                    f"rank {r} appears twice (at offsets {seen[r]} and {i}); ranks must be distinct"
                )
            seen[r] = i
        object.__setattr__(self, "ranks", None if rs == tuple(range(len(rs))) else rs)

    @property
    def is_identity(self) -> bool:
        """Whether this is ``RankMap.identity(size)``."""
        return self.ranks is None

    @functools.cached_property
    def _inverse(self) -> dict[int, int]:
        return {r: i for i, r in enumerate(self.ranks or ())}

    def __call__(self, offset: int) -> int:
        """The global rank at ``offset``."""
        return offset if self.ranks is None else self.ranks[offset]

    def take(self, offsets: Sequence[int]) -> tuple[int, ...]:
        """The global ranks at each of ``offsets``."""
        if self.ranks is None:
            return tuple(offsets)
        rs = self.ranks
        return tuple(rs[o] for o in offsets)

    def offset_of(self, rank: int) -> int | None:
        """The offset holding ``rank``, or ``None`` if ``rank`` is not in this map."""
        if self.ranks is None:
            return rank if 0 <= rank < self.size else None
        return self._inverse.get(rank)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able data: ``{"size": n}`` or ``{"ranks": [...]}``."""
        return {"size": self.size} if self.ranks is None else {"ranks": list(self.ranks)}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RankMap:
        """Inverse of :meth:`to_dict`."""
        if "ranks" in d:
            return cls.explicit(d["ranks"])  # type: ignore[arg-type]
        if "size" in d:
            return cls.identity(d["size"])  # type: ignore[arg-type]
        raise InvalidRanksError(f"a rank map dict needs 'size' or 'ranks', got keys {sorted(d)}")

    def __repr__(self) -> str:
        if self.ranks is None:
            return f"RankMap.identity({self.size})"
        shown = ", ".join(map(str, self.ranks[:8])) + (", ..." if self.size > 8 else "")
        return f"RankMap.explicit([{shown}])"
