"""Random shardings for the tensor-wing tests: views up to 5-D over explicit, shuffled
universes (some with several instances, some flattened), tensors up to 4-D with sizes 0-9,
and one placement per view dim (``Shard``, ``StridedShard``, ``Replicate``, ``Partial``).

Also the independent oracle of who holds what: a rank's elements of the full tensor found
by torch's own ``Placement._split_tensor`` applied left to right over the rank's coordinate,
the element map a brute force compares plans against.
"""

from __future__ import annotations

import math
import random
from typing import Any

from mesh import MeshView, Partial, Replicate, Shard, Sharding, StridedShard

__all__ = ["pair_in_world", "random_pair", "random_sharding", "random_view", "torch_holdings",
           "torch_placements"]


def random_view(rng: random.Random, *, max_dims: int = 5, max_ranks: int = 64,
                base: int = 0) -> MeshView:
    """A view over an explicit universe of shuffled ranks from ``[base, base + 3·N)``."""
    shape: list[int] = []
    for _ in range(rng.randint(1, max_dims)):
        n = rng.choice([1, 2, 2, 3, 4])
        if math.prod(shape) * n <= max_ranks:
            shape.append(n)
    world = math.prod(shape)
    ranks = rng.sample(range(base, base + 3 * world), world)
    names = [f"d{i}" for i in range(len(shape))]
    rows: Any = ranks
    for n in reversed(shape[1:]):
        rows = [rows[i:i + n] for i in range(0, len(rows), n)]
    view = MeshView.from_ranks(rows, names)
    pick = rng.random()
    if pick < 0.3 and len(shape) > 1:  # a sub-view: several instances, maybe transposed
        k = rng.randint(1, len(shape) - 1)
        view = view[tuple(rng.sample(names, k))]
    elif pick < 0.45 and len(shape) > 2:  # a flattened pair of dims
        view = view.flatten(tuple(rng.sample(names, 2)), "f")
    return view


def random_sharding(rng: random.Random, view: MeshView, shape: tuple[int, ...] | None = None,
                    *, partial: bool = True) -> Sharding:
    if shape is None:
        shape = tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 4)))
    placements: list[Any] = []
    op = rng.choice(["sum", "avg", "max", "min"])  # one kind per sharding (reshard's rule)
    for _ in range(view.ndim):
        x = rng.random()
        if x < 0.45:
            placements.append(Shard(rng.randrange(len(shape))))
        elif x < 0.6:
            placements.append(StridedShard(rng.randrange(len(shape)), rng.randint(1, 3)))
        elif x < 0.9 or not partial:
            placements.append(Replicate())
        else:
            placements.append(Partial(op))
    return Sharding(view, placements, shape)


def random_pair(rng: random.Random) -> tuple[Sharding, Sharding]:
    """Two shardings of one shape: over the same universe, disjoint ones or overlapping
    ones (a third each); the destination is never partial."""
    src_view = random_view(rng)
    how = rng.random()
    if how < 1 / 3:
        dst_view = src_view
        if rng.random() < 0.5 and src_view.ndim > 1:
            dst_view = src_view.transpose(*reversed(src_view.names))
    elif how < 2 / 3:
        dst_view = random_view(rng, base=1000)
    else:
        dst_view = random_view(rng, base=max(0, min(src_view.ranks.take(
            range(src_view.ranks.size))) - 4))
    src = random_sharding(rng, src_view)
    return src, random_sharding(rng, dst_view, src.shape, partial=False)


def torch_placements(s: Sharding) -> list[Any]:
    """The sharding's placements as torch's."""
    from torch.distributed.tensor.placement_types import Partial as TPartial
    from torch.distributed.tensor.placement_types import Replicate as TReplicate
    from torch.distributed.tensor.placement_types import Shard as TShard
    from torch.distributed.tensor.placement_types import _StridedShard

    out: list[Any] = []
    for p in s.placements:
        if isinstance(p, StridedShard):
            out.append(_StridedShard(p.dim, split_factor=p.split_factor))
        elif isinstance(p, Shard):
            out.append(TShard(p.dim))
        elif isinstance(p, Replicate):
            out.append(TReplicate())
        else:
            out.append(TPartial(p.op))
    return out


def torch_holdings(s: Sharding, coordinate: tuple[int, ...]) -> Any:
    """The global flat indices a rank at ``coordinate`` holds, as a torch tensor of its local
    shape: ``arange(numel).reshape(shape)`` cut by torch's ``_split_tensor`` left to right."""
    import torch

    t = torch.arange(math.prod(s.shape), dtype=torch.int64).reshape(s.shape)
    for p, n, k in zip(torch_placements(s), s.view.shape, coordinate):
        if hasattr(p, "_split_tensor") and not p.is_partial() and not p.is_replicate():
            t = p._split_tensor(t, n, with_padding=False)[0][k]
    return t


def _view_on(rng: random.Random, ranks: list[int]) -> MeshView:
    """A view whose universe is ``ranks`` (shuffled), of up to 3 dims."""
    ranks = rng.sample(ranks, len(ranks))
    n = len(ranks)
    shape = [n]
    for f in (2, 2):
        if shape[-1] % f == 0 and shape[-1] > f and rng.random() < 0.6:
            shape[-1] //= f
            shape.append(f)
    rows: Any = ranks
    for k in reversed(shape[1:]):
        rows = [rows[i:i + k] for i in range(0, len(rows), k)]
    return MeshView.from_ranks(rows, [f"d{i}" for i in range(len(shape))])


def pair_in_world(rng: random.Random, world: int) -> tuple[Sharding, Sharding]:
    """Two shardings of one shape over subsets of ``range(world)``: the same ranks,
    disjoint ones or overlapping ones."""
    everyone = list(range(world))
    how = rng.random()
    if how < 1 / 3:
        a = b = rng.sample(everyone, rng.choice([2, 4, world]))
    elif how < 2 / 3:
        half = rng.sample(everyone, world)
        cut = rng.choice([2, 4, world // 2])
        a, b = half[:cut], half[cut:cut + rng.choice([1, 2, 4])]
        b = b or half[-1:]
    else:
        a = rng.sample(everyone, rng.choice([4, 6]))
        b = rng.sample(everyone, rng.choice([2, 4, 6]))
    src = random_sharding(rng, _view_on(rng, a))
    return src, random_sharding(rng, _view_on(rng, b), src.shape, partial=False)
