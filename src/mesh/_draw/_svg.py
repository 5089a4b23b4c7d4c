"""SVG pictures of one instance of a view, drawn with the standard library only.

:func:`svg` returns a self-contained SVG 1.1 document: one square cell per rank,
labelled with the rank, cells coloured by their group along a dim (or by host),
thick lines where the host changes between neighbouring cells, one rank outlined and
the members of its groups outlined in one style per dim.  The same arguments give the
same bytes.

Every cell's look is data before it is text: a fill per cell (:func:`_colours`) and a
map from cell to :class:`Outline` (:func:`_outlines`), each outline style with its legend
line.  A new marking (failed ranks, broken groups) adds entries to that map and a line to
the legend; the emitting code draws whatever the map holds.
"""

from __future__ import annotations

import colorsys
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Sequence
from typing import cast

from .._core import (
    Dim,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    RankNotInMeshError,
    as_int,
    as_size,
    ordered,
    show,
)
from .._topology import Topology
from ._panels import MEMBER, Instance, Sheet, across_by_aspect, neighbours, ravel, rows_of

__all__ = ["MAX_SVG_CELLS", "PALETTE", "Outline", "svg"]

MAX_SVG_CELLS = 16384
"""Largest instance :func:`svg` draws by default (a 128 x 128 grid, about 5 MB of SVG);
select fewer dims (``view["dp", "tp"]``) or pass ``max_cells=`` for bigger ones."""

PALETTE = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#f7b6d2",
           "#dbdb8d", "#9edae5", "#c49c94", "#ffe35c", "#8fb7ff", "#d0d0d0")
"""Light qualitative fills (Tableau 20's light half and three more), all readable under
black text; group ``g`` (in order of first appearance) takes ``PALETTE[g % 12]``, or the
next one not used by an adjacent group; when all 12 are, a further light colour (hues a
golden angle apart), so adjacent groups never share a fill."""


_PLAIN = "#f4f4f4"  # the fill when nothing colours the cells
_LINE, _MARK = "#111111", "#d62728"  # host boundaries; the outline of ``rank``
_DOMAIN_LINE = "#1f3a93"  # fast domain boundaries (dark blue, over the host lines)
_CELL, _GAP, _MARGIN = 32, 28, 16  # px: smallest cell, space between panels, border
_SWATCH = 20  # px: a legend line's swatch and the space after it
_INNER = 7  # px: the inset of an outline drawn inside another (a stranded member)
_TOP = _MARGIN + 30  # px: the top of the first panel, below the title
_EM = 0.6  # a monospace glyph is about 0.6 em wide
_AXIS, _LEGEND, _TITLE = 11, 12, 14  # font sizes, px
_ASPECT = 1.5  # the panel grid's preferred width / height
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


@dataclasses.dataclass(frozen=True)
class Outline:
    """How a cell is outlined: why (``kind``, the SVG class), for which dim (or None), the
    stroke's colour, width and dash pattern, the words naming the style in the legend, and
    whether a cross is drawn over the cell too (a failed rank)."""

    kind: str
    dim: str | None
    colour: str
    width: float
    dash: str
    words: str
    cross: bool = False

    def shapes(self, x: float, y: float, size: float, kind: str | None = None) -> str:
        """The outline of a ``size`` square at ``(x, y)``, and its cross (if any)."""
        box = f'<rect x="{x:g}" y="{y:g}" width="{size:g}" height="{size:g}" ' \
              f'{self.attributes(kind)}/>'
        if not self.cross:
            return box
        far_x, far_y = x + size, y + size
        return (box + f'<path class="{kind or self.kind}-cross" d="M{x:g},{y:g}L{far_x:g},'
                f'{far_y:g}M{far_x:g},{y:g}L{x:g},{far_y:g}" stroke="{self.colour}" '
                f'stroke-width="{self.width * 2 / 3:g}" stroke-opacity="0.7"/>')

    def attributes(self, kind: str | None = None) -> str:
        """The SVG attributes of the outline (class ``kind``, default the outline's own)."""
        dash = f' stroke-dasharray="{self.dash}"' if self.dash else ""
        dim = "" if self.dim is None else f' data-dim="{_xml(self.dim)}"'
        return (f'class="{kind or self.kind}"{dim} fill="none" stroke="{self.colour}" '
                f'stroke-width="{self.width:g}"{dash}')


_DIM_COLOURS = (("#1f77b4", "blue"), ("#2ca02c", "green"), ("#9467bd", "purple"),
                ("#8c564b", "brown"), ("#17becf", "teal"), ("#e377c2", "pink"),
                ("#ff7f0e", "orange"), ("#7f7f7f", "grey"))  # dark on every fill; no red
_DASHES = (("", ""), ("5,3", "dashed "), ("1.5,2", "dotted "))


_RANK = Outline("highlight", None, _MARK, 3, "", "red outline")
"""The outline of the rank drawn for."""

_FAILED = Outline("failed", None, _LINE, 3, "", "black crossed box", cross=True)
_BROKEN = Outline("broken", None, _LINE, 2.5, "4,2", "black dashed outline")
"""The outlines of failed ranks, and of the healthy members of a group that lost one (its
*stranded* ranks); either wins over a member's outline, and a failed rank's over the red."""


def _member_style(k: int, name: str) -> Outline:
    """The outline of the members of the drawn rank's group along dim ``k``: a dark colour
    (never the rank's red) and, from the 9th dim on, a dash pattern (24 distinct styles)."""
    colour, word = _DIM_COLOURS[k % len(_DIM_COLOURS)]
    dash, how = _DASHES[k // len(_DIM_COLOURS) % len(_DASHES)]
    return Outline("member", name, colour, 2.5, dash, f"{how}{word} outline")


def svg(view: MeshView, *, host: Callable[[int], int] | Topology | None = None,
        color_by: Dim | None = None, rank: int | None = None, title: str | None = None,
        max_cells: int = MAX_SVG_CELLS, failed: Sequence[int] = (),
        domain: Callable[[int], int] | Topology | None = None) -> str:
    """Draw the instance holding ``rank`` (instance 0 when ``rank`` is None) as SVG.

    One cell per rank: a 1-D view is one row, a 2-D view a grid (dim 0 down,
    dim 1 across).  A view of 3 or more dims is a grid of 2-D panels, one per
    coordinate of the outer dims (all but the last two), each labelled like
    ``pp=0 dp=1``; panels go in row-major order of those coordinates, ``C`` to a
    row, where ``C`` is a product of trailing outer sizes (or a divisor of one)
    chosen to make the grid of panels closest to 3:2.

    ``color_by`` (a dim) fills cells of one group along it with one colour and
    adjacent groups never with the same one (12 colours, reused by groups that do not
    touch, more when needed; the legend says when colours repeat); without it, ``host``
    colours cells by host, the same way.  ``host`` is a ``host(global_rank) -> int``
    callable or a :class:`~mesh.Topology`; it
    also draws a thick line on every edge between two neighbouring cells of a panel
    on different hosts, and a panel on one host names it.  ``rank`` is outlined in
    red, and the other members of its group along every dim in one style per dim
    (a colour, then a dash pattern).  ``failed`` ranks (an ordered sequence; those
    outside the instance are ignored) are drawn as crossed boxes, and the healthy
    members of every group (along any dim) that holds one as black dashed outlines.
    ``domain`` (a ``domain(global_rank) -> int`` callable, or a :class:`~mesh.Topology`)
    adds the fast domains: without ``color_by``, cells take one colour per domain (adjacent
    domains never share one), each host of a domain a shade of it (touching hosts of one
    domain never share one), and a thick blue line runs on every edge between two domains.
    ``title`` replaces the default first line (the
    view and the instance); a legend below says what panels, colours, lines and
    outlines mean.  Cells are
    32 px squares with 14 px rank numbers (10 px from 4 digits on; wider cells from 5).

    Instances of more than ``max_cells`` ranks are refused
    (:class:`~mesh.InvalidSizeError`); so are a non-view or a non-callable ``host``
    (:class:`~mesh.MeshTypeError`), an unknown ``color_by``
    (:class:`~mesh.UnknownDimError`) and a rank outside the universe
    (:class:`~mesh.RankNotInMeshError`).

    >>> from mesh import MeshView
    >>> picture = svg(MeshView.from_shape((2, 4), ("dp", "tp")), color_by="tp", rank=5)
    >>> picture.startswith("<svg"), picture.count('<g class="cell">')
    (True, 8)
    >>> picture.count(">5</text>"), 'stroke="#d62728"' in picture
    (1, True)
    >>> [picture.count(f'class="member" data-dim="{d}"') for d in ("dp", "tp")]
    [1, 3]
    """
    k, host = _checked(view, host, title, color_by, rank, max_cells)
    dom = _callable(domain, "domain", "a callable global rank -> domain index or a "
                    "mesh.Topology")
    sheet = Sheet.whole(Instance(view, None if rank is None else as_int(rank, "rank")))
    coords = list(sheet.cells())
    cells = [sheet.inst.rank_at(c) for c in coords]
    hosts = _per_cell(host, cells, "host", "an int (a host index)")
    domains = _per_cell(dom, cells, "domain", "an int (a domain index)")
    g = _Grid.of(sheet, coords, cells, hosts)
    keys, fills, legend_fills = _fills(g, len(cells), k, hosts, domains)
    outlines = _outlines(sheet.inst, g.coords)
    hurt = _Hurt.of(view, g.coords, cells, failed)
    legend = [*_legend(view, k, hosts, keys, legend_fills, g.across, domains),
              *_outline_legend(sheet.inst, outlines), *hurt.legend(view.names, len(cells))]
    inner = hurt.mark(outlines)
    head = title if title is not None else sheet.inst.heading()
    notes = hurt.notes(view.names)
    if domains is not None:
        notes = [f", domain {d}{note}" for d, note in zip(domains, notes)]
    return "\n".join([*_opening(g, head, legend),
                      *_panel_groups(g, cells, fills, hosts, notes),
                      *_marks(g, hosts, outlines, domains, inner), *_closing(g, legend)])


def _per_cell(fn: Callable[[int], int] | None, cells: list[int], what: str,
              expected: str) -> list[int] | None:
    """``fn`` of every cell's rank, each checked to be an int (None without ``fn``)."""
    if fn is None:
        return None
    return [as_int(fn(r), f"{what}({r})", expected) for r in cells]


def _fills(g: _Grid, n: int, k: int | None, hosts: list[int] | None,
           domains: list[int] | None) -> tuple[list[tuple[int, ...]], list[str], list[str]]:
    """Each of the ``n`` cells' colour key and fill, and the fills the legend names: by
    group along dim ``k``, else by domain (each host a shade of its domain's colour), else
    by host, else plain."""
    if k is not None:
        keys = [(*c[:k], 0, *c[k + 1:]) for c in g.coords]
    elif domains is not None:
        keys = [(d,) for d in domains]
    else:
        keys = [(h,) for h in hosts] if hosts is not None else [()] * n
    if k is None and hosts is None and domains is None:
        return keys, [_PLAIN] * n, [_PLAIN] * n
    fills = _colours(keys, g.pairs)
    if k is None and domains is not None and hosts is not None:
        return keys, _shaded(fills, domains, hosts, g.pairs), fills
    return keys, fills, fills


def _checked(view: MeshView, host: object, title: object, color_by: Dim | None,
             rank: int | None, max_cells: int) -> tuple[int | None, Callable[[int], int] | None]:
    """The arguments of :func:`svg` checked (else the error its docstring names); the index
    of ``color_by`` and the host callable (a topology's ``host`` method)."""
    if not isinstance(view, MeshView):
        raise MeshTypeError(f"svg draws a mesh.MeshView, got {show(view)}")
    host = _callable(host, "host", "a callable global rank -> host index or a mesh.Topology")
    if title is not None and not isinstance(title, str):
        raise MeshTypeError(f"title must be a str, got {show(title)}")
    limit = as_size(max_cells, "max_cells")
    k = None if color_by is None else view.index(color_by)
    if rank is not None:
        rank = as_int(rank, "rank")
        if view.coordinate(rank) is None:
            raise RankNotInMeshError(f"rank {rank} is not in the universe of {view!r}, so svg "
                                     f"cannot draw its instance")
    if view.size() > limit:
        raise InvalidSizeError(
            f"svg draws at most max_cells={limit:,} cells; {view!r} has {view.size():,} ranks "
            "per instance: select fewer dims (view[...]) or pass a larger max_cells=")
    return k, host


def _callable(given: object, method: str, expected: str) -> Callable[[int], int] | None:
    """``given`` if callable, a topology's ``host`` (``method``: ``domain``) method, else
    MeshTypeError."""
    if given is None or callable(given):
        return cast("Callable[[int], int] | None", given)
    if not isinstance(given, Topology):
        raise MeshTypeError(f"{method} must be {expected}, got {show(given)}")
    return given.host if method == "host" else given.domain


def _shaded(fills: list[str], domains: list[int], hosts: list[int],
            pairs: list[tuple[int, int]]) -> list[str]:
    """Each domain's colour, in a shade per host: hosts (in order of first appearance) take
    the lightest shade no neighbouring host of their domain has, so two hosts of one
    domain that touch never share a fill."""
    order = list(dict.fromkeys(hosts))
    near: dict[int, set[int]] = {h: set() for h in order}
    for a, b in pairs:
        if hosts[a] != hosts[b] and domains[a] == domains[b]:
            near[hosts[a]].add(hosts[b])
            near[hosts[b]].add(hosts[a])
    shade: dict[int, int] = {}
    for h in order:
        taken = {shade[x] for x in near[h] if x in shade}
        shade[h] = next(i for i in itertools.count() if i not in taken)
    return [_darker(f, shade[h]) for f, h in zip(fills, hosts)]


def _darker(fill: str, step: int) -> str:
    """``fill`` (#rrggbb) with ``step`` times 13% black mixed in (at most 65%)."""
    keep = 1.0 - min(0.13 * step, 0.65)
    rgb = [int(fill[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(v * keep):02x}" for v in rgb)


Legend = list[tuple[str, Outline | None]]
"""The lines under the picture, each with the outline style it explains (a swatch), if any."""


def _opening(g: _Grid, head: str, legend: Legend) -> list[str]:
    """The document's opening: its size, title and background."""
    width = 2 * _MARGIN + max([g.width, _width(head, _TITLE)]
                              + [_width(s, _LEGEND) + _SWATCH * (o is not None)
                                 for s, o in legend])
    height = _TOP + g.height + 12 + 18 * len(legend) + _MARGIN
    return [f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" font-family="monospace">',
            f"<title>{_xml(head)}</title>",
            f'<rect class="background" width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text class="title" x="{_MARGIN}" y="{_MARGIN + 14}" font-size="{_TITLE}" '
            f'font-weight="bold">{_xml(head)}</text>']


def _panel_groups(g: _Grid, cells: list[int], fills: list[str], hosts: list[int] | None,
                  notes: list[str]) -> list[str]:
    """Every panel's group: its frame and labels, then its cells with their tooltips (each
    ending with the cell's note)."""
    out = []
    n = g.rows * g.cols
    for p in range(len(g.labels)):
        out.extend(g.panel(p))
        for i in range(p * n, (p + 1) * n):
            where = " ".join(f"{d}={c}" for d, c in zip(g.names, g.coords[i]))
            on = "" if hosts is None else f", host {hosts[i]}"
            out.append(g.cell(i, cells[i], fills[i], f"rank {cells[i]}: {where}{on}{notes[i]}"))
        out.append("</g>")
    return out


def _marks(g: _Grid, hosts: list[int] | None, outlines: dict[int, Outline],
           domains: list[int] | None = None, inner: dict[int, Outline] | None = None
           ) -> list[str]:
    """The lines between cells on different hosts, then between domains, then every
    cell's outline (on top), then the outlines drawn inside another (a stranded member)."""
    out = []
    if hosts is not None:
        out.append(f'<g class="host-boundaries" stroke="{_LINE}" stroke-width="4" '
                   'stroke-linecap="square">')
        out.extend(g.edge(a, b) for a, b in g.pairs if hosts[a] != hosts[b])
        out.append("</g>")
    if domains is not None:
        out.append(f'<g class="domain-boundaries" stroke="{_DOMAIN_LINE}" stroke-width="6" '
                   'stroke-linecap="square">')
        out.extend(g.edge(a, b) for a, b in g.pairs if domains[a] != domains[b])
        out.append("</g>")
    for i, o in sorted(outlines.items()):
        (x, y), inset = g.at(i), 2 if o.kind in ("highlight", "failed") else 3
        out.append(o.shapes(x + inset, y + inset, g.cell_px - 2 * inset))
    for i, o in sorted((inner or {}).items()):
        (x, y), inset = g.at(i), _INNER
        out.append(o.shapes(x + inset, y + inset, g.cell_px - 2 * inset))
    return out


def _outlines(inst: Instance, coords: list[tuple[int, ...]]) -> dict[int, Outline]:
    """The outlined cells: the drawn rank's (red), and each other member of its group along
    dim ``k`` (same instance, coordinates equal but at ``k``) in dim ``k``'s style."""
    here = inst.here
    if here is None:
        return {}
    names = inst.view.names
    out = {ravel(here, inst.view.shape): _RANK}
    for i, crd in enumerate(coords):
        if inst.mark(crd) == MEMBER:
            k = next(k for k, (a, b) in enumerate(zip(crd, here)) if a != b)
            out[i] = _member_style(k, names[k])
    return out


def _outline_legend(inst: Instance, outlines: dict[int, Outline]) -> Legend:
    """A legend line per outline style used: the rank's, then each dim's."""
    if inst.here is None:
        return []
    view = inst.view
    at = " ".join(f"{n}={c}" for n, c in zip(view.names, inst.here))
    lines: Legend = [(f"red outline: rank {inst.rank} ({at})", _RANK)]
    for k, name in enumerate(view.names):
        if view.shape[k] > 1:
            style = _member_style(k, name)
            n = view.shape[k]
            lines.append((f"{style.words}: the other member{'s' * (n > 2)} of rank "
                          f"{inst.rank}'s {name} group ({n - 1:,} of its {n:,} ranks)", style))
    return lines


@dataclasses.dataclass(frozen=True)
class _Hurt:
    """What failed ranks do to the cells drawn: which cells failed, and for each cell the
    dims along which its group lost a member (a group along dim ``k`` is the cells whose
    coordinates differ only at ``k``; the instance holds it whole)."""

    given: bool  # whether any failed rank was given (drawn or not)
    dead: list[bool]
    broken: list[tuple[int, ...]]  # per cell, the dims whose group through it lost a member

    @classmethod
    def of(cls, view: MeshView, coords: list[tuple[int, ...]], cells: list[int],
           failed: object) -> _Hurt:
        gone = frozenset([as_int(r, "every failed rank") for r in ordered(failed, "failed")])
        dead = [r in gone for r in cells]
        hit = {(k, c[:k] + c[k + 1:]) for c, d in zip(coords, dead) if d
               for k in range(view.ndim)}
        broken = [tuple([k for k in range(view.ndim) if (k, c[:k] + c[k + 1:]) in hit])
                  for c in coords]
        return cls(bool(gone), dead, broken)

    def mark(self, outlines: dict[int, Outline]) -> dict[int, Outline]:
        """Add the failed cells (over any outline) and the stranded ones; a stranded member
        of the drawn rank's group keeps its member outline, and its stranded outline is
        returned to be drawn inside it (both stay visible)."""
        inner: dict[int, Outline] = {}
        for i, (d, b) in enumerate(zip(self.dead, self.broken)):
            if d:
                outlines[i] = _FAILED
            elif b and i in outlines and outlines[i].kind == "member":
                inner[i] = _BROKEN
            elif b and outlines.get(i, _BROKEN).kind != "highlight":
                outlines[i] = _BROKEN
        return inner

    def notes(self, names: tuple[str, ...]) -> list[str]:
        """Each cell's tooltip note: failed, or the dims of its broken groups."""
        return ["; failed" if d else "; stranded in its broken " +
                ", ".join(names[k] for k in b) + " group" + "s" * (len(b) > 1) if b else ""
                for d, b in zip(self.dead, self.broken)]

    def legend(self, names: tuple[str, ...], n: int) -> Legend:
        """A line per failure marking drawn (none without failed ranks in the picture)."""
        dead = sum(self.dead)
        if not dead:
            return [("failed ranks: none in this instance", None)] if self.given else []
        per = [sum([k in b for d, b in zip(self.dead, self.broken) if not d])
               for k in range(len(names))]
        along = ", ".join(f"{names[k]} {c:,}" for k, c in enumerate(per) if c)
        lines: Legend = [(f"{_FAILED.words}: failed ranks ({dead:,} of the {n:,} drawn)",
                          _FAILED)]
        if along:
            lines.append((f"{_BROKEN.words}: stranded ranks, the healthy members of the "
                          f"groups that lost one (along {along})", _BROKEN))
        return lines


def _closing(g: _Grid, legend: Legend) -> list[str]:
    """The legend (a swatch before each line that explains an outline), and the end."""
    out = [f'<g class="legend" font-size="{_LEGEND}" fill="#222222">']
    for i, (s, style) in enumerate(legend):
        y = _TOP + g.height + 24 + 18 * i
        x = _MARGIN + _SWATCH * (style is not None)
        if style is not None:
            out.append(style.shapes(_MARGIN, y - 11, 13, "swatch"))
        out.append(f'<text x="{x}" y="{y}">{_xml(s)}</text>')
    return [*out, "</g>\n</svg>\n"]


@dataclasses.dataclass(frozen=True)
class _Grid:
    """Where things go.  A panel is a label row (views of 3 or more dims), a row of column
    labels, and ``rows x cols`` cells of ``cell_px`` with row labels in a left gutter;
    panels go ``across`` to a row, ``_GAP`` apart, below the title."""

    names: tuple[str, ...]
    rows: int
    cols: int
    coords: list[tuple[int, ...]]  # the coordinate of each cell, in row-major order
    pairs: list[tuple[int, int]]  # neighbouring cells, see _panels.neighbours
    labels: list[str]  # one per panel: its outer coordinates ("" for 1-D and 2-D views)
    cell_px: int
    font: int  # of the rank numbers
    gutter: int  # px left of the cells, for the row labels
    full: bool  # whether column labels are "tp=3" (else "3", with "tp" in the gutter)
    panel_w: int
    panel_h: int
    across: int  # panels to a row
    places: dict[int, tuple[int, int]]  # panel -> (row of panels, place in it)

    @classmethod
    def of(cls, sheet: Sheet, coords: list[tuple[int, ...]], cells: list[int],
           hosts: list[int] | None) -> _Grid:
        view = sheet.view
        names = view.names
        rows, cols = len(sheet.rows), len(sheet.cols)
        digits = max(len(str(r)) for r in cells)
        cell = max(_CELL, 2 * math.ceil((_EM * 10 * digits + 6) / 2))  # font 10 px at least
        full = _width(f"{names[-1]}={cols - 1}", _AXIS) <= cell - 2
        left = [_width(f"{names[-2]}={rows - 1}", _AXIS)] if view.ndim >= 2 else []
        gutter = max([*left, 0 if full else _width(names[-1], _AXIS)])
        n = rows * cols
        labels = [_panel_label(sheet.title(oc), hosts, p * n, n) for p, oc in sheet.shown]
        gutter += 8 * (gutter > 0)
        pw = max([gutter + cols * cell] + [_width(s, 12) for s in labels])
        ph = (20 if view.ndim >= 3 else 0) + 18 + rows * cell
        across = across_by_aspect(sheet.outer, pw, ph, _GAP, _ASPECT)
        places = {p: (row, col) for row, run in enumerate(rows_of(sheet.shown, across))
                  if not isinstance(run, int) for col, (p, _) in enumerate(run)}
        return cls(names, rows, cols, coords, list(neighbours(len(cells), rows, cols)),
                   labels, cell, min(14, int((cell - 6) / (_EM * digits))), gutter, full,
                   pw, ph, across, places)

    @property
    def width(self) -> int:
        return self.across * (self.panel_w + _GAP) - _GAP

    @property
    def height(self) -> int:
        panel_rows = 1 + max(row for row, _ in self.places.values())
        return panel_rows * (self.panel_h + _GAP) - _GAP

    def corner(self, p: int) -> tuple[int, int]:
        """The top-left corner of panel ``p``'s first cell."""
        row, col = self.places[p]
        px = _MARGIN + col * (self.panel_w + _GAP)
        py = _TOP + row * (self.panel_h + _GAP)
        return px + self.gutter, py + self.panel_h - self.rows * self.cell_px

    def at(self, i: int) -> tuple[int, int]:
        """The top-left corner of cell ``i``."""
        p, j = divmod(i, self.rows * self.cols)
        x, y = self.corner(p)
        return x + j % self.cols * self.cell_px, y + j // self.cols * self.cell_px

    def panel(self, p: int) -> list[str]:
        """The opening of panel ``p``'s group: frame, label and axis labels."""
        x0, y0 = self.corner(p)
        px, py = x0 - self.gutter, y0 + self.rows * self.cell_px - self.panel_h
        half, name = self.cell_px // 2, self.names[-1]
        out = [f'<g class="panel"><rect class="frame" x="{px - 6}" y="{py - 4}" '
               f'width="{self.panel_w + 12}" height="{self.panel_h + 10}" rx="4" '
               'fill="#f7f7f7" stroke="#bbbbbb"/>']
        if self.labels[p]:
            out.append(f'<text class="panel-label" x="{px}" y="{py + 12}" font-size="12" '
                       f'font-weight="bold">{_xml(self.labels[p])}</text>')
        out.append(f'<g class="axis" font-size="{_AXIS}" fill="#444444">')
        if not self.full:
            out.append(_label(x0 - 6, y0 - 6, "end", name))
        out.extend(_label(x0 + j * self.cell_px + half, y0 - 6, "middle",
                          f"{name}={j}" if self.full else str(j)) for j in range(self.cols))
        if len(self.names) >= 2:
            out.extend(_label(x0 - 6, y0 + i * self.cell_px + half + 4, "end",
                              f"{self.names[-2]}={i}") for i in range(self.rows))
        out.append("</g>")
        return out

    def cell(self, i: int, r: int, fill: str, tip: str) -> str:
        """Cell ``i``: a square of colour ``fill`` with rank ``r`` on it, and a tooltip."""
        (x, y), s = self.at(i), self.cell_px
        return (f'<g class="cell"><title>{_xml(tip)}</title><rect x="{x}" y="{y}" '
                f'width="{s}" height="{s}" fill="{fill}" stroke="#ffffff" stroke-width="1.5"/>'
                f'<text x="{x + s // 2}" y="{y + s // 2 + round(self.font * 0.35)}" '
                f'font-size="{self.font}" text-anchor="middle">{r}</text></g>')

    def edge(self, a: int, b: int) -> str:
        """The line between neighbouring cells ``a`` and ``b`` (``b`` right of or below ``a``)."""
        x, y = self.at(b)
        x2, y2 = (x, y + self.cell_px) if b == a + 1 and self.cols > 1 else (x + self.cell_px, y)
        return f'<line x1="{x}" y1="{y}" x2="{x2}" y2="{y2}"/>'


def _panel_label(title: list[str], hosts: list[int] | None, start: int, n: int) -> str:
    """``pp=0 dp=1``: the outer coordinates of a panel, and its host if it has one only."""
    label = " ".join(title)
    if hosts is not None and len(set(hosts[start:start + n])) == 1:
        label += f" (host {hosts[start]})"
    return label


def _colours(keys: list[tuple[int, ...]], pairs: list[tuple[int, int]]) -> list[str]:
    """A fill per cell: one per key, taken greedily so that neighbouring keys never share one.

    Key ``g`` (numbered in order of first appearance) takes ``PALETTE[g % 12]``, or the
    next palette colour that no already coloured neighbour of it has, or, when all 12
    are taken, the first further colour (:func:`_fill`) none of them has.  Groups along a
    dim have at most 4 neighbouring groups, so 12 colours always suffice for them; hosts
    scattered over a picture may need more.
    """
    order: dict[tuple[int, ...], int] = {}
    for key in keys:
        order.setdefault(key, len(order))
    near: list[set[int]] = [set() for _ in order]
    for a, b in pairs:
        ga, gb = order[keys[a]], order[keys[b]]
        if ga != gb:
            near[ga].add(gb)
            near[gb].add(ga)
    n = len(PALETTE)
    chosen: list[int] = []
    for g in range(len(order)):
        taken = {chosen[h] for h in near[g] if h < g}
        rotation = itertools.chain(((g + t) % n for t in range(n)), itertools.count(n))
        chosen.append(next(c for c in rotation if c not in taken))
    return [_fill(chosen[order[key]]) for key in keys]


def _fill(c: int) -> str:
    """Colour ``c``: ``PALETTE[c]``, then light colours with hues a golden angle apart."""
    if c < len(PALETTE):
        return PALETTE[c]
    hue = (c - len(PALETTE)) * 0.381966 % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.8, 0.6)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


def _legend(view: MeshView, k: int | None, hosts: list[int] | None,
            keys: list[tuple[int, ...]], fills: list[str], across: int,
            domains: list[int] | None = None) -> Legend:
    """The lines under the picture: panels, colours, host lines, domain lines, instances."""
    names, shape = view.names, view.shape
    lines = []
    if view.ndim >= 3:
        lines.append(f"panels: one per ({', '.join(names[:-2])}), {across} to a row; in each, "
                     f"{names[-2]} goes down and {names[-1]} across")
    if k is not None:
        lines.append(f"colours: {names[k]} groups ({_how_many(keys, 'group')} of "
                     f"{shape[k]} ranks{_repeat(keys, fills, 'groups')})")
    if hosts is not None:
        if k is None and domains is None:
            lines.append(f"colours: hosts ({_how_many(keys, 'host')}"
                         f"{_repeat(keys, fills, 'hosts')})")
        lines.append(_host_lines(hosts))
    if domains is not None:
        if k is None:
            shades = ", a shade per host: touching hosts of a domain never share one" \
                if hosts is not None else ""
            lines.append(f"colours: fast domains ({_how_many(keys, 'domain')}"
                         f"{_repeat(keys, fills, 'domains')}{shades})")
        lines.append(f"thick blue lines: fast domain boundaries ({len(set(domains))} "
                     f"domain{'s' * (len(set(domains)) > 1)} in this picture)")
    if view.num_instances > 1:
        lines.append(f"one of {view.num_instances} instances of this view")
    return [(line, None) for line in lines]


def _host_lines(hosts: list[int]) -> str:
    """The legend's line for the host boundaries: how many hosts, how many ranks on each."""
    per_host: dict[int, int] = {}
    for h in hosts:
        per_host[h] = per_host.get(h, 0) + 1
    lo, hi = min(per_host.values()), max(per_host.values())
    each = f"{lo}" if lo == hi else f"{lo} to {hi}"
    plural = "s" * (len(per_host) > 1)
    return (f"thick lines: host boundaries ({len(per_host)} host{plural}, {each} ranks "
            "of this picture on each)")


def _how_many(keys: list[tuple[int, ...]], noun: str) -> str:
    """``4 groups``: how many distinct keys (groups or hosts) the cells have."""
    n = len(set(keys))
    return f"{n} {noun}{'s' * (n > 1)}"


def _repeat(keys: list[tuple[int, ...]], fills: list[str], nouns: str) -> str:
    """``, one colour each``, or how many colours, and that adjacent ones never share one."""
    colours = len(set(fills))
    if colours == len(set(keys)):
        return ", one colour each"
    return f" in {colours} colours: colours repeat, adjacent {nouns} never share one"


def _label(x: int, y: int, anchor: str, s: str) -> str:
    return f'<text x="{x}" y="{y}" text-anchor="{anchor}">{_xml(s)}</text>'


def _xml(s: str) -> str:
    """``s`` as XML character data: escaped, characters XML cannot hold replaced."""
    return _NOT_XML.sub("\ufffd", s).translate(_XML_ESCAPES)


def _width(s: str, font: int) -> int:
    """The width in px of ``s`` in a monospace font of size ``font``."""
    return math.ceil(len(s) * _EM * font)
