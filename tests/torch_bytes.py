"""Bytes torch's own collectives send, counted as they run: a dispatch mode that sees every
functional collective DTensor issues (``torch.ops._c10d_functional``) and prices it as the
ring algorithms move data, per rank (summed over ranks, the total):

- ``all_reduce`` of ``S`` bytes over ``p`` ranks: ``2 (p - 1) / p · S`` (reduce-scatter,
  then all-gather);
- ``all_gather_into_tensor`` of ``S`` bytes each: ``(p - 1) · S``;
- ``reduce_scatter_tensor`` of ``S`` bytes: ``(p - 1) / p · S``;
- ``all_to_all_single`` of ``S`` bytes: ``S`` less this rank's own split.

On the issue's case, ``(Shard(0), Partial) -> (Replicate, Replicate)`` of a 7 x 5 float32
tensor over (2, 4), it gives torch's 1,480 B (an all-reduce of 80 or 60 B over 4 ranks,
then an all-gather of 80 B, padded, over 2).
"""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["TorchBytes"]


class TorchBytes(TorchDispatchMode):
    """``with TorchBytes() as count: ...``; then ``count.sent`` (bytes this rank sent) and
    ``count.ops`` (each collective: name, group size, elements)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0.0
        self.ops: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        import torch
        import torch.distributed as dist

        f = torch.ops._c10d_functional
        pk = func._overloadpacket
        if pk is f.all_reduce:
            t, p = args[0], _size(args[2])
            self._add("all_reduce", p, t, 2 * (p - 1) / p)
        elif pk is f.all_gather_into_tensor:
            t, p = args[0], int(args[1])
            self._add("all_gather", p, t, p - 1)
        elif pk is f.reduce_scatter_tensor:
            t, p = args[0], int(args[2])
            self._add("reduce_scatter", p, t, (p - 1) / p)
        elif pk is f.all_to_all_single:
            t, splits, group = args[0], args[2], args[3]
            pg = dist.distributed_c10d._resolve_process_group(group)
            row = t.numel() // max(1, t.shape[0]) if t.dim() else 1
            own = splits[pg.rank()] * row if splits else t.numel() // pg.size()
            self._add("all_to_all", pg.size(), t, (t.numel() - own) / max(1, t.numel()))
        return func(*args, **(kwargs or {}))

    def _add(self, name: str, p: int, t: Any, factor: float) -> None:
        self.sent += factor * t.numel() * t.element_size()
        self.ops.append((name, p, t.numel()))


def _size(group: Any) -> int:
    import torch.distributed as dist

    return int(dist.distributed_c10d._resolve_process_group(group).size())
