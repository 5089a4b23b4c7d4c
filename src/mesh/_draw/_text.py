"""Text pictures of views of any size: a grid of 2-D panels, long dims cut with an ellipsis.

Only the cells shown are computed, each by layout arithmetic (never by listing
the instance), so drawing a view of 2**40 ranks costs what drawing a small one does.
What is shown where is the panel model's (``_panels``); this module picks what fits a
width in characters and writes the lines.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap

from .._core import InvalidSizeError, MeshTypeError, MeshView, as_int, show
from ._panels import Instance, Picked, Sheet, n_shown, pick, ravel, rows_of, wrap

__all__ = ["MIN_WIDTH", "render"]

MIN_WIDTH = 40
"""The narrowest ``width`` :func:`render` draws in."""

_ROWS = 16  # lines of a panel's grid, the ellipsis line included
_PANELS = 8  # panels shown, unless all of them fit side by side in one row
_SEP = "   "  # between panels side by side
_GAP = "…"
_MARKS = ("[{}]", "({})", "{} ")  # the rank, a member of its groups, another rank (the
# space keeps a bare number's column as wide as a marked one's; _align drops it)


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
    inst = Instance(view, None if rank is None else as_int(rank, "a rank"))
    lines = textwrap.wrap(inst.heading(), w, subsequent_indent="    ", break_on_hyphens=False)
    lines += _grid(inst, w)
    if inst.rank is not None:
        lines += _legend(inst, w)
    return "\n".join([_cut(x, w) for x in lines])


class _Cells:
    """The text of a sheet's cells and the width of its columns, each computed once."""

    def __init__(self, sheet: Sheet) -> None:
        self.sheet = sheet
        self._text: dict[tuple[int, ...], str] = {}
        self._widths: dict[int, int] = {}
        self.row_w = 0  # the row labels' column (none for a 1-D view)
        if sheet.view.ndim >= 2:
            self.row_w = max([len(sheet.label(-2, r)) for r in sheet.rows if r is not None])

    def text(self, crd: tuple[int, ...]) -> str:
        """``[r]`` for the rank, ``(r)`` for a member of its groups, else ``r`` and a space."""
        found = self._text.get(crd)
        if found is None:
            inst = self.sheet.inst
            found = self._text[crd] = _MARKS[inst.mark(crd)].format(inst.rank_at(crd))
        return found

    def col_w(self, c: int) -> int:
        """The width of column ``c``: its label's or its widest cell's, in any panel shown."""
        if c not in self._widths:
            s = self.sheet
            self._widths[c] = max([len(s.label(-1, c)), *(
                len(self.text(s.crd(oc, r, c))) for _, oc in s.shown for r in s.rows
                if r is not None)])
        return self._widths[c]

    def cw(self, cols: Picked) -> int:
        """The width every shown column is drawn in: the widest one's."""
        return max([self.col_w(c) for c in cols if c is not None])

    def grid_w(self, cols: Picked) -> int:
        """The width of a panel's grid showing ``cols``."""
        cw = self.cw(cols)
        return self.row_w + 1 + sum([1 if c is None else cw for c in cols]) + len(cols) - 1


def _grid(inst: Instance, width: int) -> list[str]:
    """The panels of the instance, arranged in rows of panels that fit ``width``."""
    shape, here = inst.view.shape, inst.here
    rows: Picked = [0]  # a 1-D view is one row, with no coordinate of its own
    if inst.view.ndim >= 2:
        rows = pick(shape[-2], None if here is None else here[-2], lambda p: len(p) <= _ROWS)
    n_panels = math.prod(shape[:-2])
    keep = None if here is None else ravel(here[:-2], shape[:-2])
    panels = pick(n_panels, keep, lambda p: n_shown(p) <= _PANELS)
    sheet, items, pw = _panels(Sheet(inst, panels, rows), width)
    if n_shown(panels) < n_panels <= (width + len(_SEP)) // (pw + len(_SEP)):
        sheet, items, pw = _panels(Sheet(inst, list(range(n_panels)), rows), width)  # all
    return _arrange(items, pw, width, sheet.space())


def _panels(sheet: Sheet, width: int) -> tuple[Sheet, list[list[str] | int], int]:
    """The sheet with as many columns as fit ``width``; each shown panel's lines, or for each
    gap the number of panels it stands for; and the width of the widest panel."""
    cells = _Cells(sheet)
    here = sheet.inst.here
    cols = pick(sheet.view.shape[-1], None if here is None else here[-1],
                lambda p: cells.grid_w(p) <= width)
    sheet = dataclasses.replace(sheet, cols=cols)
    head = _header(sheet, cells)
    # Titles ("pp=0 dp=1") break before the same dims in every panel, so that they line up.
    lines = wrap([max([len(sheet.title(oc)[k]) for _, oc in sheet.shown])
                  for k in range(len(sheet.outer))], width)
    items: list[list[str] | int] = [
        item if isinstance(item, int) else [
            *(_cut(" ".join(sheet.title(item[1])[k] for k in ks), width) for ks in lines),
            head, *(_line(sheet, cells, item[1], r) for r in sheet.rows)]
        for item in sheet.runs()]
    pw = max([len(x) for item in items if isinstance(item, list) for x in item])
    return sheet, items, pw


def _header(sheet: Sheet, cells: _Cells) -> str:
    """The column labels' line."""
    cw = cells.cw(sheet.cols)
    return " " * cells.row_w + " " + " ".join(
        [_GAP if c is None else sheet.label(-1, c).rjust(cw) for c in sheet.cols])


def _line(sheet: Sheet, cells: _Cells, oc: tuple[int, ...], r: int | None) -> str:
    """Row ``r`` of the panel at ``oc`` (None: the ellipsis line between rows)."""
    cw = cells.cw(sheet.cols)
    if r is None:
        return _GAP.ljust(cells.row_w) + " " + " ".join(
            [" " if c is None else _GAP.rjust(cw) for c in sheet.cols])
    label = sheet.label(-2, r) if sheet.view.ndim >= 2 else ""
    return label.ljust(cells.row_w) + " " + " ".join(
        [_GAP if c is None else _align(cells.text(sheet.crd(oc, r, c)), cw)
         for c in sheet.cols])


def _arrange(items: list[list[str] | int], pw: int, width: int, space: str) -> list[str]:
    """Rows of panels side by side, as many as fit ``width``, and a line for each gap
    (``space``: the panels' coordinates); a blank line between rows of panels."""
    chunks: list[list[str]] = []
    for row in rows_of(items, max(1, (width + len(_SEP)) // (pw + len(_SEP)))):
        if isinstance(row, int):
            chunks.append([_first_fitting([f"{_GAP} {row:,} more panels ({space}) {_GAP}",
                                           f"{_GAP} {row:,} more panels {_GAP}",
                                           f"{_GAP} {row:,} more {_GAP}"], width)])
        else:
            chunks.append([_SEP.join([x.ljust(pw) for x in parts]).rstrip()
                           for parts in zip(*row)])
    return [x for i, c in enumerate(chunks) for x in ([""] if i else []) + c]


def _legend(inst: Instance, width: int) -> list[str]:
    """The rank's group along every dim: one line when it fits, else a line per dim."""
    view, here = inst.view, inst.here
    assert here is not None, "the legend is drawn only for a rank in the universe"
    head = f"rank {inst.rank}:"
    if sum(view.shape) <= width:  # else the groups cannot all fit on one line
        one = "; ".join(f"{n} group {tuple(inst.member(k, i) for i in range(s))}"
                        for k, (n, s) in enumerate(zip(view.names, view.shape)))
        if len(head) + 1 + len(one) <= width:
            return [f"{head} {one}"]
    return [head, *(_group_line(inst, k, width) for k in range(view.ndim))]


def _group_line(inst: Instance, k: int, width: int) -> str:
    """``  name group (...)``: the whole group if it fits, else as many members as fit (the
    rank's among them) and the group's size."""
    assert inst.here is not None, "a group line is drawn only for a rank in the universe"
    n = inst.view.shape[k]
    lead = f"  {inst.view.names[k]} group "

    def text(p: Picked, counted: bool = True) -> str:
        if None not in p:
            return str(tuple(inst.member(k, i) for i in p if i is not None))
        inner = ", ".join(_GAP if i is None else str(inst.member(k, i)) for i in p)
        return f"({inner})" + (f" ({n:,} ranks)" if counted else "")

    picked = pick(n, inst.here[k], lambda p: len(lead) + len(text(p)) <= width)
    return _first_fitting([lead + text(picked), lead + text(picked, False),
                           f"  {inst.view.names[k]} {text(picked, False)}"], width)


def _align(cell: str, w: int) -> str:
    """Right-align ``cell`` in ``w`` columns; a bare number's trailing space falls off."""
    return cell.rjust(w + 1)[:-1] if cell.endswith(" ") else cell.rjust(w)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + _GAP


def _first_fitting(candidates: list[str], width: int) -> str:
    return next((c for c in candidates if len(c) <= width), candidates[-1])
