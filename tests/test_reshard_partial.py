"""``mesh.reshard`` with :class:`~mesh.Partial` destinations (issue 46).

What torch does, checked here against torch itself: ``DTensor.redistribute`` (torch 2.13)
accepts a ``Partial`` target on a mesh dim only where the source has the very same
``Partial`` on that dim (the partial values stay where they are); its internal
``Partial._partition_value`` turns ``Replicate()`` into ``Partial`` (``"sum"``: each rank
holds ``v / n``; ``"avg"``, ``"max"``, ``"min"``: ``v``), which its public call refuses
("redistributing to Partial is for internal use only").  ``reshard`` accepts both, on
the source dim with the destination dim's groups, and refuses every other Partial
destination with a :class:`~mesh.ShardingError` naming the placement and the valid ones.
Expected values are written out by hand from the full tensor (never from the code under
test).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mesh import MeshView, Partial, Replicate, Shard, Sharding, ShardingError, StridedShard, reshard

V = MeshView.from_shape((2, 4), ("dp", "tp"))  # ranks 0-7; tp groups 0-3 and 4-7
SHAPE = (7, 5)
FULL = np.arange(35.0).reshape(SHAPE)
R, P = Replicate(), Partial()


def _plan(src: tuple, dst: tuple, view: MeshView = V):  # type: ignore[no-untyped-def]
    return reshard(Sharding(V, src, SHAPE), Sharding(view, dst, SHAPE))


def _rows(rank: int) -> slice:
    """Rank's rows under Shard(0) over dp: 7 rows as torch.chunk cuts them, 4 then 3."""
    return slice(0, 4) if rank < 4 else slice(4, 7)


def test_replicate_to_partial_sum_holds_the_value_over_the_dim_size_and_moves_nothing() -> None:
    plan = _plan((R, R), (R, P))
    out = plan.apply({r: FULL.copy() for r in range(8)})
    assert plan.bytes_moved == 0 and plan.divisor == 4
    assert all(np.array_equal(out[r], FULL / 4) for r in range(8))


def test_replicate_to_partial_sum_on_both_dims_divides_by_both_sizes() -> None:
    out = _plan((R, R), (P, P)).apply({r: FULL.copy() for r in range(8)})
    assert all(np.array_equal(out[r], FULL / 8) for r in range(8))


@pytest.mark.parametrize("op", ["avg", "max", "min"])
def test_replicate_to_partial_avg_max_min_holds_the_value_itself(op: str) -> None:
    plan = _plan((R, R), (R, Partial(op)))
    out = plan.apply({r: FULL.copy() for r in range(8)})
    assert plan.divisor == 1 and all(np.array_equal(out[r], FULL) for r in range(8))


def test_a_kept_partial_dim_keeps_each_ranks_own_contribution() -> None:
    """(Shard(0), Partial) -> (Replicate, Partial): rank (d, t) holds contribution t of its
    rows; afterwards, contribution t of every row (torch: an all-gather over dp only)."""
    contrib = [FULL * (t + 1) for t in range(4)]  # distinct contributions, summing to 10 x
    shards = {r: contrib[r % 4][_rows(r)] for r in range(8)}
    plan = _plan((Shard(0), P), (R, P))
    out = plan.apply(shards)
    assert all(np.array_equal(out[r], contrib[r % 4]) for r in range(8))
    assert all(t.contribution == (r % 4,) for r in range(8) for t in plan.receives(r))
    assert plan.bytes_moved == 4 * (3 * 5 + 4 * 5) * 4  # each rank gets the other dp half


def test_a_kept_partial_dim_reduces_the_other_partial_dims() -> None:
    """(Partial, Partial) -> (Replicate, Partial): summed over dp, kept over tp."""
    contrib = {(d, t): FULL * (10 * d + t) for d in range(2) for t in range(4)}
    shards = {r: contrib[divmod(r, 4)] for r in range(8)}
    out = _plan((P, P), (R, P)).apply(shards)
    assert all(np.array_equal(out[r], FULL * (10 + 2 * (r % 4))) for r in range(8))


def test_partial_source_to_a_new_partial_dim_reduces_then_partitions() -> None:
    """(Partial, Replicate) -> (Replicate, Partial): the sum over dp, then / 4 over tp."""
    shards = {r: FULL * (1 + r // 4) for r in range(8)}  # 1 x and 2 x: summing to 3 x
    out = _plan((P, R), (R, P)).apply(shards)
    assert all(np.allclose(out[r], 3 * FULL / 4) for r in range(8))


def test_a_partial_dim_on_a_transposed_view_is_matched_by_its_groups() -> None:
    contrib = [FULL * (t + 1) for t in range(4)]
    plan = _plan((R, P), (P, R), V.transpose("tp", "dp"))
    out = plan.apply({r: contrib[r % 4] for r in range(8)})
    assert plan.bytes_moved == 0 and all(np.array_equal(out[r], contrib[r % 4])
                                         for r in range(8))


@pytest.mark.parametrize(("src", "dst", "words"), [
    ((Shard(0), R), (P, R), ("Partial('sum') on view dim 'dp' from Shard(0)",
                             "Replicate() (partitioned) or Partial('sum') (kept)")),
    ((StridedShard(0, 2), R), (P, R), ("from StridedShard(0, split_factor=2)", "Replicate()")),
    ((Partial("max"), R), (P, R), ("from Partial('max')", "Partial('sum') (kept)")),
    ((R, R), (Partial("max"), P), ("several reductions ['max', 'sum']",)),
])
def test_other_partial_destinations_are_refused_naming_the_placement_and_valid_ones(
        src: tuple, dst: tuple, words: tuple[str, ...]) -> None:
    with pytest.raises(ShardingError) as e:
        _plan(src, dst)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_partial_destination_on_another_mesh_is_refused_naming_its_dim() -> None:
    other = MeshView.from_ranks([[8, 9], [10, 11]], ("a", "b"))
    with pytest.raises(ShardingError, match=r"Partial\('sum'\) on view dim 'b', which no source "
                       r"view dim matches .* valid there: Replicate\(\) or Partial\('sum'\)"):
        _plan((R, R), (R, P), other)


# ---- what torch accepts ------------------------------------------------------------------------
TORCH_CODES = ["S0", "S1", "R", "Psum", "Pmax", "SS0"]


def _ours(code: str):  # type: ignore[no-untyped-def]
    return {"S0": Shard(0), "S1": Shard(1), "R": R, "Psum": P, "Pmax": Partial("max"),
            "SS0": StridedShard(0, 2)}[code]


def _torchs(code: str):  # type: ignore[no-untyped-def]
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor.placement_types import _StridedShard

    return {"S0": TS(0), "S1": TS(1), "R": TR(), "Psum": TP("sum"), "Pmax": TP("max"),
            "SS0": _StridedShard(0, split_factor=2)}[code]


def test_every_partial_destination_torchs_redistribute_accepts_is_accepted() -> None:
    """On a (2, 2) mesh, every pair of placements with a Partial destination and one kind of
    reduction on each side: where torch's ``DTensor.redistribute`` accepts it, so does
    ``reshard``; what ``reshard`` accepts beyond it is exactly ``Replicate() -> Partial``
    (torch's ``_partition_value``), on some dim."""
    torch = pytest.importorskip("torch")
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    from backend import TorchFakeBackend, init_device_mesh

    tb = TorchFakeBackend(4, rank=1)
    try:
        tm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b")).to_torch()
        view = MeshView.from_shape((2, 2), ("a", "b"))
        shape = torch.Size((8, 4))
        torch_ok = ours_ok = beyond = 0
        wrong = []
        for src in itertools.product(TORCH_CODES, repeat=2):
            for dst in itertools.product(TORCH_CODES, repeat=2):
                ops = [{c for c in side if c.startswith("P")} for side in (src, dst)]
                if not any(ops[1]) or any(len(o) > 1 for o in ops):
                    continue
                placements = [_torchs(c) for c in src]
                local, _ = compute_local_shape_and_global_offset(shape, tm, placements)
                dt = DTensor.from_local(torch.zeros(local), tm, placements, run_check=False,
                                        shape=shape, stride=(4, 1))
                try:
                    dt.redistribute(tm, [_torchs(c) for c in dst])
                    theirs = True
                except RuntimeError:
                    theirs = False
                try:
                    reshard(Sharding(view, [_ours(c) for c in src], (8, 4)),
                            Sharding(view, [_ours(c) for c in dst], (8, 4)))
                    mine = True
                except ShardingError:
                    mine = False
                partition = any(d.startswith("P") and s == "R" for s, d in zip(src, dst))
                torch_ok += theirs
                ours_ok += mine
                if (theirs and not mine) or (mine and not theirs and not partition):
                    wrong.append((src, dst, theirs, mine))
                beyond += mine and not theirs
    finally:
        tb.shutdown()
    assert not wrong, wrong[:10]
    assert torch_ok > 50 and beyond > 50, (torch_ok, ours_ok, beyond)
