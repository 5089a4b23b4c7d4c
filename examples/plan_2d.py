"""A (dp, tp) plan on CPU with Gloo.

Run with:  torchrun --nproc-per-node 4 examples/plan_2d.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from backend import GlooBackend, init_device_mesh


def main() -> None:
    backend = GlooBackend.from_env()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    rank = mesh.get_rank()
    lines = [f"rank {rank}: coordinate {mesh.get_coordinate()}"]
    for dim in mesh.mesh_dim_names:
        group = mesh.get_group(dim)
        value = torch.tensor([rank])
        dist.all_reduce(value, group=group)
        members = dist.get_process_group_ranks(group)
        lines.append(f"  {dim}: group {members}, all_reduce(rank) = {value.item()}")
    # Print in rank order so the output reads the same on every run.
    for r in range(mesh.size()):
        if r == rank:
            print("\n".join(lines), flush=True)
        dist.barrier()
    backend.shutdown()


if __name__ == "__main__":
    main()
