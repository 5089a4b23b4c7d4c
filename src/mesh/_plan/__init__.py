"""The plan wing of :mod:`mesh`: where a plan's groups land on machines, and what they cost.

Imports the core (``mesh._core``) and the drawing wing (``mesh._draw``, for the CLI's
``--svg``); neither imports this wing.

Module map: ``_topology`` (:class:`Topology`: hosts, fast domains, which groups cross
them), ``_explain`` (:func:`explain`, :class:`Explanation`, :class:`CommMemory`: the
plan's data), ``_report`` (the text report of that data), ``_cli`` (the ``meshlayout``
command; not imported by ``import mesh``).
"""

from ._explain import DEFAULT_DEVICES_PER_HOST, SCHEMA, CommMemory, Explanation, explain
from ._topology import Topology

__all__ = ["DEFAULT_DEVICES_PER_HOST", "SCHEMA", "CommMemory", "Explanation", "Topology",
           "explain"]
