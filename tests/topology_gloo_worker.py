"""One process of a Gloo world on loopback, for ``tests/test_topology_gloo.py``: discovering
the machine while pretending to run on several hosts, and checking a plan against it.

Run as ``python tests/topology_gloo_worker.py discover OUT_DIR`` with torchrun's environment.
Every process is really on this one machine; each case hands ``discover_topology`` the
record the rank would read on the host it pretends to be on (:data:`PRETEND`).  The worker
writes what it observed to ``OUT_DIR/rank<r>.json`` and asserts nothing itself.
"""

from __future__ import annotations

import sys
from typing import Any

from gloo_launch import write_report

#: Where each rank of a world of 8 pretends to run: (hostname, local rank, nvlink domain,
#: slurm address, slurm pattern).
PRETEND: dict[str, Any] = {
    "2 hosts of 4": lambda r: (f"node{r // 4}", r % 4, None, None, None),
    "4 hosts of 2 in 2 NVLink domains": lambda r: (f"node{r // 2}", r % 2, f"{r // 4:032x}/7",
                                                   None, None),
    "hosts of 3 and 5": lambda r: ("a" if r < 3 else "b", r if r < 3 else r - 3, None, None,
                                   None),
    "ranks dealt round-robin to 2 hosts": lambda r: (f"n{r % 2}", r // 2, None, None, None),
    "Slurm blocks of 2 hosts": lambda r: (f"gpu{r // 2:02d}", r % 2, None,
                                          f"b{r // 4}.gpu{r // 2:02d}", "block.node"),
}


def _discover(out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from counting_store import CountingStore

    from backend import (
        DiscoveryError,
        DiscoveryRecord,
        ExpectationError,
        GlooBackend,
        bind,
        discover_topology,
    )
    from backend._c10d._discover import _CALLS, gather
    from backend._c10d._discovery_record import Answer
    from backend._c10d._gather import namespace
    from mesh import MeshView, Topology

    backend = GlooBackend.from_env(timeout=timedelta(seconds=30))
    rank = backend.rank
    out: dict[str, Any] = {"rank": rank, "found": {}}
    for case, where in PRETEND.items():
        host, local, nvlink, addr, pattern = where(rank)
        record = DiscoveryRecord.of(host, local_rank=local, nvlink_domain=nvlink,
                                    slurm_topology_addr=addr, slurm_topology_pattern=pattern)
        out["found"][case] = discover_topology(backend, record=record, timeout=30).to_dict()
    try:  # every rank says it is device 0 of host x
        discover_topology(backend, record=DiscoveryRecord.of("x", local_rank=0), timeout=30)
        out["one device"] = "no error"
    except DiscoveryError as e:
        out["one device"] = str(e)
    # the real machine: every rank on this host, LOCAL_RANK = RANK (gloo_launch sets it)
    real = discover_topology(backend, timeout=30)
    out["real"] = real.to_dict()
    out["real cached"] = discover_topology(backend) is real
    # the same gather on the real store, each rank's calls counted
    counted = CountingStore(dist.distributed_c10d._get_default_store())
    record = DiscoveryRecord.of(f"node{rank // 4}", local_rank=rank % 4)
    gather(counted, rank, backend.world_size, record, 30.0, _CALLS.take()).run()
    out["calls"] = dict(counted.calls)
    # values planted under the next call's keys before it (rank 0 plants, then a barrier):
    # every rank must end alike, with the same typed error
    forged = Topology.from_hosts(["node0"] * 8).to_dict()
    # a non-number at the counter (issue 44, item 3): on TCPStore the add that meets it
    # closes the connection it runs on, so the later cases and the groups after them show
    # whether the default store still works
    planted = {"forged answer": ("answer", Answer(namespace(_CALLS.upcoming), 8, forged,
                                                  None, "0123456789abcdef").encode()),
               "junk counter": ("n", b"junk"),
               "junk run record": ("runs", b"junk\n"),
               "stale counter": ("n", b"3")}
    out["planted"] = {}
    for case, (key, value) in planted.items():
        if rank == 0:
            dist.distributed_c10d._get_default_store().set(
                f"{namespace(_CALLS.upcoming)}/{key}", value)
        dist.barrier()
        try:
            found = discover_topology(backend, timeout=30, record=DiscoveryRecord.of(
                f"node{rank // 4}", local_rank=rank % 4))
            out["planted"][case] = found.to_dict()
        except DiscoveryError as e:
            out["planted"][case] = f"DiscoveryError: {e}"
    everyone = dist.new_group(list(range(8)))  # torch's own use of the default store
    t = torch.tensor([1])
    dist.all_reduce(t, group=everyone)
    out["new_group after plants"] = int(t.item())
    # a plan checked against the pretend machine of 2 hosts: tp = 8 cannot stay inside one
    two = Topology.from_dict(out["found"]["2 hosts of 4"])
    before = len(backend.created)
    try:
        bind(MeshView.from_shape(8, ("tp",)), backend, topology=two, expect_intra_host=("tp",))
        out["expectation"] = "no error"
    except ExpectationError as e:
        out["expectation"] = {"message": str(e), "dim": e.dim, "group": list(e.group),
                              "spans": list(e.spans), "level": e.level}
    out["created before the error"] = len(backend.created) - before
    # a plan that holds: bound, then used (every rank takes part)
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), backend, topology=two,
                expect_intra_host=("tp",), expect_intra_domain=("tp",))
    t = torch.tensor([rank])
    dist.all_reduce(t, group=mesh.get_group("tp"))
    out["tp sum"] = int(t.item())
    # expectations checked against the real machine, discovered at bind (one host: all hold)
    bind(MeshView.from_shape((2, 4), ("dp", "tp")), backend, expect_intra_host=("dp", "tp"))
    out["real bind"] = "ok"
    write_report(out_dir, rank, out)
    backend.shutdown()


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], sys.argv[2]
    assert mode == "discover", mode
    _discover(out_dir)
