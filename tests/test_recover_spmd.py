"""Every way ``mesh.recover`` proposes can be created: each way's views, bound on every rank
of its universe (spares included) and asked for every group in one order, pass
``backend.check_spmd`` with no finding, with Gloo's creation (by the members).

Not NCCL's: ``check_spmd`` models a device-bound NCCL default group over ranks ``[0, n)``,
whose splits every rank must enter, and after a failure that world holds the dead and the
unused spares (a recovered NCCL job re-forms its default group over the new universe first;
the check has no such world to model)."""

from __future__ import annotations

from typing import Any

import pytest

from backend import bind, check_spmd
from mesh import MeshView, Replicate, Shard, Sharding, Topology, recover


def hsdp(world: MeshView) -> dict[str, MeshView]:
    return {"world": world, "dp_fsdp": world.flatten(("dp", "fsdp"), "dp_fsdp"),
            "fsdp_tp": world["fsdp", "tp"]}


WORLD = MeshView.from_shape((2, 2, 2), ("dp", "fsdp", "tp"))


@pytest.mark.parametrize("failed, spares", [([6], [8, 9]), ([0, 1], []), ([3], [])])
def test_every_ways_views_pass_check_spmd(failed: list[int], spares: list[int]) -> None:
    state = {"w": Sharding(hsdp(WORLD)["dp_fsdp"], (Shard(0), Replicate()), (8, 4))}
    r = recover(hsdp, WORLD, failed, state=state, spares=spares, topology=Topology(10, 2))
    assert r.ways
    for way in r.ways:
        universe = next(iter(way.views.values())).ranks

        def program(backend: Any, way: Any = way, universe: Any = universe) -> None:
            if universe.offset_of(backend.rank) is None:
                return  # a rank the way leaves out, or a spare it does not use
            for view in way.views.values():
                mesh = bind(view, backend)
                if mesh.get_coordinate() is None:
                    continue
                for dim in view.names:
                    mesh.get_group(dim)

        report = check_spmd(universe.max_rank + 1, program, backend="gloo")
        assert report.ok, (way, str(report))
