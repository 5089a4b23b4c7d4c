"""``mesh.reshard(..., down=)``: failed source ranks send nothing, and what only they held is
``Reshard.lost`` (read from a checkpoint).  Expected values written by hand."""

from __future__ import annotations

import numpy as np

from mesh import MeshView, Partial, Replicate, Shard, Sharding, reshard

WORLD = MeshView.from_shape((2, 2), ("dp", "tp"))  # ranks 0-3: (dp, tp) = (r // 2, r % 2)
SPARED = MeshView.from_ranks([[0, 1], [2, 4]], ("dp", "tp"))  # rank 3 replaced by 4


def test_a_replica_sends_what_the_failed_rank_held() -> None:
    src = Sharding(WORLD, (Replicate(), Shard(0)), (4, 2))  # tp 1: rows 2..4, on 1 and 3
    plan = reshard(src, Sharding(SPARED, (Replicate(), Shard(0)), (4, 2)), down=[3])
    assert [(t.source, t.boxes) for t in plan.receives(4)] == [(1, (((2, 4), (0, 2)),))]
    assert plan.lost(4) == () and plan.sends(3) == ()
    assert plan.traffic() == {(1, 4): 4}


def test_a_block_only_the_failed_rank_held_is_lost_and_read_from_the_checkpoint() -> None:
    src = Sharding(WORLD, (Shard(1), Shard(0)), (4, 2))  # rank 3: rows 2..4, column 1
    plan = reshard(src, Sharding(SPARED, (Shard(1), Shard(0)), (4, 2)), down=[3])
    assert plan.receives(4) == () and plan.lost(4) == (((2, 4), (1, 2)),)
    assert plan.lost(0) == () and plan.kept(0) == 2
    full = np.arange(8.0).reshape(4, 2)
    shards = {r: src.local(full, r) for r in (0, 1, 2)}
    out = plan.apply(shards, checkpoint=full)
    assert out[4].tolist() == [[5.0], [7.0]]  # rows 2, 3 of column 1
    assert plan.apply(shards)[4].tolist() == [[0.0], [0.0]]  # no checkpoint: left zero


def test_a_partial_contribution_of_a_failed_rank_is_lost() -> None:
    src = Sharding(WORLD, (Partial(), Shard(0)), (4, 2))  # dp partial: ranks 1 and 3 add
    plan = reshard(src, Sharding(WORLD, (Replicate(), Shard(0)), (4, 2)), down=[3])
    assert [t.source for t in plan.receives(1)] == []  # its own contribution is kept
    assert plan.lost(1) == (((2, 4), (0, 2)),)  # rank 3's contribution to rows 2..4
    assert plan.lost(0) == ()
