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


VIEW = MeshView.from_shape((1,), ("tp",))
SAME = Sharding(VIEW, (Shard(0),), (4, 3))


def _refused(match: str, **kwargs: object) -> str:
    from backend import BackendConfigError

    local = torch.arange(12.0).reshape(4, 3)
    with pytest.raises(BackendConfigError, match=match) as got:
        reshard_state({"w": reshard(SAME, SAME)}, {"w": local}, **kwargs)  # type: ignore[arg-type]
    return str(got.value)


def test_dtypes_convert_a_block_this_rank_keeps(one: None) -> None:
    local = torch.arange(12.0).reshape(4, 3)
    moved = reshard_state({"w": reshard(SAME, SAME)}, {"w": local}, dtypes={"w": torch.float64})
    assert moved["w"].dtype == torch.float64 and moved["w"].tolist() == local.tolist()


def test_an_into_tensor_receives_the_block_and_is_returned(one: None) -> None:
    local = torch.arange(12.0).reshape(4, 3)
    target = torch.zeros(4, 3, dtype=torch.float16)
    moved = reshard_state({"w": reshard(SAME, SAME)}, {"w": local}, into={"w": target})
    assert moved["w"] is target and target.tolist() == local.tolist()


@pytest.mark.parametrize(("into", "named"), [
    (torch.zeros(3, 4), ["into['w'] has shape (3, 4)", "(4, 3)"]),
    ("weights", ["into['w'] must be a torch.Tensor", "'weights'"]),
])
def test_an_into_tensor_that_does_not_fit_is_refused_naming_it(one: None, into: object,
                                                               named: list[str]) -> None:
    text = _refused("into", into={"w": into})
    assert all(n in text for n in named), text


def test_an_into_tensor_of_another_dtype_than_asked_is_refused(one: None) -> None:
    text = _refused("dtypes asks for", dtypes={"w": torch.float64},
                    into={"w": torch.zeros(4, 3, dtype=torch.float16)})
    assert "torch.float64" in text and "torch.float16" in text


def test_an_into_tensor_on_another_device_than_asked_is_refused(one: None) -> None:
    text = _refused("device", into={"w": torch.zeros(4, 3)}, device="meta")
    assert "is on cpu" in text and "device=meta" in text


def test_an_into_tensor_sharing_the_sources_memory_is_refused(one: None) -> None:
    from backend import BackendConfigError

    local = torch.arange(12.0).reshape(4, 3)
    with pytest.raises(BackendConfigError, match="shares memory"):
        reshard_state({"w": reshard(SAME, SAME)}, {"w": local}, into={"w": local.view(4, 3)})


@pytest.fixture
def unheard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans that name rank 1, absent from this world of one: telling it that this rank
    refused would wait for it (the agreement is tested in test_reshard_agree.py and on
    Gloo), so it is not told."""
    from backend._tensor import _exec

    monkeypatch.setattr(_exec, "same_plans", lambda *a, **k: None)


def test_into_for_a_tensor_no_plan_moves_or_outside_its_destination_is_refused(
        one: None, unheard: None) -> None:
    assert "['x']" in _refused("no plan moves", into={"x": torch.zeros(1)})
    away = Sharding(MeshView.from_ranks([1], ("tp",)), (Shard(0),), (4, 3))
    from backend import BackendConfigError

    with pytest.raises(BackendConfigError, match="rank 0 is not in its destination"):
        reshard_state({"w": reshard(SAME, away)}, {"w": torch.zeros(4, 3)},
                      into={"w": torch.zeros(4, 3)})


def test_a_receiver_that_names_no_dtype_it_moves_in_is_refused(one: None,
                                                                unheard: None) -> None:
    from backend import BackendConfigError

    away = Sharding(MeshView.from_ranks([1], ("tp",)), (Shard(0),), (4, 3))
    with pytest.raises(BackendConfigError, match="source_dtypes"):
        reshard_state({"w": reshard(away, SAME)}, {})


def test_a_state_plan_moves_its_tensors_in_its_order_and_returns_them(one: None) -> None:
    import mesh

    other = Sharding(VIEW, (Replicate(),), (4, 3))
    plan = mesh.reshard_state({"w": SAME, "v": other}, {"w": other, "v": SAME}, cap=1)
    local = {"w": torch.arange(12.0).reshape(4, 3), "v": torch.ones(4, 3)}
    moved = reshard_state(plan, local)
    assert list(plan.plans) == ["w", "v"] and plan.buckets == 1  # one rank moves nothing
    assert moved["w"] is local["w"] and moved["v"] is local["v"]


def test_a_tensor_moving_in_a_dtype_of_another_itemsize_than_its_plan_is_refused(
        one: None) -> None:
    import mesh
    from backend import BackendConfigError

    plan = mesh.reshard_state({"w": SAME}, {"w": SAME}, itemsize=2)
    with pytest.raises(BackendConfigError, match=r"'w' moves as torch.float32 \(4 bytes an "
                                                 r"element\), but its plan counts itemsize=2"):
        reshard_state(plan, {"w": torch.zeros(4, 3)})


def test_a_state_plan_whose_names_the_state_lacks_is_refused_naming_them(one: None) -> None:
    import mesh
    from backend import BackendConfigError

    plan = mesh.reshard_state({"w": SAME}, {"w": SAME})
    with pytest.raises(BackendConfigError, match=r"state names \['x'\] that no plan moves"):
        reshard_state(plan, {"w": torch.zeros(4, 3), "x": torch.zeros(1)})
