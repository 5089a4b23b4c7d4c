"""``mesh.reshard_state``: a whole state's plans in buckets under a memory cap per rank.

Expected values are written out from the plans' shapes (each comment says how), never
read from the code under test; the law over random states is
``property_tests/test_law_reshard_buckets.py``.
"""

from __future__ import annotations

import pytest

from mesh import (
    MeshTypeError,
    MeshView,
    Message,
    Partial,
    Replicate,
    Shard,
    Sharding,
    ShardingError,
    StateReshard,
    reshard,
    reshard_state,
)

OLD = MeshView.from_ranks([0, 1], ("tp",))
NEW = MeshView.from_ranks([2, 3], ("tp",))


def _rows(n: int, *names: str) -> tuple[dict[str, Sharding], dict[str, Sharding]]:
    """Tensors of shape (4, n), Shard(0) on ranks 0-1 -> Shard(0) on ranks 2-3: rank 0 sends
    rows 0-1 (2n elements) to rank 2, rank 1 rows 2-3 to rank 3."""
    return ({k: Sharding(OLD, (Shard(0),), (4, n)) for k in names},
            {k: Sharding(NEW, (Shard(0),), (4, n)) for k in names})


def test_without_a_cap_one_message_per_peer_carries_every_tensor() -> None:
    state = reshard_state(*_rows(2, "a", "b", "c"), itemsize=4)
    assert state.buckets == 1 and state.bucket_of(0) == ("a", "b", "c")
    (m,) = state.messages(0)  # 3 tensors x 4 elements x 4 bytes
    assert (m.bucket, m.phase, m.source, m.dest, m.nbytes) == (0, 0, 0, 2, 48)
    assert [name for name, _ in m.items] == ["a", "b", "c"]
    assert [t.boxes for _, t in m.items] == [(((0, 2), (0, 2)),)] * 3
    (got,) = state.messages(2)
    assert (got.source, got.dest, got.nbytes) == (0, 2, 48)
    assert state.peak_extra(0) == state.peak_extra(3) == 48


def test_a_cap_cuts_the_state_greedily_in_its_order() -> None:
    state = reshard_state(*_rows(2, "a", "b", "c"), itemsize=4, cap=32)  # 16 B a tensor
    assert state.buckets == 2 and repr(state) == "StateReshard(3 tensors, 2 buckets, cap=32)"
    assert (state.bucket_of(0), state.bucket_of(1)) == (("a", "b"), ("c",))
    assert [(m.bucket, m.nbytes) for m in state.messages(1)] == [(0, 32), (1, 16)]
    assert state.peak_extra(1) == 32
    assert reshard_state(*_rows(2, "a", "b", "c"), itemsize=4, cap=16).buckets == 3


def test_the_rule_never_reorders_tensors_to_fill_a_bucket() -> None:
    """16 B, 48 B, 16 B per rank under a cap of 48: a and c would fit together, but the
    buckets keep the state's order: [a], [b], [c]."""
    src, dst = _rows(2, "a", "c")
    big_src, big_dst = _rows(6, "b")
    state = reshard_state({"a": src["a"], "b": big_src["b"], "c": src["c"]},
                          {"a": dst["a"], "b": big_dst["b"], "c": dst["c"]}, cap=48)
    assert [state.bucket_of(k) for k in range(state.buckets)] == [("a",), ("b",), ("c",)]


def test_the_cap_holds_per_rank_so_tensors_on_other_ranks_share_a_bucket() -> None:
    """x moves rank 0 -> 2, y rank 1 -> 3, 16 B each: no rank holds both, one bucket."""
    one = {r: MeshView.from_ranks([r], ("tp",)) for r in range(4)}
    state = reshard_state(
        {"x": Sharding(one[0], (Replicate(),), (4,)), "y": Sharding(one[1], (Replicate(),), (4,))},
        {"x": Sharding(one[2], (Replicate(),), (4,)), "y": Sharding(one[3], (Replicate(),), (4,))},
        cap=16)
    assert state.buckets == 1 and state.peak_extra(0) == state.peak_extra(3) == 16


def test_a_tensor_over_the_cap_alone_is_refused_naming_it_the_rank_its_bytes_and_the_cap(
        ) -> None:
    with pytest.raises(ShardingError, match=r"'a' alone needs 16 bytes .* rank 0, over the "
                                            r"cap of 15 bytes"):
        reshard_state(*_rows(2, "a", "b"), cap=15)


def test_states_whose_names_differ_are_refused_naming_the_names() -> None:
    src, dst = _rows(2, "a", "b", "c")
    del dst["b"]
    dst["d"] = src["a"]
    with pytest.raises(ShardingError, match=r"only in src \['b'\], only in dst \['d'\]"):
        reshard_state(src, dst)


@pytest.mark.parametrize("bad", [[("a", 1)], {"a": "not a sharding"}])
def test_anything_but_two_mappings_of_shardings_is_a_type_error(bad: object) -> None:
    src, _ = _rows(2, "a")
    with pytest.raises(MeshTypeError, match="reshard_state's dst"):
        reshard_state(src, bad)  # type: ignore[arg-type]  # the refusal under test


def test_a_bucket_outside_the_state_is_refused_naming_the_valid_ones() -> None:
    state = reshard_state(*_rows(2, "a", "b"), cap=16)
    with pytest.raises(ShardingError, match=r"bucket 2 is not one of this state's 2 \(0 to 1\)"):
        state.bucket_of(2)


def test_a_cap_that_is_not_a_positive_int_is_refused() -> None:
    with pytest.raises(ShardingError, match="cap is bytes per rank"):
        reshard_state(*_rows(2, "a"), cap=0)


def test_item_sizes_per_tensor_size_its_messages_and_must_name_every_tensor() -> None:
    state = reshard_state(*_rows(2, "a", "b"), itemsize={"a": 2, "b": 8})
    assert [m.nbytes for m in state.messages(0)] == [4 * 2 + 4 * 8]
    with pytest.raises(ShardingError, match=r"no item size for \['b'\]"):
        reshard_state(*_rows(2, "a", "b"), itemsize={"a": 2})


def test_plans_are_each_tensors_reshard_in_the_state_order() -> None:
    src, dst = _rows(2, "z", "a")
    state = reshard_state(src, dst)
    assert list(state.plans) == ["z", "a"]
    assert state.plans["a"] is reshard(src["a"], dst["a"])  # equal arguments, one plan


def test_a_state_plan_built_from_plans_checks_them() -> None:
    plan = reshard(*(s["a"] for s in _rows(2, "a")))
    assert StateReshard((("a", plan),)).buckets == 1
    assert StateReshard(()).buckets == 0 and StateReshard(()).messages(0) == ()
    with pytest.raises(MeshTypeError):
        StateReshard((("a", "plan"),))
    with pytest.raises(ShardingError, match="each tensor once"):
        StateReshard((("a", plan), ("a", plan)))


def test_the_digest_covers_the_buckets() -> None:
    one = reshard_state(*_rows(2, "a", "b"), itemsize=4)
    assert one.digest == reshard_state(*_rows(2, "a", "b"), itemsize=4, cap=32).digest
    assert one.digest != reshard_state(*_rows(2, "a", "b"), itemsize=4, cap=16).digest


def test_reduced_parts_travel_in_a_second_phase_of_their_bucket() -> None:
    """A Partial("sum") source over 4 ranks replicated on 4 others: whichever way the plan
    reduces it, each receiver gets its elements; where sums happen on the way (the plan
    says so), the reduced parts are phase 1."""
    src = Sharding(MeshView.from_ranks([0, 1, 2, 3], ("d",)), (Partial("sum"),), (8,))
    dst = Sharding(MeshView.from_ranks([4, 5, 6, 7], ("d",)), (Replicate(),), (8,))
    state = reshard_state({"p": src}, {"p": dst})
    plan = state.plans["p"]
    got = [m for m in state.messages(4) if m.dest == 4]
    assert sum(m.nbytes for m in got) == 4 * sum(t.elements for t in plan.receives(4))
    staged = plan.partial != "sum at destination"
    assert {m.phase for m in got} == ({1} if staged else {0})
    assert all(isinstance(m, Message) for m in got)
