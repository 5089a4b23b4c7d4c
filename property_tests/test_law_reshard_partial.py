"""THE LAW of a reshard plan with a :class:`~mesh.Partial` source: it moves exactly the
fewest elements of the three ways to reduce it, and no more than summing at each
destination; and where the sums happen on the way, the plan is exact.

For random pairs of shardings (``sharding_cases.random_pair``: views up to 5-D over
shuffled universes, the same, disjoint or overlapping ones; tensors up to 4-D, uneven;
the source partial over one reduction, the destination not partial):

    elements_moved == min(A, C)  <=  A

where, over element maps from torch's own ``_split_tensor`` (never from the code under
test), with ``p`` partial coordinates and ``R_e`` the destination ranks needing element
``e``: ``A = Σ_e Σ_{r ∈ R_e} #(contributions of e that r does not hold)`` (sum at the
destination) and ``C = Σ_e (p - 1) + |R_e| - [a holder of e is in R_e]`` (reduce at one
holder, then send; reduce-scatter then gather moves at least as much, ``tests/
staged_law.py``).  A staged plan also satisfies ``staged_law.check_staged`` (every reduced
element combines each contribution once, every needed element arrives once from a rank
that reduced it, the totals agree), and ``Reshard.apply`` gives every destination rank
the full tensor sliced by torch (allclose: sums are reordered).
"""

from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sharding_cases import random_pair, torch_holdings
from staged_law import STAGED, check_staged, law_bytes, universe

from mesh import Sharding, reshard


def _partial_pair(seed: int) -> tuple[Sharding, Sharding]:
    rng = random.Random(seed)
    while True:
        src, dst = random_pair(rng)
        if src.partial_dims and math.prod(src.view.shape) * 2 <= 64:
            return src, dst


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_partial_source_moves_the_fewest_of_the_three_ways_and_arrives_right(
        seed: int) -> None:
    src, dst = _partial_pair(seed)
    plan = reshard(src, dst)
    a, c = law_bytes(plan)
    assert plan.elements_moved == min(a, c) <= a, (plan, plan.partial, plan.elements_moved, a, c)
    if plan.partial in STAGED:
        problems = check_staged(plan)
        assert not problems, (plan, problems[:5])
    rng = random.Random(seed)
    full = np.array([rng.randint(-50, 50) for _ in range(math.prod(src.shape))],
                    dtype=np.float64).reshape(src.shape)
    out = plan.apply({s: src.local(full, s) for s in universe(src)})
    for r in universe(dst):
        c_r = dst.view.coordinate(r)
        assert c_r is not None
        want = full.reshape(-1)[torch_holdings(dst, c_r).numpy()]
        assert out[r].shape == want.shape and np.allclose(out[r], want), (plan, r)
