"""torchtitan's meshes for an MoE model on 2,048 GPUs (256 hosts of 8), as a plan file.

Explain it:  meshlayout explain examples/torchtitan_plan.py --rank 5

torchtitan unflattens the world into one mesh per use: ``dense`` (pp, dp_replicate,
fsdp, tp) for the dense layers, where fsdp shards over dp_shard × cp; ``sparse`` (pp,
dp_replicate, efsdp, ep, etp) for the experts; and a ``loss`` mesh, the (batch, cp) dims
of the data-loading mesh flattened.  A plan file defines ``VIEWS`` (name -> MeshView)
and may define ``TOPOLOGY``; with ``WORLD`` and ``PLAN`` (the views as a function of the
world), ``meshlayout explain --fail`` also re-derives them from the survivors:

    meshlayout explain examples/torchtitan_plan.py --fail-host 3

:func:`torchtitan_views` builds the views at any size.
"""

from __future__ import annotations

from mesh import MeshView, Topology


def plan(world: MeshView, ep: int = 8, etp: int = 4) -> dict[str, MeshView]:
    """The dense, sparse and loss views of torchtitan's ``ParallelDims`` on ``world``, a
    (pp, dp_replicate, dp_shard, cp, tp) view, with ``ep`` × ``etp`` expert ranks."""
    pp, dp_replicate, dp_shard, cp, tp = world.shape
    fsdp = dp_shard * cp
    efsdp = fsdp * tp // (etp * ep)
    whole = world.flatten(name="world")
    loading = whole.unflatten("world", (pp, dp_replicate * dp_shard, cp, tp),
                              ("pp", "batch", "cp", "tp"))
    return {
        "dense": whole.unflatten("world", (pp, dp_replicate, fsdp, tp),
                                 ("pp", "dp_replicate", "fsdp", "tp")),
        "sparse": whole.unflatten("world", (pp, dp_replicate, efsdp, ep, etp),
                                  ("pp", "dp_replicate", "efsdp", "ep", "etp")),
        "loss": loading["batch", "cp"].flatten(("batch", "cp"), "loss"),
    }


def torchtitan_views(world: int, pp: int, dp_replicate: int, dp_shard: int, cp: int, tp: int,
                     ep: int, etp: int) -> dict[str, MeshView]:
    """The dense, sparse and loss views of torchtitan's ``ParallelDims`` for these degrees."""
    degrees = (pp, dp_replicate, dp_shard, cp, tp)
    whole = MeshView.from_shape(world, ("world",))
    return plan(whole.unflatten("world", degrees, NAMES), ep, etp)


NAMES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
WORLD = MeshView.from_shape((4, 2, 32, 2, 4), NAMES)
PLAN = plan
VIEWS = PLAN(WORLD)
TOPOLOGY = Topology(2048, devices_per_host=8)
