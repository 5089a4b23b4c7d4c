"""Plans' per-rank queries keep a bounded memo (issue 44, item 6): asking every rank of a
plan holds at most :data:`mesh._tensor._reshard.MEMO_WEIGHT` ranks in the memo all plans
share, whatever the order, and what is forgotten is computed again to the same answer.  At
2**24 ranks, each query on a new tile used to keep about 73 MiB more."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh import MeshView, Partial, Shard, Sharding, Topology
from mesh._tensor import _reshard
from mesh._tensor._reshard import Reshard

VIEW = MeshView.from_shape((8, 4), ("dp", "tp"))  # ranks 0-31
OTHER = MeshView.from_ranks(list(range(16, 48)), ("x",))  # overlapping: ranks 16-47
SRC = Sharding(VIEW, (Partial(), Shard(0)), (32, 6))
DST = Sharding(OTHER, (Shard(0),), (32, 6))
TOPOLOGY = Topology(48, 4, hosts_per_domain=2)


def _answers(plan: Reshard, order: list[int]) -> dict[int, object]:
    return {r: (plan.receives(r), plan.sends(r), plan.keeps(r)) for r in order}


@settings(max_examples=20, deadline=None)
@given(order=st.permutations(list(range(48))), weight=st.integers(1, 40))
def test_a_small_memo_gives_the_answers_of_a_full_one(order: list[int], weight: int) -> None:
    """Law: with a memo of any weight, in any order of queries, every rank's receives,
    sends and keeps equal those of a plan under the full memo, and the memo never holds
    more than its weight."""
    full = _answers(Reshard(SRC, DST, TOPOLOGY), sorted(order))
    saved = _reshard.MEMO_WEIGHT, _reshard._MEMO
    _reshard.MEMO_WEIGHT, _reshard._MEMO = weight, _reshard._Memo()
    try:
        plans = (Reshard(SRC, DST, TOPOLOGY), Reshard(SRC, DST, TOPOLOGY))  # share the memo
        small = {}
        for r in order:
            small[r], again = (_answers(p, [r])[r] for p in plans)
            assert again == small[r] and _reshard._MEMO.weight <= weight
    finally:
        _reshard.MEMO_WEIGHT, _reshard._MEMO = saved
    assert small == full


_QUERIES = textwrap.dedent("""
    import sys
    from mesh import MeshView, Replicate, Shard, Sharding, reshard
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    view = MeshView.from_shape((2**20, 16), ("dp", "tp"))  # 2**24 ranks
    plan = reshard(Sharding(view, (Replicate(), Shard(0)), (1 << 20,)),
                   Sharding(view, (Shard(0), Replicate()), (1 << 20,)))
    plan.receives(17)  # the plan's pieces, and one tile's 2**20 holders
    first = rss()
    for tile in range(1, 8):  # seven more tiles' holders
        plan.receives(tile * 2**20 + tile)
    print(rss() - first)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/statm")
def test_queries_on_new_tiles_of_a_2_to_the_24_rank_plan_keep_bounded_memory() -> None:
    """Seven queries on new tiles, each listing its 2**20 holders: the memory held grows by
    less than the memo's bound allows (two tiles' holders), where it grew by about 500
    MiB (73 MiB a tile)."""
    run = subprocess.run([sys.executable, "-c", _QUERIES], capture_output=True, text=True,
                         timeout=600, check=True, cwd=Path(__file__).resolve().parents[1])
    assert float(run.stdout) < 200, run.stdout
