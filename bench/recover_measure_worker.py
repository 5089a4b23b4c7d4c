"""A worker of ``bench/recover_gloo.py``: one process of a loopback Gloo job that measures
what ``mesh.Costs`` prices, or loses a rank and recovers with ``backend.apply_recovery``.

Run as ``python recover_gloo_worker.py MODE OUT_DIR`` by ``tests/gloo_launch.py`` (torchrun's
environment; ``launch_with_agent`` hosts the store and writes the ranks that die under
``agent/failed``).  The job: 8 processes, the plan (dp=3, tp=2) over ranks 0..5, ranks 6
and 7 a spare host, hosts of 2.  The state, of ``MIB`` MiB per tensor (float32, square):
``w`` (``(Replicate, Shard(0))``: a replica of every block), ``e`` (``(Shard(0), Shard(1))``:
every block on one rank only, so the failed rank's block is read from the checkpoint),
``b`` (``(Shard(0), Replicate)``).

Modes:

- ``calibrate``: the prices of this machine, each the slowest rank's time: a message of
  32 MiB and one of 4 bytes exchanged by the pair (0, 1) alone (link bandwidth and
  latency), then 32 MiB by the pairs (0, 1), (2, 3), (4, 5) at once (what all transfers
  share: on one machine its CPUs, ``shared_gbps``); rank 0 writing a block of ``MIB`` MiB
  anew (``copy_gbps``); the groups of one dim among ranks that made groups before
  (``reconfigure_s``: what a drop's rebind costs on torch 2.13) and of one joined by ranks 6
  and 7, which made none (``create_s``: a spare's); one rank's block of ``e`` (a third of
  its rows, half its columns: the box a trial reads of a lost rank) read from a DCP checkpoint
  by one rank (storage bandwidth); a rebind that leaves ranks 4 and 5 out (the meeting of
  the ranks still up and the end of the groups holding a lost rank: ``rebind_s``).
- ``trial``: ``VICTIM`` kills itself at step 2; every process still up decides with
  ``mesh.recover`` under ``COSTS`` (JSON of ``Costs.to_dict()``), takes the way labelled
  ``WAY``, and, after a store barrier of the ranks taking part, times ``apply_recovery`` and
  the creation of the new mesh's groups.  Reports the times, the way's predicted seconds and
  the best way's label.
- ``restart``: a job started afresh on the same plan (the spare host in the failed rank's
  place) that loads the whole state from the checkpoint: reports when it is ready (the wall
  clock), for the launcher to subtract its launch time.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gloo_launch import AGENT_FAILED, start_together, write_report

TIMEOUT = timedelta(seconds=10)
START = timedelta(seconds=120)
RANKS = [[0, 1], [2, 3], [4, 5]]
SPARES = [6, 7]
KILL_STEP = 2
PER_HOST = 2
EXCHANGE = 32 << 20
"""Bytes of the calibration's large message (the small one: 4)."""


def side() -> int:
    """The square tensors' side: ``MIB`` MiB of float32 each."""
    return int((float(os.environ.get("MIB", "16")) * 2**20 / 4) ** 0.5) // 6 * 6


def state_of(world: Any) -> dict[str, Any]:
    from mesh import Replicate, Shard, Sharding

    n = side()
    return {"w": Sharding(world, (Replicate(), Shard(0)), (n, n)),
            "e": Sharding(world, (Shard(0), Shard(1)), (n, n)),
            "b": Sharding(world, (Shard(0), Replicate()), (n, n))}


def plan(world: Any) -> dict[str, Any]:
    return {"world": world}


class Job:
    """This process in the job: the default group, the facade mesh over the plan, the
    state's local blocks (on the world's ranks) and the checkpoint's folder."""

    def __init__(self, out: str, *, agent: bool) -> None:
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint  # (a training job has it: not timed)

        from backend import GlooBackend, bind
        from mesh import MeshView

        self.rank, self.size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.out = out
        if not agent:
            start_together(out, self.rank, self.size)
        port = int(os.environ["MASTER_PORT"])
        self.store = dist.TCPStore("127.0.0.1", port, self.size, is_master=not agent and
                                   self.rank == 0, timeout=START)
        dist.init_process_group("gloo", store=self.store, rank=self.rank,
                                world_size=self.size, timeout=START)
        self.backend = GlooBackend(timeout=TIMEOUT)
        self.view = MeshView.from_ranks(RANKS, ["dp", "tp"])
        self.mesh = bind(self.view, self.backend)
        self.state = state_of(self.view)
        self.inside = self.view.coordinate(self.rank) is not None
        self.local = {n: torch.full(s.local_shape(self.rank), float(self.rank))
                      for n, s in self.state.items()} if self.inside else {}
        self.ckpt = os.environ["CKPT"]  # the bench run's one checkpoint

    def barrier(self, name: str, members: list[int]) -> float:
        """Meet ``members`` in the store; the wall clock when this rank leaves."""
        if self.store.add(f"barrier/{name}", 1) == len(members):
            self.store.set(f"barrier/{name}/go", "1")
        self.store.wait([f"barrier/{name}/go"], START)
        return time.time()

    def save(self) -> None:
        """The state saved with DCP by the world's ranks (once per bench run)."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.tensor import DTensor

        from backend import to_torch_placements

        if os.path.exists(os.path.join(self.ckpt, ".metadata")):
            return
        group = self.mesh._flatten("all").get_group()
        saved = {n: DTensor.from_local(self.local[n], self.mesh.to_torch(),
                                       to_torch_placements(s), shape=torch.Size(s.shape),
                                       stride=(s.shape[1], 1))
                 for n, s in self.state.items()}
        dcp.save(saved, checkpoint_id=self.ckpt, process_group=group)


def _slowest(job: Job, name: str, seconds: float) -> float:
    """The largest of every rank's ``seconds`` (each rank adds its own to the store)."""
    job.store.set(f"t/{name}/{job.rank}", repr(seconds))
    job.barrier(f"t/{name}", list(range(job.size)))
    return max(float(job.store.get(f"t/{name}/{r}").decode()) for r in range(job.size))


def _exchange(job: Job, elements: int, ranks: int = 6) -> float:
    """Seconds for the pairs (0, 1), (2, 3), (4, 5) (the first ``ranks`` of them) to
    exchange ``elements`` floats at once (the slowest rank's, the best of three)."""
    import torch
    import torch.distributed as dist

    best = float("inf")
    for _ in range(3):
        send, recv = torch.ones(elements), torch.empty(elements)
        peer = job.rank ^ 1
        dist.barrier()
        t = time.monotonic()
        if job.rank < ranks:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer),
                                             dist.P2POp(dist.irecv, recv, peer)]):
                w.wait()
        best = min(best, time.monotonic() - t)
    return best


def _rebuild(job: Job, elements: int, ranks: int = 1) -> float:
    """Seconds for ranks ``0 .. ranks - 1`` each to write a block of ``elements`` floats
    anew at once (a fresh tensor, copied into by halves, as a rank rebuilding its block
    after a move does; the slowest rank's, the best of three)."""
    import torch
    import torch.distributed as dist

    best = float("inf")
    source = torch.ones(elements)
    for _ in range(3):
        dist.barrier()
        t = time.monotonic()
        if job.rank < ranks:
            block = torch.empty(elements)
            half = elements // 2
            block[:half] = source[:half]
            block[half:] = source[half:]
        best = min(best, time.monotonic() - t)
    return best


def calibrate(out: str) -> None:
    from backend import bind
    from backend._tensor import read_boxes
    from mesh import MeshView

    job = Job(out, agent=False)
    if job.inside:
        job.mesh.materialize()
        if os.environ.get("SAVE", "1") == "1":
            job.save()
    big = _slowest(job, "big", _exchange(job, EXCHANGE // 4, 2))  # one pair alone
    small = _slowest(job, "small", _exchange(job, 1, 2))
    every = _slowest(job, "every", _exchange(job, EXCHANGE // 4))  # three pairs at once
    n = side()
    copied = _slowest(job, "copy", _rebuild(job, n * n))
    fresh = bind(MeshView.from_ranks([[0, 3], [1, 4], [2, 5]], ["x", "y"]), job.backend)
    job.barrier("create", list(range(job.size)))  # each timed part starts together
    t = time.monotonic()
    if job.inside:
        fresh.get_group("x")
    create = _slowest(job, "create", time.monotonic() - t)
    # the groups of a dim joined by ranks 6, 7, which made none before (as a spare joins)
    joined = bind(MeshView.from_ranks([[0, 1], [6, 7]], ["x", "y"]), job.backend)
    job.barrier("join", list(range(job.size)))
    t = time.monotonic()
    if job.rank in (0, 1, 6, 7):
        joined.get_group("x")
    join = _slowest(job, "join", time.monotonic() - t)
    t = time.monotonic()
    read = 0
    if job.rank == 0:  # (the shape a lost rank's block of e has: runs of half a row; a
        # strip of a sixth of every row, read before, took twice as long per byte)
        read_boxes(job.ckpt, {"e": [((0, n // 3), (0, n // 2))]})
        read = 4 * (n // 3) * (n // 2)
    storage = _slowest(job, "storage", time.monotonic() - t)
    job.barrier("rebind", list(range(job.size)))
    t = time.monotonic()
    two = None
    if job.inside:  # ranks 4, 5 left out (alive): the meeting, their groups ended (the last
        two = job.mesh.rebind(MeshView.from_ranks(RANKS[:2], ["dp", "tp"]))  # step: they go)
    first = _slowest(job, "rebind", time.monotonic() - t)
    job.barrier("rebind again", list(range(job.size)))
    t = time.monotonic()
    if job.rank < 4 and two is not None:  # then ranks 2, 3: a job's rebind is not its first
        two.materialize()  # use of the protocol (its groups made, as a job's are)
        job.barrier("made", [0, 1, 2, 3])
        t = time.monotonic()
        two.rebind(MeshView.from_ranks(RANKS[:1], ["dp", "tp"]))
    rebind = _slowest(job, "rebind again", time.monotonic() - t)
    print(f"rank {job.rank}: rebind {first:.3f} s, again {rebind:.3f} s", flush=True)
    write_report(out, job.rank, {
        "bytes": EXCHANGE, "big_s": big, "small_s": small, "every_s": every,
        "copy_bytes": 4 * n * n, "copy_s": copied,
        "create_s": create, "join_s": join, "storage_bytes": read or 4 * (n // 3) * (n // 2),
        "storage_s": storage, "rebind_s": rebind})
    job.backend.shutdown()


def trial(out: str) -> None:
    import torch
    import torch.distributed as dist

    from backend import apply_recovery
    from mesh import Costs, Topology, recover

    job = Job(out, agent=True)
    victim, label = int(os.environ["VICTIM"]), os.environ["WAY"]
    costs = Costs(**json.loads(os.environ["COSTS"]))
    if job.inside:
        job.mesh.materialize()
        everyone = job.mesh._flatten("all").get_group()
        for step in range(1, KILL_STEP + 2):
            if job.rank == victim and step == KILL_STEP:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                dist.all_reduce(torch.tensor([1.0]), group=everyone)
            except Exception:
                break
    job.store.wait([AGENT_FAILED], START)
    lost = sorted(int(r) for r in job.store.get(AGENT_FAILED).decode().split(","))
    topology = Topology(job.size, PER_HOST)
    decided = recover(plan, job.view, lost, state=job.state, spares=SPARES,
                      topology=topology, costs=costs, itemsize=4)
    way = next(w for w in decided.ways if w.label == label)
    taking = sorted({*way.views["world"].ranks.take(range(way.views["world"].size())),
                     *[r for r in range(6) if r not in lost]})
    if job.rank not in taking:
        write_report(out, job.rank, {"took_part": False})
        return
    import backend._c10d._backends as _b
    timing: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            t = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                timing[name] = timing.get(name, 0.0) + time.monotonic() - t
        return run
    _b.agreed_failures = timed("agree", _b.agreed_failures)
    _b.end_groups = timed("end", _b.end_groups)
    t0 = job.barrier("go", taking)
    done = apply_recovery(way, job.local, device_mesh=job.mesh, checkpoint=job.ckpt,
                          dtypes=dict.fromkeys(job.state, torch.float32))
    t = time.monotonic()
    if done.mesh is not None:
        done.mesh.materialize()
    t1 = time.time()
    write_report(out, job.rank, {
        "took_part": True, "t0": t0, "t1": t1,
        "parts": {**done.seconds, "create": time.monotonic() - t, **timing},
        "predicted": way.seconds, "best": decided.ways[0].label,
        "ways": {w.label: w.seconds for w in decided.ways
                 if w.kind.value not in ("restart", "wait")}})
    job.barrier("end", taking)


def restart(out: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor

    from backend import to_torch_placements

    job = Job(out, agent=False)
    if job.inside:
        job.mesh.materialize()
        target = {n: DTensor.from_local(job.local[n], job.mesh.to_torch(),
                                        to_torch_placements(s), shape=s.shape,
                                        stride=(s.shape[1], 1))
                  for n, s in job.state.items()}
        dcp.load(target, checkpoint_id=job.ckpt,
                 process_group=job.mesh._flatten("all").get_group())
    ready = job.barrier("ready", list(range(job.size)))
    write_report(out, job.rank, {"ready": ready})
    job.backend.shutdown()


if __name__ == "__main__":
    {"calibrate": calibrate, "trial": trial, "restart": restart}[sys.argv[1]](sys.argv[2])
