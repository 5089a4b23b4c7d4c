"""A worker of ``tests/test_check_spmd_torch_model.py``: sets up torch's own per-edge pipeline
communicators (torch 2.15, ``pipelining/_p2p.py``) on Gloo for the stages named by MODE
(``"0,1,2,3,0,1,2,3"``), as a schedule's init does with ``pipeline_per_edge_p2p`` on,
counting its ``split_group`` calls, and writes ``OUT/rank<r>.json``: ``splits`` (the calls'
``split_ranks``, in order) and ``edges`` (the directed edges of the groups this rank got)."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gloo_launch import start_together, write_report


def main() -> None:
    stages, out = tuple(int(s) for s in sys.argv[1].split(",")), sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start_together(out, rank, world)
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import _p2p

    dist.init_process_group("gloo")
    splits: list[Any] = []
    split_group = dist.split_group

    def counted(*args: Any, **kwargs: Any) -> Any:
        splits.append(kwargs["split_ranks"])
        return split_group(*args, **kwargs)

    dist.split_group = counted
    cpu = torch.device("cpu")
    groups, rounds = _p2p._build_p2p_edge_groups(None, dict(enumerate(stages)), cpu)
    _p2p._preconnect_p2p_edge_groups(dist.group.WORLD, groups, rounds, cpu)  # they work
    write_report(out, rank, {"splits": splits, "edges": sorted(groups),
                             "members": [dist.get_process_group_ranks(g)
                                         for _, g in sorted(groups.items())]})
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
