"""``mesh.Sharding`` against torch DTensor's own arithmetic, on 10,000 random shardings.

The law: for every rank of a sharding's view, ``local_shape`` and ``global_offset`` equal
torch's ``_compute_local_shape_and_global_offset(shape, view.shape, coordinate,
placements)``, and ``local(full, rank)`` equals the full tensor cut by torch's
``Placement._split_tensor`` left to right over the rank's coordinate (what
``distribute_tensor`` gives; a ``Partial("sum")`` dim divides by its size).  Views are up to
5-D over explicit, shuffled universes (some sub-views with several instances, some
flattened), tensors up to 4-D with sizes 0-9, placements ``Shard``, ``StridedShard``
(split factors 1-3), ``Replicate`` and ``Partial``.  Seeded, so CI and a local run check
the same cases.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from sharding_cases import random_sharding, random_view, torch_holdings, torch_placements

from mesh import MeshView, Partial, Replicate, Shard, Sharding, StridedShard

torch = pytest.importorskip("torch")
from torch.distributed.tensor._utils import (  # noqa: E402
    _compute_local_shape_and_global_offset,
)

CASES = 10_000
RANKS_PER_CASE = 3


def _ranks(s: Sharding, rng: random.Random) -> list[int]:
    universe = s.view.ranks.take(range(s.view.ranks.size))
    return rng.sample(universe, min(RANKS_PER_CASE, len(universe)))


def test_local_shapes_offsets_and_blocks_equal_torchs_on_random_shardings() -> None:
    rng = random.Random(20261127)
    wrong: list[str] = []
    checked = 0
    for _ in range(CASES):
        s = random_sharding(rng, random_view(rng))
        full = np.arange(int(np.prod(s.shape)), dtype=np.float64).reshape(s.shape)
        for r in _ranks(s, rng):
            c = s.view.coordinate(r)
            assert c is not None
            shape, offset = _compute_local_shape_and_global_offset(
                s.shape, s.view.shape, list(c), torch_placements(s))
            want = torch_holdings(s, c).numpy().astype(np.float64)
            for p, n in zip(s.placements, s.view.shape):
                if isinstance(p, Partial) and p.op == "sum":
                    want = want / n
            got = s.local(full, r)
            checked += 1
            if (s.local_shape(r), s.global_offset(r)) != (tuple(shape), tuple(offset)):
                wrong.append(f"{s!r} rank {r} at {c}: ours {s.local_shape(r)}, "
                             f"{s.global_offset(r)}; torch's {tuple(shape)}, {tuple(offset)}")
            elif got.shape != want.shape or not np.array_equal(got, want):
                wrong.append(f"{s!r} rank {r} at {c}: local block differs")
    assert checked >= CASES
    assert not wrong, f"{len(wrong)} of {checked} differ:\n" + "\n".join(wrong[:10])


def test_fsdp2_over_tp_is_torchs_worked_example() -> None:
    """torch's own comment in ``_compute_local_shape_and_global_offset``: ``arange(8)`` with
    ``(Shard(0), _StridedShard(0, split_factor=2))`` over a (2, 2) mesh gives the
    coordinates ``[0, 2]``, ``[1, 3]``, ``[4, 6]``, ``[5, 7]``."""
    s = Sharding(MeshView.from_shape((2, 2), ("a", "b")), (Shard(0), StridedShard(0, 2)), (8,))
    full = np.arange(8)
    assert [s.local(full, r).tolist() for r in range(4)] == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_uneven_shards_follow_torch_chunk() -> None:
    """``torch.arange(8)`` into 3: ``[0, 1, 2]``, ``[3, 4, 5]``, ``[6, 7]``; 5 into 4 leaves
    the last shard empty, with torch's offset (the dim's size)."""
    s = Sharding(MeshView.from_shape((3,), ("tp",)), (Shard(0),), (8,))
    assert [s.local(np.arange(8), r).tolist() for r in range(3)] == [[0, 1, 2], [3, 4, 5],
                                                                     [6, 7]]
    e = Sharding(MeshView.from_shape((4,), ("tp",)), (Shard(0),), (5,))
    assert [e.local_shape(r) for r in range(4)] == [(2,), (2,), (1,), (0,)]
    assert e.global_offset(3) == (5,)


def test_replicate_keeps_the_whole_tensor_on_every_rank() -> None:
    s = Sharding(MeshView.from_shape((2, 2), ("dp", "tp")), (Replicate(), Shard(1)), (3, 4))
    full = np.arange(12).reshape(3, 4)
    assert s.local(full, 0).tolist() == s.local(full, 2).tolist() == [[0, 1], [4, 5], [8, 9]]
