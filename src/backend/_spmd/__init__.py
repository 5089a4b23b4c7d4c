"""The offline check of a parallel program (``check_spmd``): it runs the program once per
rank on a recording backend and models what the job's creation, collectives, lifecycle and
machine will do with it.  Above the core and beside ``_c10d`` (whose :class:`~backend.
GroupSpec` it reuses); it imports nothing of the facade, and torch only for programs run
with ``torch=True``.

- ``_check``: :func:`check_spmd`, the orchestration;
- ``_events``: what a run records (events, :class:`GroupRef`, the source line of a call);
- ``_recording``: :class:`SpmdBackend`, the torch-free recorder with torch.distributed's
  vocabulary;
- ``_torch``: recording torch-level programs on torch's fake process group (the private
  names of torch it uses: ``_torch_private``);
- ``_run``: one rank's run, bounded (time limit, memory, threads, async programs; what it
  rebinds in ``torch.distributed`` put back);
- ``_creation``: the creation model (splits, hidden parent-wide splits, cache hits);
- ``_torch_model``: what the modelled torch version and config change (when torch splits,
  pipelining's own communicators);
- ``_collectives``: the collective matcher's model (calls, p2p pairs, all_to_all sizes);
- ``_lifecycle``: after a failure (abort vs destroy, shrink, ended groups, revokes);
- ``_topology``: ranks per host, NVLS slots, communicators per rank;
- ``_keys``: the meeting keys and channels of the replay, as named values;
- ``_matcher``: the replay every model lowers to;
- ``_reduce``: checking fewer ranks (``classes=`` a function; the derivation);
- ``_reads``: a rank's rank-dependent reads, recorded as symbolic ints and evaluated for
  every rank at once;
- ``_classes``: automatic classes (``classes="auto"``, the default at scale) from the reads;
- ``_report``: :class:`SpmdReport`, :class:`Finding` and the words.
"""

from ._check import MAX_CHECKED_RANKS, check_spmd
from ._recording import SpmdBackend
from ._report import FINDING_KINDS, Finding, SpmdReport

__all__ = ["FINDING_KINDS", "MAX_CHECKED_RANKS", "Finding", "SpmdBackend", "SpmdReport",
           "check_spmd"]
