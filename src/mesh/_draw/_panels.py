"""The panel model of both pictures: which coordinates go in which panel, row and column.

A picture shows one instance of a view (the one holding a rank, else instance 0) as
*panels*, one per coordinate of the outer dims (all but the last two), in row-major
order.  A panel is a grid: dim -2 goes down (its *rows*; a 1-D view has one row and no
row dim) and dim -1 across (its *columns*).  A :class:`Sheet` says which panels, rows
and columns are shown, each a :data:`Picked` list (in order, with None where an ellipsis
stands for the ones left out); an :class:`Instance` gives each cell its rank and its
mark.  Panels go in rows of panels, ``across`` to a row (:func:`rows_of`), and a long
title breaks into lines of words (:func:`wrap`).

The writers only measure and emit: ``_text`` in characters (it picks what fits a width),
``_svg`` in pixels (it shows every cell).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from layout import Layout

from .._core import MeshView

__all__ = ["MEMBER", "OTHER", "RANK", "Instance", "Picked", "Sheet", "across_by_aspect",
           "n_shown", "neighbours", "pick", "ravel", "rows_of", "wrap"]

RANK, MEMBER, OTHER = 0, 1, 2
"""A cell's mark: the rank drawn for, a member of one of its groups (same instance,
coordinates equal but in one dim), or neither (every cell, when no rank is drawn for)."""

Picked = list[int | None]
"""Indices to show, in order, with None where an ellipsis stands for the ones left out."""

Item = TypeVar("Item")


class Instance:
    """One instance of a view, evaluated one coordinate at a time.

    The rank at coordinate ``c`` is ``ranks(base + V(c))`` with ``V`` the view's
    layout and ``base`` the first offset of the instance (``view.instance_offset``).
    ``V(c)`` is the sum of each dim's layout at its index, and each of those is
    computed once.
    """

    def __init__(self, view: MeshView, rank: int | None) -> None:
        self.view = view
        self.rank = rank
        self.here: tuple[int, ...] | None = None  # the coordinate of rank
        self.base = 0  # instance 0 starts at offset 0
        if rank is not None:  # a rank outside the universe: RankNotInMeshError, here
            self.base, self.here = view.instance_offset(rank), view.coordinate(rank)
        self._modes: tuple[Layout, ...] = tuple(view.layout)
        self._steps: list[dict[int, int]] = [{} for _ in self._modes]

    def rank_at(self, crd: tuple[int, ...]) -> int:
        off = self.base
        for k, i in enumerate(crd):
            step = self._steps[k].get(i)
            if step is None:
                step = self._steps[k][i] = self._modes[k](i)
            off += step
        table = self.view.ranks.ranks  # off is in [0, N): no check needed
        return off if table is None else table[off]

    def member(self, k: int, i: int) -> int:
        """The ``i``-th member of the rank's group along dim ``k``."""
        assert self.here is not None, "member() is asked only on a panel with a rank drawn"
        return self.rank_at((*self.here[:k], i, *self.here[k + 1:]))

    def mark(self, crd: tuple[int, ...]) -> int:
        """:data:`RANK`, :data:`MEMBER` or :data:`OTHER`: how the cell at ``crd`` is marked."""
        if self.here is None:
            return OTHER
        return min(OTHER, sum([a != b for a, b in zip(crd, self.here)]))

    def heading(self) -> str:
        """``MeshView(...), the instance of rank 5``: what the picture shows."""
        which = "instance 0" if self.rank is None else f"the instance of rank {self.rank}"
        return f"{self.view!r}, {which}"


@dataclasses.dataclass(frozen=True)
class Sheet:
    """The panels, rows and columns a picture of ``inst`` shows (indices, see :data:`Picked`).

    >>> view = MeshView.from_shape((3, 2, 4), ("dp", "cp", "tp"))
    >>> sheet = Sheet(Instance(view, 13), [0, None, 2], [0, 1], [0, None, 3])
    >>> sheet.runs(), sheet.crd((2,), 1, 3), sheet.title((2,)), sheet.space()
    ([(0, (0,)), 1, (2, (2,))], (2, 1, 3), ['dp=2'], 'dp=0..2')
    """

    inst: Instance
    panels: Picked
    rows: Picked
    cols: Picked = dataclasses.field(default_factory=list)

    @classmethod
    def whole(cls, inst: Instance) -> Sheet:
        """Every panel, row and column of the instance."""
        shape = inst.view.shape
        rows = shape[-2] if len(shape) >= 2 else 1
        return cls(inst, list(range(math.prod(shape[:-2]))), list(range(rows)),
                   list(range(shape[-1])))

    @property
    def view(self) -> MeshView:
        return self.inst.view

    @property
    def outer(self) -> tuple[int, ...]:
        """The sizes of the outer dims: one panel per coordinate."""
        return self.view.shape[:-2]

    @property
    def n_panels(self) -> int:
        return math.prod(self.outer)

    def crd(self, oc: tuple[int, ...], r: int, c: int) -> tuple[int, ...]:
        """The coordinate of the cell in row ``r``, column ``c`` of the panel at ``oc``."""
        return (*oc, r, c) if self.view.ndim >= 2 else (c,)

    def label(self, k: int, i: int) -> str:
        """``tp=3``: index ``i`` of dim ``k``."""
        return f"{self.view.names[k]}={i}"

    def title(self, oc: tuple[int, ...]) -> list[str]:
        """The words naming the panel at ``oc``: ``["pp=0", "dp=1"]`` (none for 1-D and 2-D)."""
        return [self.label(k, c) for k, c in enumerate(oc)]

    def space(self) -> str:
        """``pp=0..1 × dp=0..3``: the coordinates of all the panels."""
        return " × ".join(f"{n}=0..{s - 1}" for n, s in zip(self.view.names, self.outer))

    @functools.cached_property
    def shown(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(panel index, outer coordinate)`` of every panel shown, in order."""
        return [(p, _unravel(p, self.outer)) for p in self.panels if p is not None]

    def runs(self) -> list[tuple[int, tuple[int, ...]] | int]:
        """The panels shown, in order, and for each gap the number of panels it stands for."""
        items: list[tuple[int, tuple[int, ...]] | int] = []
        prev = -1
        for p, oc in self.shown:
            if p > prev + 1:
                items.append(p - prev - 1)
            items.append((p, oc))
            prev = p
        if prev < self.n_panels - 1:
            items.append(self.n_panels - 1 - prev)
        return items

    def cells(self) -> Iterator[tuple[int, ...]]:
        """The coordinate of every cell shown, panel by panel, row by row (row-major)."""
        for _, oc in self.shown:
            for r in self.rows:
                for c in self.cols:
                    if r is not None and c is not None:
                        yield self.crd(oc, r, c)


def rows_of(items: Sequence[Item | int], across: int) -> list[list[Item] | int]:
    """Panels in rows of at most ``across``, in order; a gap (an int: the number of panels it
    stands for) ends a row and stands alone.

    >>> rows_of(["a", "b", "c", 5, "d"], 2)
    [['a', 'b'], ['c'], 5, ['d']]
    """
    out: list[list[Item] | int] = []
    for is_gap, same in itertools.groupby(items, key=lambda item: isinstance(item, int)):
        run = list(same)
        if is_gap:
            out += [n for n in run if isinstance(n, int)]
        else:
            panels = [x for x in run if not isinstance(x, int)]
            out += [panels[i:i + across] for i in range(0, len(panels), across)]
    return out


def across_by_aspect(outer: tuple[int, ...], pw: int, ph: int, gap: int, aspect: float) -> int:
    """How many panels of ``pw x ph`` (``gap`` apart) go in a row: ``d * prod(outer[i+1:])``
    for a divisor ``d`` of ``outer[i]``, whichever makes the grid closest to ``aspect``.

    >>> across_by_aspect((2, 2), 290, 180, 28, 1.5), across_by_aspect((), 290, 180, 28, 1.5)
    (2, 1)
    """
    total = math.prod(outer)
    options = {d * math.prod(outer[i + 1:]) for i, s in enumerate(outer)
               for d in range(1, s + 1) if s % d == 0} or {1}

    def misfit(c: int) -> tuple[float, int]:
        w, h = c * (pw + gap), total // c * (ph + gap)
        return abs(math.log(w / h / aspect)), -c

    return min(sorted(options), key=misfit)


def neighbours(n: int, rows: int, cols: int) -> Iterator[tuple[int, int]]:
    """Pairs ``(a, b)`` of the ``n`` cells of a whole sheet next to each other in a panel:
    ``b == a + 1`` (across) or ``b == a + cols`` (down); panels are runs of ``rows * cols``."""
    for a in range(n):
        j = a % (rows * cols)
        if j % cols < cols - 1:
            yield a, a + 1
        if j // cols < rows - 1:
            yield a, a + cols


def wrap(widths: list[int], width: int) -> list[list[int]]:
    """Words of ``widths`` as lines of at most ``width`` (one space between words): the
    indices of each line's words."""
    lines: list[list[int]] = []
    used = width
    for k, w in enumerate(widths):
        if used + 1 + w > width:
            lines.append([])
            used = -1
        lines[-1].append(k)
        used += 1 + w
    return lines


def pick(n: int, keep: int | None, fits: Callable[[Picked], bool]) -> Picked:
    """The most of ``range(n)`` that ``fits``, given room in the order: ``keep`` (the marked
    rank's index), the first, the last, then the others in order.  At least ``keep`` (or the
    first) is shown; ``fits`` must hold for fewer indices whenever it holds for more.

    >>> pick(16, 9, lambda p: len(p) <= 6)
    [0, 1, None, 9, None, 15]
    """
    order = _priority(n, keep)
    shown = [next(order)]
    best = _with_gaps(shown, n)
    for i in order:  # a lazy order: the loop ends at the first misfit, never runs n times
        bisect.insort(shown, i)
        picked = _with_gaps(shown, n)
        if not fits(picked):
            break
        best = picked
    return best


def _priority(n: int, keep: int | None) -> Iterator[int]:
    first = list(dict.fromkeys([*([] if keep is None else [keep]), 0, n - 1]))
    yield from first
    yield from (i for i in range(1, n - 1) if i != keep)


def _with_gaps(shown: list[int], n: int) -> Picked:
    out: Picked = []
    prev = -1
    for i in shown:
        if i > prev + 1:
            out.append(None)
        out.append(i)
        prev = i
    if prev < n - 1:
        out.append(None)
    return out


def n_shown(p: Picked) -> int:
    """How many indices ``p`` shows (its ellipses aside).

    >>> n_shown([0, 1, None, 9])
    3
    """
    return sum([i is not None for i in p])


def ravel(crd: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """The row-major index of ``crd`` in ``shape``."""
    idx = 0
    for c, s in zip(crd, shape):
        idx = idx * s + c
    return idx


def _unravel(idx: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The coordinate of the row-major index ``idx`` in ``shape``."""
    out: list[int] = []
    for s in reversed(shape):
        idx, c = divmod(idx, s)
        out.append(c)
    return tuple(reversed(out))
