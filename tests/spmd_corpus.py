"""The corpus of ``check_spmd``: one minimal program (at least) per class of hang of issue 27,
each with the verdict it must get, and a fixed twin that must pass.

Classes: 1 collective mismatch, 2 cache hit against split, 3 hidden parent-wide split, 4 after
a failure, 5 uneven ranks per host, 6 communicator resources (0: a valid program).  A case
whose ``gloo`` is set is also run for real on Gloo processes (``tests/spmd_gloo_worker.py``,
``tests/test_check_spmd_gloo.py``), where it must fail as predicted ("hang": a rank times
out; "error": a rank raises at once) or pass ("ok").  Torch-level cases (``torch=True``)
run on the check's fake world and, unchanged, on Gloo: ``backend`` is then a
``GlooBackend`` with a short timeout, and ``TIMEOUT`` bounds the groups they make
themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs

TIMEOUT = timedelta(seconds=3)
"""The timeout of the Gloo runs' groups (those the programs make with torch too)."""


@attrs.frozen
class Case:
    """A program, its world, how to check it, the verdict it must get (the kinds of
    :func:`verdict`; empty: ok), and what it must do on real Gloo (None: not run there)."""

    name: str
    cls: int
    world: int
    program: Callable[[Any], object]
    expect: frozenset[str]
    check: dict[str, Any] = attrs.field(factory=dict)
    gloo: str | None = None


def verdict(report: Any) -> frozenset[str]:
    """What a report says, as kinds: its findings' kinds, plus ``never_created``,
    ``deadlock`` (ranks waiting on each other) and ``error`` (a program raised)."""
    found = set(report.kinds())
    if report.never_created:
        found.add("never_created")
    if report.waiting:
        found.add("deadlock")
    if report.errors:
        found.add("error")
    return frozenset(found)


CASES: list[Case] = []


def case(name: str, cls: int, world: int, expect: set[str], gloo: str | None = None,
         **check: Any) -> Callable[[Callable[[Any], object]], Callable[[Any], object]]:
    def add(program: Callable[[Any], object]) -> Callable[[Any], object]:
        CASES.append(Case(name, cls, world, program, frozenset(expect), check, gloo))
        return program
    return add


def _mesh(backend: Any, shape: tuple[int, ...], names: tuple[str, ...],
          device: str = "cpu") -> Any:
    from backend import init_device_mesh

    return init_device_mesh(device, shape, mesh_dim_names=names, backend=backend)


# ---- class 1: members of a group issue different sequences -----------------------------------

@case("shape", 1, 4, {"desync"}, torch=True)
def shape(backend: Any) -> None:
    """Rank 3 all-reduces 4 elements on its tp group, its peer 8."""
    import torch
    import torch.distributed as dist

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    n = 4 if mesh.get_rank() == 3 else 8
    dist.all_reduce(torch.ones(n), group=mesh.get_group("tp"))


@case("shape on a pair", 1, 2, {"desync"}, gloo="error", torch=True)
def shape_pair(backend: Any) -> None:
    """Rank 1 all-reduces 4 elements, rank 0 8 (Gloo fails at once)."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(4 if backend.rank == 1 else 8))


@case("shape fixed", 0, 4, set(), torch=True)
def shape_fixed(backend: Any) -> None:
    import torch
    import torch.distributed as dist

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    dist.all_reduce(torch.ones(8), group=mesh.get_group("tp"))


@case("op", 1, 4, {"desync"}, torch=True)
def op(backend: Any) -> None:
    """Rank 1 all-gathers where its tp peer all-reduces."""
    import torch
    import torch.distributed as dist

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    tp = mesh.get_group("tp")
    if mesh.get_rank() == 1:
        dist.all_gather_into_tensor(torch.empty(16), torch.ones(8), group=tp)
    else:
        dist.all_reduce(torch.ones(8), group=tp)


@case("op on a pair", 1, 2, {"desync"}, torch=True)
def op_pair(backend: Any) -> None:
    """Rank 1 all-gathers where rank 0 all-reduces."""
    import torch
    import torch.distributed as dist

    if backend.rank == 1:
        dist.all_gather_into_tensor(torch.empty(16), torch.ones(8))
    else:
        dist.all_reduce(torch.ones(8))


@case("reduce op", 1, 4, {"desync"}, torch=True)
def reduce_op(backend: Any) -> None:
    """Rank 2 reduces with max, the others with sum (a silent wrong answer on Gloo)."""
    import torch
    import torch.distributed as dist

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    op_ = dist.ReduceOp.MAX if mesh.get_rank() == 2 else dist.ReduceOp.SUM
    dist.all_reduce(torch.ones(8), op=op_, group=mesh.get_group("dp"))


@case("dtype", 1, 4, {"desync"})
def dtype(backend: Any) -> None:
    mesh = _mesh(backend, (4,), ("dp",))
    backend.all_reduce((8,), group=mesh.get_group("dp"),
                       dtype="bfloat16" if backend.rank == 0 else "float32")


@case("root", 1, 4, {"desync"})
def root(backend: Any) -> None:
    """Each rank broadcasts from itself."""
    mesh = _mesh(backend, (4,), ("dp",))
    backend.broadcast((8,), src=mesh.get_coordinate()[0], group=mesh.get_group("dp"))


@case("fewer calls", 1, 4, {"unmatched"}, torch=True)
def fewer_calls(backend: Any) -> None:
    """Rank 2 skips the last all-reduce of its dp group."""
    import torch
    import torch.distributed as dist

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    steps = 1 if mesh.get_rank() == 2 else 2
    for _ in range(steps):
        dist.all_reduce(torch.ones(4), group=mesh.get_group("dp"))


@case("send without recv", 1, 2, {"unmatched"}, torch=True)
def send_without_recv(backend: Any) -> None:
    import torch
    import torch.distributed as dist

    if backend.rank == 0:
        dist.send(torch.ones(8), dst=1)


@case("send ring", 1, 3, {"deadlock"}, gloo="hang", torch=True)
def send_ring(backend: Any) -> None:
    """Every rank sends to the next before receiving from the previous (blocking)."""
    import torch
    import torch.distributed as dist

    rank, world = backend.rank, 3
    dist.send(torch.ones(8), dst=(rank + 1) % world)
    dist.recv(torch.empty(8), src=(rank - 1) % world)


@case("send ring batched", 0, 3, set(), torch=True)
def send_ring_batched(backend: Any) -> None:
    import torch
    import torch.distributed as dist

    rank, world = backend.rank, 3
    got = torch.zeros(8)
    ops = [dist.P2POp(dist.isend, torch.full((8,), float(rank)), (rank + 1) % world),
           dist.P2POp(dist.irecv, got, (rank - 1) % world)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


@case("crossed orders", 1, 2, {"deadlock"}, gloo="hang", torch=True)
def crossed_orders(backend: Any) -> None:
    """Ranks 0 and 1 share the tp group and a tagged copy of it, and reduce on them in
    opposite orders."""
    import torch
    import torch.distributed as dist

    from backend import GroupOptions

    mesh = _mesh(backend, (1, 2), ("dp", "tp"))
    copy = mesh["tp"]._flatten("tp_copy", GroupOptions(tag="copy"))
    a, b = mesh.get_group("tp"), copy.get_group()
    for g in ((b, a) if mesh.get_rank() == 1 else (a, b)):
        dist.all_reduce(torch.ones(4), group=g)


@case("all_to_all sizes", 1, 2, {"splits"})
def all_to_all_sizes(backend: Any) -> None:
    """Rank 0 sends 3 rows to rank 1, which expects 2."""
    if backend.rank == 0:
        backend.all_to_all((4, 8), input_splits=[1, 3], output_splits=[1, 2])
    else:
        backend.all_to_all((4, 8), input_splits=[2, 2], output_splits=[2, 2])


@case("uneven batch under FSDP2 and TP", 1, 8, {"desync"}, torch=True)
def uneven_batch(backend: Any) -> None:
    """A training step (TP on tp, FSDP2 on dp) where rank 6 gets a batch of 5 rows, its tp
    peers 4: the TP all-reduce of the second linear's output desyncs."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    mesh = _mesh(backend, (2, 4), ("dp", "tp"))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    rows = 5 if mesh.get_rank() == 6 else 4
    model(torch.randn(rows, 8)).sum().backward()


@case("DTensor redistribute on a subset", 1, 4, {"unmatched"}, torch=True)
def redistribute_subset(backend: Any) -> None:
    """Only ranks 0 and 1 redistribute their DTensor sharded over dp: their dp peers 2 and 3
    never join the all-gather."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    x = distribute_tensor(torch.arange(8.0), mesh["dp"], [Shard(0)])
    if mesh.get_rank() in (0, 1):
        x.redistribute(mesh["dp"], [Replicate()])


# ---- class 2: a rank holds the family's group already and skips its creation ---------------

def _adopting(backend: Any, adopters: tuple[int, ...]) -> None:
    """Every rank makes the (2, 2) plan's dp and tp groups with torch (world-wide
    new_group calls, every rank in the same order); ranks ``adopters`` wrap them with
    ``from_group``, the others ask a mesh for them."""
    import torch
    import torch.distributed as dist

    from backend import DeviceMesh

    rank = backend.rank
    dp = [dist.new_group(r, timeout=TIMEOUT) for r in ([0, 2], [1, 3])][rank % 2]
    tp = [dist.new_group(r, timeout=TIMEOUT) for r in ([0, 1], [2, 3])][rank // 2]
    if rank in adopters:
        DeviceMesh.from_group([dp, tp], "cpu", mesh=[[0, 1], [2, 3]],
                              mesh_dim_names=("dp", "tp"), backend=backend)
    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    dist.all_reduce(torch.ones(4), group=mesh.get_group("tp"))


@case("cache hit against creation", 2, 4, {"cache_hit", "unmatched"}, gloo="hang", torch=True,
      backend="gloo")
def cache_hit(backend: Any) -> None:
    """Rank 0 wraps its tp group with from_group; its peer rank 1 asks the mesh for it,
    which creates it: rank 1 waits at the creation for rank 0, which never comes.  (Then
    rank 0 reduces on torch's group, rank 1 would on the one it creates: also unmatched.)"""
    _adopting(backend, (0,))


@case("cache hit fixed", 0, 4, set(), gloo="ok", torch=True, backend="gloo")
def cache_hit_fixed(backend: Any) -> None:
    _adopting(backend, (0, 1, 2, 3))


@case("cache hit against split", 2, 4, {"cache_hit", "unmatched"}, torch=True,
      backend="nccl")
def cache_hit_split(backend: Any) -> None:
    """As above, modelled for NCCL: the tp family is one split over the world, which ranks
    1, 2 and 3 enter and rank 0 skips."""
    _adopting(backend, (0,))


@case("cache hit against split, torch-free", 2, 8, {"cache_hit"}, backend="nccl")
def cache_hit_split_free(backend: Any) -> None:
    """The first dp slice adopts the tp groups it holds from an earlier plan."""
    from backend import DeviceMesh, FakeGroup
    from mesh import MeshView

    plan = MeshView.from_shape((2, 4), ("dp", "tp"))
    if backend.rank < 4:
        dp = FakeGroup.of(plan, "dp", backend.rank, "dp")
        tp = FakeGroup.of(plan, "tp", backend.rank, "tp")
        DeviceMesh.from_group([dp, tp], "cuda", mesh=[[0, 1, 2, 3], [4, 5, 6, 7]],
                              mesh_dim_names=("dp", "tp"), backend=backend)
    mesh = _mesh(backend, (2, 4), ("dp", "tp"), "cuda")
    backend.all_reduce((8,), group=mesh.get_group("tp"))


# ---- class 3: a creation that is secretly collective over the world -----------------------

@case("new_group by a subset", 3, 3, {"hidden_split"}, gloo="hang", torch=True,
      backend="gloo")
def subset_new_group(backend: Any) -> None:
    """Ranks 0 and 1 make their pair group with new_group (no local synchronization) and
    rank 2 skips it: torch names such groups by a per-process count, so the group of all
    three made next is '2' on ranks 0 and 1 and '1' on rank 2: they never meet."""
    import torch
    import torch.distributed as dist

    if backend.rank < 2:
        dist.new_group([0, 1], timeout=TIMEOUT)
    everyone = dist.new_group([0, 1, 2], timeout=TIMEOUT)
    dist.all_reduce(torch.ones(4), group=everyone)


@case("new_group by every rank", 0, 3, set(), torch=True, backend="gloo")
def every_new_group(backend: Any) -> None:
    import torch
    import torch.distributed as dist

    pair = dist.new_group([0, 1], timeout=TIMEOUT)
    everyone = dist.new_group([0, 1, 2], timeout=TIMEOUT)
    if backend.rank < 2:
        dist.all_reduce(torch.ones(4), group=pair)
    dist.all_reduce(torch.ones(4), group=everyone)


@case("hidden split of a members-only group", 3, 8, {"hidden_split"}, backend="nccl")
def hidden_split(backend: Any) -> None:
    """A tagged copy of tp is created among its members only; on a device-bound NCCL world
    torch splits the whole world for it."""
    from backend import GroupOptions

    mesh = _mesh(backend, (2, 4), ("dp", "tp"), "cuda")
    copy = mesh["tp"]._flatten("tp_copy", GroupOptions(tag="copy"))
    backend.all_reduce((8,), group=copy.get_group())


@case("hidden split, torch's new_group", 3, 4, {"hidden_split"}, torch=True, backend="nccl")
def hidden_split_torch(backend: Any) -> None:
    import torch.distributed as dist

    if backend.rank < 2:
        dist.new_group([0, 1], use_local_synchronization=True)


@case("ascending families split", 0, 8, set(), backend="nccl")
def ascending(backend: Any) -> None:
    mesh = _mesh(backend, (2, 4), ("dp", "tp"), "cuda")
    mesh.materialize()
    backend.all_reduce((8,), group=mesh.get_group("tp"))
    backend.all_reduce((8,), group=mesh.get_group("dp"))


# ---- class 4: after a failure ---------------------------------------------------------------

def _after_loss(backend: Any) -> tuple[Any, Any]:
    """8 ranks, (2, 4) dp x tp; rank 7 died: it stops; the others get its tp group."""
    mesh = _mesh(backend, (2, 4), ("dp", "tp"), "cuda")
    tp = mesh.get_group("tp")
    backend.all_reduce((8,), group=tp)
    return mesh, tp


@case("destroy instead of abort", 4, 8, {"lifecycle"}, backend="nccl")
def destroy_after_shrink(backend: Any) -> None:
    _, tp = _after_loss(backend)
    if backend.rank == 7:
        return
    if backend.rank >= 4:
        backend.shrink_group([7], tp)
        backend.destroy_process_group(tp)


@case("abort after shrink", 0, 8, set(), backend="nccl")
def abort_after_shrink(backend: Any) -> None:
    _, tp = _after_loss(backend)
    if backend.rank == 7:
        return
    if backend.rank >= 4:
        shrunk = backend.shrink_group([7], tp)
        backend.abort_process_group(tp)
        backend.all_reduce((8,), group=shrunk)


@case("shrink from outside", 4, 8, {"lifecycle"}, backend="nccl")
def shrink_from_outside(backend: Any) -> None:
    """Rank 7 is excluded but calls the shrink too (it is alive: a planned removal)."""
    _, tp = _after_loss(backend)
    if backend.rank >= 4:
        backend.shrink_group([7], tp)


@case("group used after rebind", 4, 8, {"lifecycle"}, backend="nccl")
def used_after_rebind(backend: Any) -> None:
    from mesh import drop

    mesh, tp = _after_loss(backend)
    if backend.rank == 7:
        return
    mesh.rebind(drop(mesh.view, [7], "dp"))
    backend.all_reduce((8,), group=tp)  # the old tp group: ended by the rebind


@case("revoke not awaited", 4, 8, {"lifecycle"}, backend="nccl")
def revoke_not_awaited(backend: Any) -> None:
    _, tp = _after_loss(backend)
    if backend.rank == 7 or backend.rank < 4:
        return
    backend.revoke_process_group(tp, wait=False)
    backend.shrink_group([7], tp)


@case("revoke awaited", 0, 8, set(), backend="nccl")
def revoke_awaited(backend: Any) -> None:
    _, tp = _after_loss(backend)
    if backend.rank == 7 or backend.rank < 4:
        return
    backend.revoke_process_group(tp, wait=False)
    backend.wait_revoked(tp)
    shrunk = backend.shrink_group([7], tp)
    backend.abort_process_group(tp)
    backend.all_reduce((8,), group=shrunk)


# ---- classes 5 and 6: the machine ------------------------------------------------------------

def _topology(world: int, per_host: int) -> Any:
    from mesh import Topology

    return Topology(world, per_host)


@case("uneven ranks per host", 5, 12, {"uneven_hosts"}, backend="nccl",
      topology=_topology(12, 4))
def uneven_hosts(backend: Any) -> None:
    """Groups of 6 on hosts of 4: the first spans 4 + 2."""
    mesh = _mesh(backend, (2, 6), ("dp", "sp"), "cuda")
    backend.all_reduce((8,), group=mesh.get_group("sp"))


@case("even ranks per host", 0, 12, set(), backend="nccl", topology=_topology(12, 4))
def even_hosts(backend: Any) -> None:
    mesh = _mesh(backend, (3, 4), ("dp", "tp"), "cuda")
    backend.all_reduce((8,), group=mesh.get_group("tp"))
    backend.all_reduce((8,), group=mesh.get_group("dp"))


@case("NVLS slots", 6, 8, {"nvls"}, backend="nccl", topology=_topology(8, 8))
def nvls_slots(backend: Any) -> None:
    """Three plans of one 8-GPU host: 24 communicators with NVLS there, ~240 slots."""
    for shape in ((2, 4), (4, 2), (2, 2, 2)):
        names = tuple(f"d{i}" for i in range(len(shape)))
        _mesh(backend, shape, names, "cuda").materialize()


@case("communicators over budget", 6, 8, {"budget"}, backend="nccl", communicators=4)
def over_budget(backend: Any) -> None:
    _mesh(backend, (2, 2, 2), ("a", "b", "c"), "cuda").materialize()
    _mesh(backend, (4, 2), ("d", "e"), "cuda").materialize()


# ---- bad input: a clear verdict, never a hang of the checker --------------------------------

@case("a program that raises", 0, 4, {"error"})
def raises(backend: Any) -> None:
    if backend.rank == 2:
        raise ValueError("bad batch")


@case("a program that loops", 0, 4, {"timeout"}, rank_timeout=0.5)
def loops(backend: Any) -> None:
    while True:
        pass


@case("a program that blocks", 0, 4, {"timeout"}, rank_timeout=0.5)
def blocks(backend: Any) -> None:
    import threading

    threading.Event().wait()


@case("a program that leaves a thread", 0, 2, {"threads"})
def leaves_thread(backend: Any) -> None:
    import threading
    import time

    threading.Thread(target=time.sleep, args=(1.0,), daemon=True).start()


@case("calls from threads", 0, 2, {"threads"})
def from_threads(backend: Any) -> None:
    import threading

    mesh = _mesh(backend, (2,), ("dp",))
    g = mesh.get_group("dp")
    ts = [threading.Thread(target=backend.all_reduce, args=((4,),), kwargs={"group": g})
          for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


@case("a group of another rank", 0, 4, {"foreign", "error"})
def foreign_group(backend: Any) -> None:
    from backend import FakeGroup
    from mesh import MeshView

    other = FakeGroup.of(MeshView.from_shape((4,), ("dp",)), "dp", (backend.rank + 1) % 4, "dp")
    backend.all_reduce((4,), group=other)


@case("a group torch skips", 0, 4, {"foreign"}, torch=True)
def not_in_group(backend: Any) -> None:
    import torch
    import torch.distributed as dist

    pair = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(4), group=pair)  # ranks 2 and 3 are not in it: a no-op


@case("a program that holds real data", 0, 4, {"memory"})
def holds_data(backend: Any) -> None:
    """Each rank keeps 320 MB of real data while it works, past the default per-rank bound
    (256 MiB)."""
    data = [0] * 40_000_000
    mesh = _mesh(backend, (2, 2), ("dp", "tp"))
    rows = sum(1 for _ in range(2_000_000))  # the step's work, with the data held
    backend.all_reduce((len(data) // rows,), group=mesh.get_group("tp"))
