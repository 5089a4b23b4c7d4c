"""A finished plan answers each question once: its totals (``elements_moved``,
``tier_bytes``, ``busiest``, ``rounds``) are tallied once, each rank's ``sends``,
``receives``, ``keeps``, ``lost`` and ``reduces`` are made once and read after; and what a
plan keeps does not grow with the pairs it moves (its totals are four numbers, its pairs are
listed again by ``traffic()``)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from mesh import MeshView, Partial, Replicate, Shard, Sharding, Topology
from mesh._tensor import _reshard, _totals
from mesh._tensor._reshard import Reshard

TRAIN = MeshView.from_shape((4, 4), ("dp", "tp"))  # ranks 0-15
SERVE = MeshView.from_ranks([21, 16, 19, 18, 17, 20, 23, 22], ("tp",))  # out of order
TOPOLOGY = Topology(24, 3, hosts_per_domain=2)
CASES = [
    (Sharding(TRAIN, (Replicate(), Shard(0)), (16, 8)), Sharding(SERVE, (Shard(1),), (16, 8))),
    (Sharding(TRAIN, (Shard(1), Shard(0)), (16, 8)), Sharding(SERVE, (Replicate(),), (16, 8))),
    (Sharding(TRAIN, (Partial(), Shard(0)), (16, 8)), Sharding(TRAIN, (Replicate(), Shard(1)),
                                                               (16, 8))),
]


def _read_all(plan: Reshard) -> tuple[object, ...]:
    return (plan.elements_moved, plan.bytes_moved, plan.tier_bytes, plan.busiest, plan.rounds)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_totals_are_tallied_once_however_often_read(case: int, monkeypatch) -> None:
    calls = []
    tally = _totals.tally
    monkeypatch.setattr(_totals, "tally", lambda *a: calls.append(1) or tally(*a))
    plan = Reshard(*CASES[case], TOPOLOGY)
    first = _read_all(plan)
    ways = len(calls)  # a partial source prices its three ways once each
    for _ in range(50):
        assert _read_all(plan) == first
    assert len(calls) == ways and ways in (1, 3)


@pytest.mark.parametrize("question", ["sends", "receives", "keeps", "lost", "reduces"])
def test_a_ranks_answer_is_made_once(question: str, monkeypatch) -> None:
    calls: list[int] = []
    make = getattr(Reshard, "_list_" + question)
    monkeypatch.setattr(Reshard, "_list_" + question,
                        lambda self, r: calls.append(r) or make(self, r))
    plan = Reshard(*CASES[2], TOPOLOGY)
    answers = [getattr(plan, question)(5) for _ in range(20)]
    assert calls == [5] and all(a == answers[0] for a in answers)


def test_the_busiest_rank_and_rounds_are_those_of_the_listed_pairs() -> None:
    """The totals against what ``traffic()``'s pairs give by hand (a plan in one phase)."""
    plan = Reshard(*CASES[1], TOPOLOGY, itemsize=2)
    pairs = plan.traffic()
    load: dict[int, list[int]] = {}
    for (s, d), n in pairs.items():
        load.setdefault(s, [0, 0])[0] += n
        load.setdefault(d, [0, 0])[1] += n
    top = max(max(v) for v in load.values())
    rank = min(r for r, v in load.items() if max(v) == top)
    degree = max(max(sum(1 for s, _ in pairs if s == r), sum(1 for _, d in pairs if d == r))
                 for r in load)
    assert plan.busiest == (rank, top * 2)
    assert plan.rounds == degree and plan.elements_moved == sum(pairs.values())


def _kept_bytes(src: Sharding, dst: Sharding) -> int:
    """What a plan keeps once its totals are read (the process's memo emptied)."""
    _reshard._MEMO.__init__()  # type: ignore[misc]
    gc.collect()
    tracemalloc.start()
    plan = Reshard(src, dst)
    assert plan.rounds > 0 and plan.busiest[1] > 0 and plan.tier_bytes["across"] > 0
    _reshard._MEMO.__init__()  # type: ignore[misc]
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del plan
    return kept


def test_what_a_plan_keeps_does_not_grow_with_its_pairs() -> None:
    """64 senders to 64 receivers: one pair each (Shard(0) -> Shard(0)) or every pair
    (Shard(0) -> Shard(1): 4,096 pairs); the plan keeps about as much either way."""
    a = MeshView.from_shape((64,), ("x",))
    b = MeshView.from_ranks(list(range(64, 128)), ("y",))
    src = Sharding(a, (Shard(0),), (64, 64))
    one = _kept_bytes(src, Sharding(b, (Shard(0),), (64, 64)))
    every = _kept_bytes(src, Sharding(b, (Shard(1),), (64, 64)))
    assert len(Reshard(src, Sharding(b, (Shard(1),), (64, 64))).traffic()) == 4096
    assert every < 1.5 * one + 4096, (one, every)


def test_the_memo_of_a_plan_grows_with_its_ranks_not_tiles_times_hosts() -> None:
    """32 tiles, 8 holders each, to 256 receivers on hosts of their own: each receiver looks
    up the holders of every tile on its host.  Kept per (tile, host) that is 8,192 entries;
    kept per tile (the holders by place), the memo holds about the ranks besides the cells."""
    src = Sharding(MeshView.from_shape((8, 32), ("dp", "x")), (Replicate(), Shard(0)), (32, 256))
    dst = Sharding(MeshView.from_ranks(list(range(256, 512)), ("y",)), (Shard(1),), (32, 256))
    _reshard._MEMO.__init__()  # type: ignore[misc]
    plan = Reshard(src, dst, Topology(512, 1))
    assert plan.elements_moved == 32 * 256 and plan.rounds == 32
    kept = {k[1]: 0 for k in _reshard._MEMO.kept}
    for key, (_, weight) in _reshard._MEMO.kept.items():
        kept[key[1]] += weight
    cells = kept.pop("dst cells")  # each receiver's 32 cells: what it is sent
    assert cells == 256 * 32 and sum(kept.values()) < 3 * 512, kept
