"""The tensor wing of :mod:`mesh`: where a tensor's elements are on a view, and how to move
them to another.

Imports the core (``mesh._core``) and the machine model (``mesh._topology``, which prices a
plan); the package imports it.  Pure and rank-free, like
the core.  Module map: ``_placement`` (the placements and the chunk arithmetic they share),
``_sharding`` (:class:`Sharding`, a tensor over a view, answered per rank), ``_reshard``
(:func:`reshard`: the plan between two shardings, as a :class:`Reshard`), ``_state``
(:func:`reshard_state`: a whole state's plans in buckets under a memory cap).
"""

from ._placement import REDUCE_OPS, Partial, Placement, Replicate, Shard, StridedShard
from ._reshard import TIERS, Reshard, Transfer, pieces, reshard
from ._sharding import MAX_TENSOR_DIMS, MAX_TILES, Sharding
from ._state import Message, StateReshard, reshard_state

__all__ = ["MAX_TENSOR_DIMS", "MAX_TILES", "REDUCE_OPS", "TIERS", "Partial", "Placement",
           "Message", "Replicate", "Reshard", "Shard", "Sharding", "StateReshard", "StridedShard",
           "Transfer", "pieces", "reshard", "reshard_state"]
