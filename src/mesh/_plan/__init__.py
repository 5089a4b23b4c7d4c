"""The plan wing of :mod:`mesh`: where a plan's groups land on machines, and what they cost.

Imports the core (``mesh._core``), the machine model (``mesh._topology``: :class:`Topology`)
and the recovery wing (``mesh._recover``, for what failed ranks do to a plan); only the
command (``mesh._cli``) imports this one.

| module | what it holds |
|---|---|
| ``_explain`` | :func:`explain`, :class:`Explanation`, :class:`CommMemory`: a plan's data |
| ``_traffic`` | :class:`Links`: the α-β time estimate |
| ``_compare`` | :func:`compare`, :class:`Comparison`: plans side by side |
| ``_place`` | :func:`place`, :class:`Placement`: the rank order whose estimate is least |
| ``_fail`` | what failed ranks do to a plan: the data of ``explain --fail`` |
| ``_report`` | the text reports of all of the above |
| ``_topology`` | only lets pickles of an earlier release load (they named it) |

Read ``_explain`` first: the others build on its :class:`Explanation`.
"""

from ._compare import COMPARE_SCHEMA, Comparison, compare, compare_placed
from ._explain import (
    DEFAULT_DEVICES_PER_HOST,
    SCHEMA,
    CommMemory,
    Explanation,
    explain,
    machine_fields,
)
from ._fail import DerivedFrom, failed_on, failure
from ._place import MAX_PLACED_DIMS, PLACE_SCHEMA, Placement, place
from ._report import MIB, failure_report, topology_report
from ._traffic import Links

__all__ = ["COMPARE_SCHEMA", "DEFAULT_DEVICES_PER_HOST", "MAX_PLACED_DIMS", "MIB",
           "PLACE_SCHEMA", "SCHEMA", "CommMemory", "Comparison", "DerivedFrom", "Explanation",
           "Links", "Placement", "compare", "compare_placed", "explain", "failed_on", "failure",
           "failure_report", "machine_fields", "place", "topology_report"]
