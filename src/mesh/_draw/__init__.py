"""The drawing wing of :mod:`mesh`: pictures of one instance of a view.

Imports the core (``mesh._core``) and the machine model (``mesh._topology``): never the plan
wing, which uses it (the ``--svg`` of ``meshlayout explain``); a topology's hosts and fast
domains come in as a :class:`~mesh.Topology`, or as plain ``host(rank) -> int`` and
``domain(rank) -> int`` callables.

Module map: ``_panels`` (the one panel model: which panels, rows and columns are shown,
each cell's rank and mark, panels in rows, titles in lines), and its two writers, which
only measure and emit: ``_text`` (:func:`render`, in characters, picking what fits a
width) and ``_svg`` (:func:`svg`, in pixels, every cell; colours, host lines).
"""

from ._svg import MAX_SVG_CELLS, PALETTE, svg
from ._text import MIN_WIDTH, render

__all__ = ["MAX_SVG_CELLS", "MIN_WIDTH", "PALETTE", "render", "svg"]
