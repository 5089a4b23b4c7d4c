"""The drawing wing of :mod:`mesh`: pictures of one instance of a view.

Imports the core (``mesh._core``) only: never the plan wing, which uses it (the
``--svg`` of ``meshlayout explain``); a topology's hosts come in as a plain
``host(rank) -> int`` callable.

Module map: ``_render`` (:func:`render`, text), ``_svg`` (:func:`svg`).
"""

from ._render import MIN_WIDTH, render
from ._svg import MAX_SVG_CELLS, PALETTE, svg

__all__ = ["MAX_SVG_CELLS", "MIN_WIDTH", "PALETTE", "render", "svg"]
