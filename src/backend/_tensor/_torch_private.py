"""Every private name of torch that ``backend._tensor`` uses, each imported here once
(ARCHITECTURE §8): what it is for, and the torch releases it was checked on.  No other module
of the sub-package reads a torch private name (``tests/test_torch_private.py`` checks both:
that torch still has each name of :data:`REGISTRY`, and that nothing else reads one).

Imports torch: ``_placements`` imports this module where it imports torch, on first use.
"""

from __future__ import annotations

# The default group's store, where the ranks of a reshard compare their plans' digests
# (``_agree``); checked on torch 2.13.0, 2.14.1 and 2.15.0.
from torch.distributed.distributed_c10d import _get_default_store as get_default_store

# DTensor's strided shard placement (mesh.StridedShard's counterpart);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
from torch.distributed.tensor.placement_types import _StridedShard as StridedShard

__all__ = ["REGISTRY", "StridedShard", "get_default_store"]

REGISTRY: tuple[tuple[str, str], ...] = (
    ("torch.distributed.tensor.placement_types._StridedShard",
     "DTensor's strided shard placement, mesh.StridedShard's counterpart, both ways"),
    ("torch.distributed.distributed_c10d._get_default_store",
     "the default group's store, where a reshard's ranks compare their plans' digests"),
)
"""(torch's name, what ``backend._tensor`` uses it for), one entry per name above."""
