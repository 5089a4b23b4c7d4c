"""Text pictures of small views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import InvalidSizeError, MeshTypeError
from ._input import show

if TYPE_CHECKING:
    from ._view import MeshView

__all__ = ["MAX_RENDER_CELLS", "render"]

MAX_RENDER_CELLS = 4096
"""Largest instance :func:`render` draws; slice or flatten bigger views first."""


def render(view: MeshView, rank: int | None = None) -> str:
    """Draw the instance holding ``rank`` (instance 0 when ``rank`` is None).

    A 1-D view is one row, a 2-D view a grid (dim 0 down, dim 1 across), a
    3-D view a row of 2-D panels, one per index of dim 0.  ``rank`` is shown
    as ``[r]`` and the other members of its groups as ``(r)``; a legend lists
    its group along every dim.

    >>> from mesh import MeshView
    >>> print(MeshView.from_shape((2, 4), ("dp", "tp")).render(5))
    MeshView(dp=2, tp=4), the instance of rank 5
          tp=0 tp=1 tp=2 tp=3
    dp=0     0  (1)    2    3
    dp=1   (4)  [5]  (6)  (7)
    rank 5: dp group (1, 5); tp group (4, 5, 6, 7)
    """
    from ._view import MeshView

    if not isinstance(view, MeshView):
        raise MeshTypeError(f"render draws a mesh.MeshView, got {show(view)}")
    if not 1 <= view.ndim <= 3:
        raise InvalidSizeError(f"render draws 1-, 2- or 3-D views; {view!r} has {view.ndim} "
                               "dims (flatten or slice it first)")
    if view.size() > MAX_RENDER_CELLS:
        raise InvalidSizeError(f"render draws at most {MAX_RENDER_CELLS} ranks; {view!r} has "
                               f"{view.size()} per instance (slice it first)")
    # Instance 0 holds offset 0; never list every instance to draw one (O(N) on a big universe).
    inst: Any = view.instance(view.ranks(0) if rank is None else rank)
    marked: set[int] = set()
    if rank is not None:
        for n in view.names:
            marked.update(view.group(rank, n))

    def cell(r: int) -> str:
        return f"[{r}]" if r == rank else f"({r})" if r in marked else f"{r} "

    grids: list[list[list[str]]]
    shape = view.shape
    if view.ndim == 1:
        grids = [[[cell(r) for r in inst]]]
    elif view.ndim == 2:
        grids = [[[cell(r) for r in row] for row in inst]]
    else:
        grids = [[[cell(r) for r in row] for row in panel]
                 for panel in inst]
    width = max(len(c) for g in grids for row in g for c in row)
    col_names = view.names[-1]
    row_name = view.names[-2] if view.ndim >= 2 else None
    col_w = max(width, len(f"{col_names}={shape[-1] - 1}"))
    row_w = len(f"{row_name}={shape[-2] - 1}") if row_name else 0
    header_line = "the instance of rank " + str(rank) if rank is not None else "instance 0"
    lines = [f"{view!r}, {header_line}"]

    def panel_lines(g: list[list[str]]) -> list[str]:
        out = [" " * row_w + " " + " ".join(f"{col_names}={i}".rjust(col_w)
                                            for i in range(shape[-1]))]
        for i, row in enumerate(g):
            label = f"{row_name}={i}".ljust(row_w) if row_name else ""
            out.append(label + " " + " ".join(c.rjust(col_w + 1)[:-1] if c.endswith(" ")
                                              else c.rjust(col_w) for c in row))
        return out

    if view.ndim == 3:
        blocks = [[f"{view.names[0]}={p}", *panel_lines(g)] for p, g in enumerate(grids)]
        w = max(len(x) for b in blocks for x in b)
        for parts in zip(*blocks):
            lines.append("   ".join(x.ljust(w) for x in parts).rstrip())
    else:
        lines.extend(x.rstrip() for x in panel_lines(grids[0]))
    if rank is not None:
        groups = "; ".join(f"{n} group {view.group(rank, n)}" for n in view.names)
        lines.append(f"rank {rank}: {groups}")
    return "\n".join(lines)
