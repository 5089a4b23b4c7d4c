"""The offline check of a parallel program (``check_spmd``): it runs the program once per
rank on a recording backend and models what the job's c10d creation will do with its
requests.  Above the core and beside ``_c10d`` (whose :class:`~backend.GroupSpec` it reuses);
it imports nothing of the facade.

- ``_check``: :func:`check_spmd`, its recorder and :class:`SpmdReport`.
"""

from ._check import MAX_CHECKED_RANKS, SpmdReport, check_spmd

__all__ = ["MAX_CHECKED_RANKS", "SpmdReport", "check_spmd"]
