"""Text pictures of views of any size: a grid of 2-D panels, long dims cut with an ellipsis.

Only the cells shown are computed, each by layout arithmetic (never by listing
the instance), so drawing a view of 2**40 ranks costs what drawing a small one does.
"""

from __future__ import annotations

import bisect
import itertools
import math
import textwrap
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .._core import InvalidSizeError, MeshTypeError, MeshView, as_int, show

if TYPE_CHECKING:
    from layout import Layout

__all__ = ["MIN_WIDTH", "render"]

MIN_WIDTH = 40
"""The narrowest ``width`` :func:`render` draws in."""

_ROWS = 16  # lines of a panel's grid, the ellipsis line included
_PANELS = 8  # panels shown, unless all of them fit side by side in one row
_SEP = "   "  # between panels side by side
_GAP = "…"

Picked = list[int | None]
"""Indices to show, in order, with None where an ellipsis stands for the ones left out."""


def render(view: MeshView, rank: int | None = None, *, width: int = 120) -> str:
    """Draw the instance holding ``rank`` (instance 0 when ``rank`` is None).

    A 1-D view is one row, a 2-D view a grid (dim 0 down, dim 1 across).  A view
    of more dims is a grid of such 2-D panels of its last two dims, one per
    coordinate of the dims before them, each titled by that coordinate; panels
    stand side by side as many as fit in ``width`` columns, then wrap (a blank
    line between rows of panels).  ``rank`` is shown as ``[r]`` and the other
    members of its groups (same instance, coordinates equal but in one dim) as
    ``(r)``; a legend lists its group along every dim.

    No line is longer than ``width`` (an int, at least 40).  Long
    dims are cut, keeping the first indices, the marked rank's and the last,
    with ``…`` for the ones left out: at most 16 grid lines per panel; as many
    columns as fit; at most 8 panels (all of them when they fit side by side in
    one row), with a line counting the panels left out; and group members in
    the legend as many as fit on its line, followed by the group's size.  The
    legend is one line when it fits, else a line per dim.  Only the cells shown
    are computed: the cost is O(cells shown + ndim), whatever the view's size.
    Long headers and panel titles wrap; a line that cannot fit at all (long dim
    names and 20-digit ranks in a narrow width) is cut with ``…``.

    >>> from mesh import MeshView, render
    >>> print(render(MeshView.from_shape((2, 4), ("dp", "tp")), 5))
    MeshView(dp=2, tp=4), the instance of rank 5
          tp=0 tp=1 tp=2 tp=3
    dp=0     0  (1)    2    3
    dp=1   (4)  [5]  (6)  (7)
    rank 5: dp group (1, 5); tp group (4, 5, 6, 7)
    >>> print(render(MeshView.from_shape((2, 2, 2, 4), ("pp", "dp", "cp", "tp")), 5, width=60))
    MeshView(pp=2, dp=2, cp=2, tp=4), the instance of rank 5
    pp=0 dp=0                  pp=0 dp=1
         tp=0 tp=1 tp=2 tp=3        tp=0 tp=1 tp=2 tp=3
    cp=0    0  (1)    2    3   cp=0    8    9   10   11
    cp=1  (4)  [5]  (6)  (7)   cp=1   12 (13)   14   15
    <BLANKLINE>
    pp=1 dp=0                  pp=1 dp=1
         tp=0 tp=1 tp=2 tp=3        tp=0 tp=1 tp=2 tp=3
    cp=0   16   17   18   19   cp=0   24   25   26   27
    cp=1   20 (21)   22   23   cp=1   28   29   30   31
    rank 5:
      pp group (5, 21)
      dp group (5, 13)
      cp group (1, 5)
      tp group (4, 5, 6, 7)
    >>> print(render(MeshView.from_shape((3, 1000), ("dp", "tp")), 1005, width=60))
    MeshView(dp=3, tp=1000), the instance of rank 1005
           tp=0   tp=1   tp=2   tp=3   tp=4   tp=5 … tp=999
    dp=0      0      1      2      3      4    (5) …    999
    dp=1 (1000) (1001) (1002) (1003) (1004) [1005] … (1999)
    dp=2   2000   2001   2002   2003   2004 (2005) …   2999
    rank 1005:
      dp group (5, 1005, 2005)
      tp group (1000, 1001, …, 1005, …, 1999) (1,000 ranks)
    """
    if not isinstance(view, MeshView):
        raise MeshTypeError(f"render draws a mesh.MeshView, got {show(view)}")
    w = as_int(width, "render's width")
    if w < MIN_WIDTH:
        raise InvalidSizeError(f"render's width must be at least {MIN_WIDTH} columns, got "
                               f"{show(w)}")
    inst = _Instance(view, None if rank is None else as_int(rank, "a rank"))
    which = "instance 0" if inst.rank is None else f"the instance of rank {inst.rank}"
    lines = textwrap.wrap(f"{view!r}, {which}", w, subsequent_indent="    ",
                          break_on_hyphens=False)
    lines += _grid(inst, w)
    if inst.rank is not None:
        lines += _legend(inst, w)
    return "\n".join([x if len(x) <= w else x[:w - 1] + _GAP for x in lines])


class _Instance:
    """One instance of a view, evaluated one coordinate at a time.

    The rank at coordinate ``c`` is ``ranks(base + V(c))`` with ``V`` the view's
    layout and ``base = C(j)`` the first offset of instance ``j`` (``C`` the
    complement; see ``MeshView._inverse``).  ``V(c)`` is the sum of each dim's
    layout at its index, and each of those is computed once.
    """

    def __init__(self, view: MeshView, rank: int | None) -> None:
        self.view = view
        self.rank = rank
        self.here: tuple[int, ...] | None = None  # the coordinate of rank
        self.base = 0  # instance 0 starts at offset 0
        if rank is not None:
            _, j, x = view._locate(rank)
            self.base, self.here = view._complement(j), view._coords(x)
        self._modes: tuple[Layout, ...] = tuple(view.layout)
        self._steps: list[dict[int, int]] = [{} for _ in self._modes]
        self._cells: dict[tuple[int, ...], str] = {}

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
        assert self.here is not None
        return self.rank_at((*self.here[:k], i, *self.here[k + 1:]))

    def cell(self, crd: tuple[int, ...]) -> str:
        """``[r]`` for the rank, ``(r)`` for a member of its groups, else ``r`` and a space
        (a column is as wide as its widest cell; :func:`_align` drops the space)."""
        found = self._cells.get(crd)
        if found is None:
            r = self.rank_at(crd)
            differ = 2 if self.here is None else sum([a != b for a, b in zip(crd, self.here)])
            found = self._cells[crd] = f"[{r}]" if differ == 0 else f"({r})" if differ == 1 \
                else f"{r} "
        return found


def _grid(inst: _Instance, width: int) -> list[str]:
    """The panels of the instance, arranged in rows of panels that fit ``width``."""
    view, here = inst.view, inst.here
    shape, nd = view.shape, view.ndim
    outer = shape[:-2]
    n_panels = math.prod(outer)
    rows: Picked = [0]  # a 1-D view is one row, with no coordinate of its own
    if nd >= 2:
        rows = _pick(shape[-2], None if here is None else here[-2],
                     lambda p: len(p) <= _ROWS)
    keep = None if here is None else _ravel(here[:-2], outer)
    panels = _pick(n_panels, keep, lambda p: _count(p) <= _PANELS)
    items, pw = _panels(inst, panels, rows, width)
    if _count(panels) < n_panels <= (width + len(_SEP)) // (pw + len(_SEP)):
        items, pw = _panels(inst, list(range(n_panels)), rows, width)  # all, side by side
    return _arrange(items, pw, width, " × ".join(
        f"{n}=0..{s - 1}" for n, s in zip(view.names, outer)))


def _arrange(items: list[list[str] | int], pw: int, width: int, space: str) -> list[str]:
    """Runs of panels side by side, as many as fit ``width``, and a line for each gap
    (``space``: the panels' coordinates); a blank line between rows of panels."""
    per_row = max(1, (width + len(_SEP)) // (pw + len(_SEP)))
    chunks: list[list[str]] = []
    for is_gap, same in itertools.groupby(items, key=lambda item: isinstance(item, int)):
        if is_gap:
            chunks += [[_first_fitting([f"{_GAP} {n:,} more panels ({space}) {_GAP}",
                                        f"{_GAP} {n:,} more panels {_GAP}",
                                        f"{_GAP} {n:,} more {_GAP}"], width)] for n in same]
            continue
        run = [item for item in same if isinstance(item, list)]
        chunks += [[_SEP.join([x.ljust(pw) for x in parts]).rstrip()
                    for parts in zip(*run[i:i + per_row])] for i in range(0, len(run), per_row)]
    return [x for i, c in enumerate(chunks) for x in ([""] if i else []) + c]


def _panels(inst: _Instance, panels: Picked, rows: Picked, width: int
            ) -> tuple[list[list[str] | int], int]:
    """Each shown panel's lines, or for each gap the number of panels it stands for; and
    the width of the widest panel.  Columns are chosen here: as many as fit ``width``."""
    view, here = inst.view, inst.here
    shape, names, nd = view.shape, view.names, view.ndim
    outer = shape[:-2]
    n_panels = math.prod(outer)
    coords = [None if p is None else _unravel(p, outer) for p in panels]
    shown = [oc for oc in coords if oc is not None]
    row_name, col_name = names[-2] if nd >= 2 else "", names[-1]
    row_w = max([len(f"{row_name}={r}") for r in rows if r is not None]) if nd >= 2 else 0

    def crd(oc: tuple[int, ...], r: int, c: int) -> tuple[int, ...]:
        return (*oc, r, c) if nd >= 2 else (c,)

    col_ws: dict[int, int] = {}

    def col_w(c: int) -> int:
        if c not in col_ws:
            col_ws[c] = max([len(f"{col_name}={c}"), *(
                len(inst.cell(crd(oc, r, c))) for oc in shown for r in rows if r is not None)])
        return col_ws[c]

    def grid_w(cols: Picked) -> int:
        cw = max([col_w(c) for c in cols if c is not None])
        return row_w + 1 + sum([1 if c is None else cw for c in cols]) + len(cols) - 1

    cols = _pick(shape[-1], None if here is None else here[-1], lambda p: grid_w(p) <= width)
    cw = max([col_w(c) for c in cols if c is not None])
    header = " " * row_w + " " + " ".join(
        [_GAP if c is None else f"{col_name}={c}".rjust(cw) for c in cols])

    def line(oc: tuple[int, ...], r: int | None) -> str:
        if r is None:
            return _GAP.ljust(row_w) + " " + " ".join(
                [" " if c is None else _GAP.rjust(cw) for c in cols])
        label = f"{row_name}={r}" if nd >= 2 else ""
        return label.ljust(row_w) + " " + " ".join(
            [_GAP if c is None else _align(inst.cell(crd(oc, r, c)), cw) for c in cols])

    # Titles ("pp=0 dp=1") break before the same dims in every panel, so that they line up.
    wrap = _wrap([max([len(f"{n}={oc[k]}") for oc in shown]) for k, n in enumerate(names[:-2])],
                 width)
    items: list[list[str] | int] = []
    prev = -1
    for p, oc in zip(panels, coords):
        if oc is None:
            continue
        assert p is not None
        if p > prev + 1:
            items.append(p - prev - 1)
        prev = p
        title = [_cut(" ".join(f"{names[k]}={oc[k]}" for k in dims), width) for dims in wrap]
        items.append([*title, header, *(line(oc, r) for r in rows)])
    if prev < n_panels - 1:
        items.append(n_panels - 1 - prev)
    pw = max([len(x) for item in items if isinstance(item, list) for x in item])
    return items, pw


def _legend(inst: _Instance, width: int) -> list[str]:
    """The rank's group along every dim: one line when it fits, else a line per dim."""
    view, here = inst.view, inst.here
    assert here is not None
    head = f"rank {inst.rank}:"
    if sum(view.shape) <= width:  # else the groups cannot all fit on one line
        one = "; ".join(f"{n} group {tuple(inst.member(k, i) for i in range(s))}"
                        for k, (n, s) in enumerate(zip(view.names, view.shape)))
        if len(head) + 1 + len(one) <= width:
            return [f"{head} {one}"]
    return [head, *(_group_line(inst, k, width) for k in range(view.ndim))]


def _group_line(inst: _Instance, k: int, width: int) -> str:
    """``  name group (...)``: the whole group if it fits, else as many members as fit (the
    rank's among them) and the group's size."""
    assert inst.here is not None
    n = inst.view.shape[k]
    lead = f"  {inst.view.names[k]} group "

    def text(p: Picked, counted: bool = True) -> str:
        if None not in p:
            return str(tuple(inst.member(k, i) for i in p if i is not None))
        inner = ", ".join(_GAP if i is None else str(inst.member(k, i)) for i in p)
        return f"({inner})" + (f" ({n:,} ranks)" if counted else "")

    picked = _pick(n, inst.here[k], lambda p: len(lead) + len(text(p)) <= width)
    return _first_fitting([lead + text(picked), lead + text(picked, False),
                           f"  {inst.view.names[k]} {text(picked, False)}"], width)


def _pick(n: int, keep: int | None, fits: Callable[[Picked], bool]) -> Picked:
    """The most of ``range(n)`` that ``fits``, given room in the order: ``keep`` (the marked
    rank's index), the first, the last, then the others in order.  At least ``keep`` (or the
    first) is shown; ``fits`` must hold for fewer indices whenever it holds for more.

    >>> _pick(16, 9, lambda p: len(p) <= 6)
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


def _wrap(widths: list[int], width: int) -> list[list[int]]:
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


def _count(p: Picked) -> int:
    return sum([i is not None for i in p])


def _ravel(crd: tuple[int, ...], shape: tuple[int, ...]) -> int:
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


def _align(cell: str, w: int) -> str:
    """Right-align ``cell`` in ``w`` columns; a bare number's trailing space falls off."""
    return cell.rjust(w + 1)[:-1] if cell.endswith(" ") else cell.rjust(w)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + _GAP


def _first_fitting(candidates: list[str], width: int) -> str:
    return next((c for c in candidates if len(c) <= width), candidates[-1])
