"""torch DTensor's placements as :mod:`mesh`'s and back: ``Shard``, ``_StridedShard``,
``Replicate`` and ``Partial`` map one to one (``Partial``'s reductions: ``"sum"``,
``"avg"``, ``"max"``, ``"min"``).

>>> from torch.distributed.tensor import Replicate, Shard
>>> from_torch_placements([Replicate(), Shard(1)])
(Replicate(), Shard(1))
>>> to_torch_placements(from_torch_placements([Shard(0)]))
(Shard(dim=0),)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mesh

from .._core import BackendConfigError

__all__ = ["from_torch_placements", "to_torch_placements"]


def from_torch_placements(placements: Sequence[Any]) -> tuple[Any, ...]:
    """torch's placements (``Shard``, ``_StridedShard``, ``Replicate``, ``Partial``) as
    :mod:`mesh`'s; anything else is refused with :class:`~backend.BackendConfigError`."""
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    from ._torch_private import StridedShard

    out: list[Any] = []
    for i, p in enumerate(placements):
        if isinstance(p, StridedShard):
            out.append(mesh.StridedShard(p.dim, int(p.split_factor)))
        elif isinstance(p, Shard):
            out.append(mesh.Shard(p.dim))
        elif isinstance(p, Replicate):
            out.append(mesh.Replicate())
        elif isinstance(p, Partial) and p.reduce_op in mesh.REDUCE_OPS:
            out.append(mesh.Partial(p.reduce_op))
        else:
            raise BackendConfigError(
                f"placements[{i}] = {p!r} has no meshlayout equivalent (Shard, _StridedShard, "
                f"Replicate, Partial with reduce_op in {mesh.REDUCE_OPS})")
    return tuple(out)


def to_torch_placements(placements: Sequence[Any] | mesh.Sharding) -> tuple[Any, ...]:
    """:mod:`mesh`'s placements (or a :class:`mesh.Sharding`'s) as torch's."""
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

    from ._torch_private import StridedShard

    items = placements.placements if isinstance(placements, mesh.Sharding) else placements
    out: list[Any] = []
    for i, p in enumerate(items):
        if isinstance(p, mesh.StridedShard):
            out.append(StridedShard(p.dim, split_factor=p.split_factor))
        elif isinstance(p, mesh.Shard):
            out.append(Shard(p.dim))
        elif isinstance(p, mesh.Replicate):
            out.append(Replicate())
        elif isinstance(p, mesh.Partial):
            out.append(Partial(p.op))
        else:
            raise BackendConfigError(f"placements[{i}] = {p!r} is not a mesh placement "
                                     "(Shard, StridedShard, Replicate, Partial)")
    return tuple(out)

