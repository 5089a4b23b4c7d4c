"""A trainer's weights, for ``meshlayout reshard``: a 4-layer transformer on 8 ranks,
(dp, tp) = (2, 4) with tensor parallelism then FSDP2 over dp (``StridedShard`` where FSDP
shards a TP shard's dim), on hosts of 8 GPUs.

    meshlayout reshard examples/trainer.py examples/server.py
"""

from mesh import MeshView, Replicate, Shard, Sharding, StridedShard, Topology

HIDDEN, FFN, VOCAB, LAYERS = 1024, 4096, 32000, 4
MESH = MeshView.from_shape((2, 4), ("dp", "tp"))
COLWISE = (StridedShard(0, 4), Shard(0))  # TP shards rows, FSDP shards each TP shard's rows
ROWWISE = (Shard(0), Shard(1))  # TP shards columns, FSDP shards rows
NORM = (Shard(0), Replicate())

TENSORS = {"embed": Sharding(MESH, (Shard(0), Shard(1)), (VOCAB, HIDDEN))}
for i in range(LAYERS):
    for name, shape, placements in (
            ("wqkv", (3 * HIDDEN, HIDDEN), COLWISE), ("wo", (HIDDEN, HIDDEN), ROWWISE),
            ("w13", (2 * FFN, HIDDEN), COLWISE), ("w2", (HIDDEN, FFN), ROWWISE),
            ("norm", (HIDDEN,), NORM)):
        TENSORS[f"layers.{i}.{name}"] = Sharding(MESH, placements, shape)
TENSORS["lm_head"] = Sharding(MESH, COLWISE, (VOCAB, HIDDEN))

TOPOLOGY = Topology(16, 8)  # the trainer on host 0, the server on host 1
