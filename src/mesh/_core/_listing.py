"""Listing ranks: a layout's offsets by array arithmetic, then one gather through the rank map.

A listing of ``n`` ranks is refused above its ``limit`` (default
:data:`MAX_LISTED_RANKS`) with :class:`~mesh.TooManyRanksError`, so no query
hangs or exhausts memory on a huge universe.  With NumPy installed, an identity
universe's ranks are its offsets, computed as arrays (one broadcast add per flat
mode); an explicit universe's are read through a strided view of its rank array
(the layout's strides are strides into it), copied once.  Without NumPy, the
same arithmetic runs in Python.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from layout import Layout, flatten

from ._errors import TooManyRanksError
from ._input import as_int, show
from ._numpy import need_numpy, numpy
from ._rankmap import RankMap

__all__ = ["MAX_LISTED_RANKS", "check_limit", "py_offsets", "rank_rows", "rank_table"]

MAX_LISTED_RANKS = 1 << 24
"""The default ``limit`` of every query that lists ranks (16,777,216 ranks, 128 MiB as
int64): pass ``limit=`` to list more."""

_ARRAYS_FROM = 4096  # listings this long use NumPy; shorter ones are faster in Python
_ROW_ARRAYS_FROM = 1 << 20  # one row (a group) is built from ranges: NumPy only past this
_PYTHON_MOST = 1 << 28  # without NumPy, longer listings are refused up front (no slow OOM)


def check_limit(count: int, what: str, limit: object, *,
                default: str = f"mesh.MAX_LISTED_RANKS = {MAX_LISTED_RANKS:,}") -> None:
    """Refuse to list ``count`` ranks when that is more than ``limit`` (the caller's
    argument, whose ``default`` the hint names)."""
    lim = as_int(limit, "limit")
    if count > lim:
        raise TooManyRanksError(
            f"{what} would list {_n(count)} ranks, more than {_n(lim)}",
            f"pass a larger limit= to list them (limit={_n(lim)} here; the default is "
            f"{default})")


def _n(x: int) -> str:
    return f"{x:,}" if abs(x) < 1 << 64 else show(x)


def _modes(L: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return flatten(L.shape), flatten(L.stride)


def rank_rows(ranks: RankMap, starts: Layout, inner: Layout, base: int = 0
              ) -> list[tuple[int, ...]]:
    """The ranks ``ranks(base + starts(j) + inner(x))`` for every ``j`` and every ``x``, as
    Python ints: row ``j`` lists one group (or instance) in coordinate order.  Computed by
    array arithmetic (NumPy when it is there and the listing is large).  The caller has
    checked the limit."""
    rows = _listed(ranks, starts, inner, base, "int64", array=False)
    return list(map(tuple, rows.tolist())) if not isinstance(rows, list) else rows


def rank_table(ranks: RankMap, starts: Layout, inner: Layout, base: int = 0,
               dtype: str = "int64") -> Any:
    """The same ranks as :func:`rank_rows` as a NumPy array of shape ``(size(starts),
    size(inner))`` and ``dtype`` (``"int32"`` only if every rank fits); needs NumPy."""
    return _listed(ranks, starts, inner, base, dtype, array=True)


def _listed(ranks: RankMap, starts: Layout, inner: Layout, base: int, dtype: str, *,
            array: bool) -> Any:
    """The rows of :func:`rank_rows` (tuples, in pure Python while they are few) or of
    :func:`rank_table` (a NumPy array), each listing guarded by its limit."""
    count = starts.size * inner.size
    big = count >= (_ROW_ARRAYS_FROM if starts.size == 1 else _ARRAYS_FROM)
    np = need_numpy("a rank table") if array else numpy() if big else None
    if np is not None:
        return _np_listed(np, ranks, starts, inner, base, dtype)
    if count > _PYTHON_MOST:
        raise TooManyRanksError(f"listing {_n(count)} ranks without NumPy is refused (at "
                                f"most {_PYTHON_MOST:,}); install NumPy or list fewer")
    (s_shapes, s_strides), (i_shapes, i_strides) = _modes(starts), _modes(inner)
    rs = ranks.ranks
    return [tuple(offs) if rs is None else tuple([rs[o] for o in offs])
            for offs in (py_offsets(i_shapes, i_strides, r)
                         for r in py_offsets(s_shapes, s_strides, base))]


def _np_listed(np: Any, ranks: RankMap, starts: Layout, inner: Layout, base: int,
               dtype: str) -> Any:
    """:func:`rank_table`'s array: refused before allocating past a quarter of the memory."""
    (s_shapes, s_strides), (i_shapes, i_strides) = _modes(starts), _modes(inner)
    count = starts.size * inner.size
    kind = np.dtype(dtype) if ranks.max_rank <= np.iinfo(dtype).max else np.dtype(np.int64)
    need = count * kind.itemsize * (1 if starts.size == 1 else 2)
    if need > _most_bytes():  # NumPy would allocate it lazily, and the kernel kill the process
        raise TooManyRanksError(f"listing {_n(count)} ranks needs {need / 2**30:.1f} GiB, more "
                                "than a quarter of this machine's memory; list fewer (limit=)")
    try:
        if not ranks.is_identity:  # the layout's strides are strides into the rank array
            table = ranks.array(kind.name)
            picked = np.lib.stride_tricks.as_strided(
                table[base:], shape=s_shapes + i_shapes,
                strides=[d * table.itemsize for d in s_strides + i_strides], writeable=False)
            return picked.copy().reshape(starts.size, inner.size)  # never a view of the table
        if starts.size == 1:  # one row (an instance, a group): its start folded into the modes
            return _np_offsets(np, i_shapes, i_strides, base + starts(0), kind)[None, :]
        rows = _np_offsets(np, s_shapes, s_strides, base, kind)
        return rows[:, None] + _np_offsets(np, i_shapes, i_strides, 0, kind)[None, :]
    except (MemoryError, ValueError) as e:  # NumPy: "array is too big", or out of memory
        raise TooManyRanksError(f"cannot allocate {_n(count)} ranks: {e}") from None


@functools.cache
def _most_bytes() -> int:
    """A quarter of this machine's physical memory (8 GiB where it cannot be read): the
    most bytes one listing may take."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 1 << 33


def py_offsets(shapes: tuple[int, ...], strides: tuple[int, ...], base: int) -> list[int]:
    """``base + L(i)`` for every index of the flat layout, row-major, as Python ints."""
    if not shapes:
        return [base]
    offs = [base]
    for s, d in zip(shapes[:-1], strides[:-1]):
        offs = [o + c * d for o in offs for c in range(s)]
    s, d = shapes[-1], strides[-1]
    if d == 0:
        return [o for o in offs for _ in range(s)]
    out: list[int] = []
    for o in offs:  # the last mode is a range: built in C
        out.extend(range(o, o + s * d, d))
    return out


def _np_offsets(np: Any, shapes: tuple[int, ...], strides: tuple[int, ...], base: int,
                kind: Any) -> Any:
    """``base + L(i)`` for every index of the flat layout, row-major, as one array."""
    offs = np.full((1,) * len(shapes), base, dtype=kind)
    for k, (s, d) in enumerate(zip(shapes, strides)):
        axis = [1] * len(shapes)
        axis[k] = s
        offs = offs + (np.arange(s, dtype=kind) * d).reshape(axis)
    return offs.reshape(-1)
