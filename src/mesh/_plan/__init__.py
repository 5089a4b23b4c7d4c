"""The plan wing of :mod:`mesh`: where a plan's groups land on machines, and what they cost.

Imports the core (``mesh._core``), the machine model (``mesh._topology``: :class:`Topology`),
the drawing wing (``mesh._draw``, for the command's ``--svg``), the recovery wing
(``mesh._recover``, for ``--fail``), the tensor wing (``mesh._tensor``, for ``reshard``) and
the hang wing (``mesh._hang``, for ``hang``); no other wing imports this one.

Module map: ``_report`` (the text reports), ``_explain`` (:func:`explain`,
:class:`Explanation`, :class:`CommMemory`: the plan's data), ``_traffic`` (:class:`Links`:
the α-β time estimate), ``_compare`` (:func:`compare`, :class:`Comparison`: plans side by
side), ``_place`` (:func:`place`, :class:`Placement`: the rank order whose estimate is
least), ``_fail`` (what failed ranks do to a plan: the data of ``explain --fail``), and the
``meshlayout`` command, not imported by ``import mesh``: ``_args`` (its argument types),
``_parser`` (its flags), ``_planfile`` (reading a plan file), ``_machine`` (the machine
``--topology``, ``--hosts`` or ``--hosts-file`` names), ``_differ`` (where that machine
differs from the plan's topology), ``_moves`` (the data and picture of ``reshard``) and ``_cli``
(the command).  ``_topology`` only lets pickles of an earlier release load (they named it).
"""

from collections.abc import Sequence

from ._compare import COMPARE_SCHEMA, Comparison, compare
from ._explain import DEFAULT_DEVICES_PER_HOST, SCHEMA, CommMemory, Explanation, explain
from ._place import MAX_PLACED_DIMS, PLACE_SCHEMA, Placement, place
from ._traffic import Links

__all__ = ["COMPARE_SCHEMA", "DEFAULT_DEVICES_PER_HOST", "MAX_PLACED_DIMS", "PLACE_SCHEMA",
           "SCHEMA", "CommMemory", "Comparison", "Explanation", "Links", "Placement",
           "compare", "explain", "main", "place"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``meshlayout`` command (``_cli.main``, imported only when run), for ``python -m
    mesh``."""
    from ._cli import main as run

    return run(argv)
