"""Work done once, not twice or the long way: ``mesh.reshard`` checks its arguments once;
``view_of`` (what ``sharding_of`` and ``redistribute`` read a mesh through) answers a torch
mesh the facade's ``to_torch()`` made from what the facade knows, without listing its ranks;
discovery reads a backend's default timeout through its public property."""

from __future__ import annotations

from typing import Any

import pytest

import mesh._tensor._reshard as reshard_module
from mesh import MeshView, Replicate, Shard, Sharding, reshard


def test_reshard_checks_its_arguments_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = reshard_module._checked

    def counting(*args: Any) -> int:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(reshard_module, "_checked", counting)
    view = MeshView.from_shape((3, 5), ("a", "b"))  # a shape no other test plans
    plan = reshard(Sharding(view, (Shard(0), Replicate()), (7, 9)),
                   Sharding(view, (Replicate(), Shard(1)), (7, 9)), itemsize=8)
    assert len(calls) == 1 and plan.itemsize == 8 and plan.bytes_moved > 0


def test_view_of_a_converted_mesh_is_the_facades_view_without_listing_ranks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from backend import TorchFakeBackend, bind
    from backend._facade._redistribute import view_of

    world = TorchFakeBackend(world_size=8, rank=3)
    try:
        m = bind(MeshView.from_shape((2, 4), ("dp", "tp")), world)
        for facade in (m, m["tp"], m["dp", "tp"]._flatten("dp_tp")):
            converted = facade.to_torch()
            monkeypatch.setattr(MeshView, "from_ranks", _refused)
            assert view_of(converted) is facade.view
            monkeypatch.undo()
    finally:
        world.shutdown()


def _refused(*args: Any, **kwargs: Any) -> MeshView:
    raise AssertionError("view_of listed a converted mesh's ranks")


def test_discovery_takes_the_backends_default_timeout_from_its_property() -> None:
    from datetime import timedelta

    from backend import TorchFakeBackend
    from backend._c10d._discover import _seconds

    world = TorchFakeBackend(2, 0, timeout=timedelta(seconds=7))
    try:
        assert world.default_timeout == timedelta(seconds=7)
        assert _seconds(None, world) == 7.0 and _seconds(3, world) == 3.0
    finally:
        world.shutdown()


def test_a_finished_plans_totals_are_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tier_bytes``, ``busiest``, ``rounds`` and ``elements_moved`` are read per tensor by
    whole-model reports: the second read walks no traffic, and ``tier_bytes`` hands out a
    copy (changing it changes nothing)."""
    from mesh import Topology

    view = MeshView.from_shape((4, 4), ("a", "b"))
    plan = reshard(Sharding(view, (Shard(0), Replicate()), (16, 12)),
                   Sharding(view, (Replicate(), Shard(1)), (16, 12)), Topology(16, 4))
    first = (plan.tier_bytes, plan.busiest, plan.rounds, plan.elements_moved)
    walked: list[int] = []
    real = reshard_module.Reshard._tier

    def counting(self: Any, a: int, b: int) -> int:
        walked.append(a)
        return real(self, a, b)

    monkeypatch.setattr(reshard_module.Reshard, "_tier", counting)
    monkeypatch.setattr(reshard_module.Reshard, "_dst_ranks", _refused)
    again = (plan.tier_bytes, plan.busiest, plan.rounds, plan.elements_moved)
    assert again == first and walked == [] and first[0]["across"] > 0
    plan.tier_bytes["across"] = -1
    assert plan.tier_bytes == first[0]
