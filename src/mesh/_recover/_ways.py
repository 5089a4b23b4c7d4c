"""Ways to continue without the failed ranks: drop their slices along a dim, or substitute
spares.  Each returns a new, valid view over an explicit universe of the survivors (the new
universe is listed once, so its size is bounded by ``limit``), or a
:class:`~mesh.SurvivalError` saying why that way is impossible."""

from __future__ import annotations

import math
from collections.abc import Sequence

from layout import Layout

from .._core import (
    MAX_LISTED_RANKS,
    Dim,
    MeshView,
    RankMap,
    SurvivalError,
    check_limit,
    numpy,
    rank_table,
)
from ._door import as_limit, failed_ranks, offset, row, spare_ranks, the_view

__all__ = ["drop", "dropped", "refactored", "substitute", "substituted"]

_GATHER_FROM = 1 << 12
"""Views of at least this many ranks lose their dropped slices by one NumPy gather."""


def drop(view: MeshView, failed: Sequence[int], dim: Dim, *,
         limit: int = MAX_LISTED_RANKS) -> MeshView:
    """``view`` without every slice along ``dim`` that holds a failed rank; the other dims
    keep their size and their groups.

    The view must have one instance (a whole world); the result is row-major over the
    survivors, in the view's order.  Refused with :class:`~mesh.SurvivalError` when every
    slice holds a failed rank (the message names the dims where a drop would work).

    Cost: O(ndim) per failed rank to find its slice, then the surviving universe is listed
    once (an explicit rank map of the survivors: O(their number), refused above ``limit``
    before anything is listed).

    >>> from mesh import MeshView, drop
    >>> world = MeshView.from_shape((4, 8), ("dp", "tp"))
    >>> survivors = drop(world, [13], "dp")
    >>> survivors.shape, survivors.group(16, "tp"), survivors.group(1, "dp")
    ((3, 8), (16, 17, 18, 19, 20, 21, 22, 23), (1, 17, 25))
    """
    v = the_view(view, "drop's view")
    k = v.index(dim)
    return dropped(v, failed_ranks(failed, (v.ranks,)), k, as_limit(limit))


def dropped(v: MeshView, failed: tuple[int, ...], k: int, limit: int) -> MeshView:
    """:func:`drop` of input already checked (no checks): ``failed`` ascending and
    distinct, each in ``v``'s universe, ``k`` a dim index of ``v``, ``limit >= 0``.  A view
    of several instances, or a dim whose every slice holds a failed rank, is refused with
    :class:`~mesh.SurvivalError` (the way is impossible)."""
    _one_instance(v, "drop")
    gone = sorted({_coordinate(v, r)[k] for r in failed})
    if len(gone) == v.shape[k]:
        raise SurvivalError(_nothing_left(v, k, failed))
    slice_size = v.size() // v.shape[k]
    check_limit((v.shape[k] - len(gone)) * slice_size, "drop's surviving universe", limit)
    return _without(v, k, gone)


def refactored(v: MeshView, failed: tuple[int, ...], k: int, size: int,
               limit: int) -> MeshView:
    """``v`` re-factored onto its survivors with dim ``k`` shrunk to ``size`` (input
    already checked, no checks): the survivors in the view's row-major order, the failed
    ranks left out, fill the new shape row-major; the survivors past it stay idle.  Unlike
    :func:`dropped`, which cuts whole slices out, this packs the survivors, so two failures
    in different slices cost one slice, not two (and most groups change).  Refused with
    :class:`~mesh.SurvivalError` when ``size`` is not in ``[1, shape[k])`` or the survivors
    are too few."""
    _one_instance(v, "re-factor")
    shape = tuple(size if i == k else s for i, s in enumerate(v.shape))
    need = math.prod(shape)
    if not 1 <= size < v.shape[k] or need > v.size() - len(failed):
        raise SurvivalError(f"cannot re-factor {v.names[k]!r} from {v.shape[k]} to {size}: "
                            f"the shape {shape} needs {need} ranks and "
                            f"{v.size() - len(failed)} survive")
    check_limit(need, "re-factor's surviving universe", limit)
    np = numpy() if v.size() >= _GATHER_FROM else None
    if np is not None:  # one NumPy mask over the instance
        flat = rank_table(v.ranks, Layout(1, 0), v.layout)[0]
        got = flat[~np.isin(flat, np.asarray(failed, dtype=np.int64))][:need]
        return MeshView(Layout(shape), v.names, RankMap._gathered(got))
    dead = set(failed)
    kept = [r for r in row(v.ranks, v.layout, 0) if r not in dead][:need]
    return MeshView(Layout(shape), v.names, RankMap._trusted(tuple(kept)))  # a subset


def _coordinate(v: MeshView, rank: int) -> tuple[int, ...]:
    """The coordinate of a rank known to be in the universe."""
    return v.coordinate(rank) or ()


def _without(v: MeshView, k: int, gone: list[int]) -> MeshView:
    """The view's instance, row-major, with the slices ``gone`` along ``k`` cut out (by
    one NumPy gather when it is there and the view is large)."""
    size, inner = v.shape[k], math.prod(v.shape[k + 1:])
    cut = set(gone)
    keep = [c for c in range(size) if c not in cut]
    np = numpy() if v.size() >= _GATHER_FROM else None
    shape = tuple(len(keep) if i == k else s for i, s in enumerate(v.shape))
    if np is not None:  # one instance: it starts at offset 0
        got = rank_table(v.ranks, Layout(1, 0), v.layout)[0].reshape(-1, size, inner)[
            :, keep, :].ravel()
        return MeshView(Layout(shape), v.names, RankMap._gathered(got))
    out: list[int] = []
    flat = row(v.ranks, v.layout, 0)
    for o in range(math.prod(v.shape[:k])):
        for c in keep:
            start = (o * size + c) * inner
            out.extend(flat[start:start + inner])
    return MeshView(Layout(shape), v.names, RankMap._trusted(tuple(out)))  # a subset


def _nothing_left(v: MeshView, k: int, dead: tuple[int, ...]) -> str:
    hit = [{_coordinate(v, r)[j] for r in dead} for j in range(v.ndim)]
    fine = [n for j, n in enumerate(v.names) if len(hit[j]) < v.shape[j]]
    return (f"cannot drop along {v.names[k]!r}: each of its {v.shape[k]} slices holds a failed "
            f"rank (failed: {list(dead[:16])}); dims where a drop leaves survivors: {fine!r}")


def _one_instance(v: MeshView, what: str) -> None:
    if v.num_instances != 1:
        raise SurvivalError(
            f"{what} needs a view with one instance (a whole world), but {v!r} stands for "
            f"{v.num_instances} instances of its universe {v.ranks!r}: {what} along a dim of "
            "the world view, and derive this view from it again (mesh.survive does both)")


def substitute(view: MeshView, failed: Sequence[int], spares: Sequence[int], *,
               limit: int = MAX_LISTED_RANKS) -> MeshView:
    """``view`` with each failed rank replaced by a spare: the lowest failed rank by the
    first spare, and so on; same layout and names, so every group without a failed rank is
    unchanged.  Unused spares stay spare.

    Cost: the new universe is listed once (O(its size), refused above ``limit`` before
    anything is listed), plus O(1) per failed rank and spare.

    >>> from mesh import MeshView, substitute
    >>> world = MeshView.from_shape((2, 4), ("dp", "tp"))
    >>> substitute(world, [5, 2], [8, 9]).instance(8)
    ((0, 1, 8, 3), (4, 9, 6, 7))
    """
    v = the_view(view, "substitute's view")
    dead = failed_ranks(failed, (v.ranks,))
    use = spare_ranks(spares, len(dead), v.ranks)
    return substituted(v, dead, use, as_limit(limit))


def substituted(v: MeshView, failed: tuple[int, ...], spares: tuple[int, ...],
                limit: int) -> MeshView:
    """:func:`substitute` of input already checked (no checks): ``failed`` ascending and
    distinct, each in ``v``'s universe; ``spares`` one per failed rank, distinct, outside
    it; ``limit >= 0``."""
    check_limit(v.ranks.size, "substitute's new universe", limit)
    np = numpy() if v.size() >= _GATHER_FROM else None
    if np is not None:  # the universe as an array, kept by the new rank map
        got = (np.arange(v.ranks.size, dtype=np.int64) if v.ranks.is_identity
               else v.ranks.array().copy())
        got[[offset(v.ranks, r) for r in failed]] = spares
        return MeshView(v.layout, v.names, RankMap._gathered(got))
    table = row(v.ranks, Layout(v.ranks.size), 0)  # by array arithmetic: a refusal is quick
    for r, s in zip(failed, spares):
        table[offset(v.ranks, r)] = s
    return MeshView(v.layout, v.names, RankMap._trusted(tuple(table)))  # spares checked
