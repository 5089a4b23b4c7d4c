"""A job to lose a rank from, for ``meshlayout recover``: (dp=4, tp=8) on 32 ranks, hosts of
8 GPUs with one more host of spares; a 4-layer transformer's weights, tensor-parallel over tp
and replicated over dp (HSDP's replica dim), and Adam's two moments, sharded over both.

    meshlayout recover examples/recover_plan.py --fail 13 --spares 8
"""

from mesh import MeshView, Replicate, Shard, Sharding, Topology

HIDDEN, FFN, LAYERS = 1024, 4096, 4
WORLD = MeshView.from_shape((4, 8), ("dp", "tp"))


def PLAN(world: MeshView) -> dict[str, MeshView]:
    return {"world": world}


TENSORS = {}
for i in range(LAYERS):
    for name, shape, tp_dim in (("wqkv", (3 * HIDDEN, HIDDEN), 0), ("wo", (HIDDEN, HIDDEN), 1),
                                ("w13", (2 * FFN, HIDDEN), 0), ("w2", (HIDDEN, FFN), 1)):
        TENSORS[f"layers.{i}.{name}"] = Sharding(WORLD, (Replicate(), Shard(tp_dim)), shape)
        for moment in ("exp_avg", "exp_avg_sq"):
            TENSORS[f"layers.{i}.{name}.{moment}"] = Sharding(
                WORLD, (Shard(1 - tp_dim), Shard(tp_dim)), shape)

TOPOLOGY = Topology(40, 8)  # hosts 0-3 run the job, host 4 (ranks 32-39) is spare
