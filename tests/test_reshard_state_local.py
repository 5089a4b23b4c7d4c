"""``backend.reshard_state`` in a world of one process (Gloo on a HashStore): a block that
does not change comes back as the same tensor, not a copy (as torch's ``redistribute`` to
the same placements); blocks that change are checked on Gloo worlds of 8
(``tests/test_reshard_gloo.py``, ``tests/test_apply_recovery_gloo.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from backend import reshard_state
from mesh import MeshView, Replicate, Shard, Sharding, reshard


@pytest.fixture
def one() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_an_unchanged_block_is_returned_as_it_is(one: None) -> None:
    view = MeshView.from_shape((1,), ("tp",))
    same = Sharding(view, (Shard(0),), (4, 3))
    local = torch.arange(12.0).reshape(4, 3)
    moved = reshard_state({"w": reshard(same, same)}, {"w": local})
    assert moved["w"] is local
    # from another placement that puts every element at the same place on this rank
    other = Sharding(view, (Replicate(),), (4, 3))
    assert reshard_state({"w": reshard(other, same)}, {"w": local})["w"] is local
