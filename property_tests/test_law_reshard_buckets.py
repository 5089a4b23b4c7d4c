"""THE LAW of a state's buckets (``mesh.reshard_state``): for random states of 1-6 tensors
over a world of 8 (``sharding_cases.pair_in_world``: the same, disjoint or overlapping
ranks; partial sources included; item sizes 1-8) and a random cap no smaller than the
largest tensor's buffers on one rank:

- every bucket respects the cap on every rank: the bytes of the messages a rank posts in
  one bucket (sends and receives) are at most ``cap``, and ``peak_extra`` is their most;
- every transfer of every tensor (each plan's ``sends`` and ``receives``, listed rank by
  rank over the world, never from the state plan) is in exactly one message of its sender
  and one of its receiver, in the bucket of its tensor;
- one message per peer, direction and phase in each bucket, its bytes its transfers';
- the buckets are the greedy rule's: the state's order kept, and the first tensor of each
  bucket would have taken the previous one past the cap on some rank;
- a cap below the largest tensor's buffers on one rank is a ``ShardingError`` naming it.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sharding_cases import pair_in_world

from mesh import Reshard, ShardingError, reshard_state

WORLD = 8


def _bytes(plan: Reshard) -> dict[int, int]:
    """Brute force: each rank's send and receive bytes of one plan, rank by rank."""
    out = {r: sum(t.elements for t in (*plan.sends(r), *plan.receives(r))) * plan.itemsize
           for r in range(WORLD)}
    return {r: n for r, n in out.items() if n}


def _state(seed: int) -> tuple[dict, dict, dict[str, int]]:  # type: ignore[type-arg]
    rng = random.Random(seed)
    src, dst, sizes = {}, {}, {}
    for i in range(rng.randint(1, 6)):
        name = f"t{rng.randint(0, 99)}_{i}"  # not in name order
        src[name], dst[name] = pair_in_world(rng, WORLD)
        sizes[name] = rng.choice([1, 2, 4, 8])
    return src, dst, sizes


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0, 1))
def test_every_bucket_respects_the_cap_and_every_transfer_is_in_one_message(
        seed: int, where: float) -> None:
    src, dst, sizes = _state(seed)
    loads = {n: _bytes(p) for n, p in reshard_state(src, dst, itemsize=sizes).named}
    largest = max((n for ld in loads.values() for n in ld.values()), default=0)
    total = max(sum(ld.get(r, 0) for ld in loads.values()) for r in range(WORLD))
    cap = max(1, largest + int(where * (total - largest)))
    state = reshard_state(src, dst, itemsize=sizes, cap=cap)
    names = [n for k in range(state.buckets) for n in state.bucket_of(k)]
    assert names == list(src)  # the state's order, every tensor once
    bucket = {n: k for k in range(state.buckets) for n in state.bucket_of(k)}
    posted: Counter[tuple[object, ...]] = Counter()
    for r in range(WORLD):
        held: dict[int, int] = defaultdict(int)
        keys = Counter()
        for m in state.messages(r):
            held[m.bucket] += m.nbytes
            keys[m.bucket, m.phase, m.source == r, m.dest if m.source == r else m.source] += 1
            assert m.nbytes == sum(t.elements * sizes[n] for n, t in m.items)
            assert r in (m.source, m.dest) and m.source != m.dest
            for n, t in m.items:
                assert bucket[n] == m.bucket and (t.source, t.dest) == (m.source, m.dest)
                posted[r, n, t] += 1
        assert max(held.values(), default=0) == state.peak_extra(r) <= cap, (r, held, cap)
        assert set(keys.values()) <= {1}, keys
    listed = Counter((r, n, t) for n, p in state.named for r in range(WORLD)
                     for t in (*p.sends(r), *p.receives(r)))
    assert posted == listed
    for k in range(1, state.buckets):  # greedy: the previous bucket could not take it
        first = state.bucket_of(k)[0]
        before = defaultdict(int)
        for n in state.bucket_of(k - 1):
            for r, b in loads[n].items():
                before[r] += b
        assert any(before[r] + b > cap for r, b in loads[first].items()), (k, cap)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_cap_below_the_largest_tensor_on_one_rank_is_refused_naming_it(seed: int) -> None:
    src, dst, sizes = _state(seed)
    loads = {n: _bytes(p) for n, p in reshard_state(src, dst, itemsize=sizes).named}
    largest = max((n for ld in loads.values() for n in ld.values()), default=0)
    if largest < 2:
        return
    name, bytes_at = next((n, ld) for n, ld in loads.items()
                          if max(ld.values(), default=0) == largest)
    rank = min(r for r, b in bytes_at.items() if b == largest)  # the first tensor over it
    with pytest.raises(ShardingError) as got:
        reshard_state(src, dst, itemsize=sizes, cap=largest - 1)
    assert (f"tensor {name!r} alone needs {largest:,} bytes of send and receive buffers on "
            f"rank {rank}, over the cap of {largest - 1:,} bytes") in str(got.value)
