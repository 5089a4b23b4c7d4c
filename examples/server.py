"""An inference server's weights, for ``meshlayout reshard``: the trainer's model
(``examples/trainer.py``) on 8 other ranks (8-15), (dp, tp) = (2, 4), tensor parallel and
replicated over dp.
"""

from mesh import MeshView, Replicate, Shard, Sharding

HIDDEN, FFN, VOCAB, LAYERS = 1024, 4096, 32000, 4
MESH = MeshView.from_ranks([list(range(8, 12)), list(range(12, 16))], ("dp", "tp"))
COLWISE = (Replicate(), Shard(0))
ROWWISE = (Replicate(), Shard(1))

TENSORS = {"embed": Sharding(MESH, (Replicate(), Shard(1)), (VOCAB, HIDDEN))}
for i in range(LAYERS):
    for name, shape, placements in (
            ("wqkv", (3 * HIDDEN, HIDDEN), COLWISE), ("wo", (HIDDEN, HIDDEN), ROWWISE),
            ("w13", (2 * FFN, HIDDEN), COLWISE), ("w2", (HIDDEN, FFN), ROWWISE),
            ("norm", (HIDDEN,), (Replicate(), Replicate()))):
        TENSORS[f"layers.{i}.{name}"] = Sharding(MESH, placements, shape)
TENSORS["lm_head"] = Sharding(MESH, COLWISE, (VOCAB, HIDDEN))
