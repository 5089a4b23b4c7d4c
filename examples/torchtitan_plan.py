"""torchtitan's meshes for an MoE model on 2,048 GPUs (256 hosts of 8), as a plan file.

Explain it:  meshlayout explain examples/torchtitan_plan.py --rank 5

torchtitan unflattens the world into one mesh per use: ``dense`` (pp, dp_replicate,
fsdp, tp) for the dense layers, where fsdp shards over dp_shard × cp; ``sparse`` (pp,
dp_replicate, efsdp, ep, etp) for the experts; and a ``loss`` mesh, the (batch, cp) dims
of the data-loading mesh flattened.  A plan file defines ``VIEWS`` (name -> MeshView)
and may define ``TOPOLOGY``; :func:`torchtitan_views` builds the views at any size.
"""

from __future__ import annotations

from mesh import MeshView, Topology


def torchtitan_views(world: int, pp: int, dp_replicate: int, dp_shard: int, cp: int, tp: int,
                     ep: int, etp: int) -> dict[str, MeshView]:
    """The dense, sparse and loss views of torchtitan's ``ParallelDims`` for these degrees."""
    fsdp = dp_shard * cp
    efsdp = fsdp * tp // (etp * ep)
    whole = MeshView.from_shape(world, ("world",))
    loading = whole.unflatten("world", (pp, dp_replicate * dp_shard, cp, tp),
                              ("pp", "batch", "cp", "tp"))
    return {
        "dense": whole.unflatten("world", (pp, dp_replicate, fsdp, tp),
                                 ("pp", "dp_replicate", "fsdp", "tp")),
        "sparse": whole.unflatten("world", (pp, dp_replicate, efsdp, ep, etp),
                                  ("pp", "dp_replicate", "efsdp", "ep", "etp")),
        "loss": loading["batch", "cp"].flatten(("batch", "cp"), "loss"),
    }


VIEWS = torchtitan_views(2048, pp=4, dp_replicate=2, dp_shard=32, cp=2, tp=4, ep=8, etp=4)
TOPOLOGY = Topology(2048, devices_per_host=8)
