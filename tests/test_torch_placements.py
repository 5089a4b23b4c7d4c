"""torch DTensor's placements as meshlayout's and back (``backend.from_torch_placements``,
``backend.to_torch_placements``): one to one, and the torch placements without an
equivalent refused by name."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import mesh
from backend import BackendConfigError, from_torch_placements, to_torch_placements

TORCH = [Shard(0), Shard(3), _StridedShard(1, split_factor=4), Replicate(),
         *[Partial(op) for op in mesh.REDUCE_OPS]]
OURS = [mesh.Shard(0), mesh.Shard(3), mesh.StridedShard(1, 4), mesh.Replicate(),
        *[mesh.Partial(op) for op in mesh.REDUCE_OPS]]


def test_each_torch_placement_has_its_meshlayout_twin() -> None:
    assert from_torch_placements(TORCH) == tuple(OURS)


def test_the_round_trip_gives_torchs_placements_back() -> None:
    assert to_torch_placements(from_torch_placements(TORCH)) == tuple(TORCH)


def test_a_shardings_placements_convert_to_torchs() -> None:
    s = mesh.Sharding(mesh.MeshView.from_shape((2, 2), ("dp", "tp")),
                      (mesh.StridedShard(0, 2), mesh.Shard(0)), (8, 4))
    assert to_torch_placements(s) == (_StridedShard(0, split_factor=2), Shard(0))


@pytest.mark.parametrize("bad", [Partial("product"), "Shard(0)", None])
def test_placements_without_a_twin_are_refused_by_name(bad: object) -> None:
    with pytest.raises(BackendConfigError, match=r"placements\[1\]"):
        from_torch_placements([Shard(0), bad])
    with pytest.raises(BackendConfigError, match=r"placements\[0\]"):
        to_torch_placements([bad])
