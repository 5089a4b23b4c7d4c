"""One process of an 8-rank Gloo world for ``tests/test_reshard_gloo.py``.

Run as ``python tests/reshard_gloo_worker.py MODE OUT_DIR`` with torchrun's environment (MODE:
one of those below, or several comma-separated, run in turn in one world: :data:`MODES`).

- ``pairs``: :data:`PAIRS` random pairs of shardings over subsets of the 8 ranks (the same
  ranks, disjoint ones, overlapping ones; ``sharding_cases.pair_in_world``, one seed on
  every rank); every rank calls ``backend.reshard_tensor`` for each, and each destination
  rank compares what it got with the full tensor sliced by ``Sharding.local`` (checked
  against torch in ``tests/test_sharding_vs_torch.py``): bit for bit, or within rounding
  for a partial source that was divided on the way.
- ``state``: :data:`STATES` states of :data:`STATE_TENSORS` tensors each (random pairs of
  shardings as in ``pairs``, in float64, float32, int64 and bfloat16; float64 where the
  source is partial), each state moved by one ``backend.reshard_state`` call.  Every rank
  counts its ``batch_isend_irecv`` calls and the messages it posts to each peer (the
  function is wrapped), and each destination rank compares every tensor with the full
  tensor sliced by ``Sharding.local``, dtype included.
- ``buckets``: a state of :data:`BUCKET_TENSORS` random tensors (mixed dtypes, partial
  sources included), planned by ``mesh.reshard_state`` under a cap that forces several
  buckets, moved by ``backend.reshard_state`` of that plan and by the unbucketed mapping of
  plans; each rank reports whether every tensor is the same (values and dtype) both ways,
  the cap, the buckets, its peak extra memory bucketed and not, and every
  ``batch_isend_irecv`` of the bucketed call (op, peer, dtype, bytes of each message).
- ``mismatch``: one ``reshard_state`` of two tensors from ranks 0-3 (``Shard(0)``) to ranks
  4-7 (``Shard(0)``), each source block going to one receiver; ``x`` is float64 on every
  source, but rank 5 is told float32 (``dtypes=``); ``y`` is right everywhere.  Every rank
  reports what it raised (its type and message) or what it got, then all meet at a barrier
  (a rank left waiting would hang here).
- ``convert``: four tensors from ranks 0-3 in one ``reshard_state``: ``w`` bf16 served as
  float16 on ranks 4-7, ``v`` float32 written into existing float64 tensors there
  (``into=``), ``o`` bf16 to ranks 2-5 as float32 (ranks 2 and 3 hold a source of it and
  receive it), ``p`` a float32 ``Partial`` source replicated as float64; each rank
  reports what it got and whether its ``into`` tensors came back as themselves.
- ``other_plan``: ``x`` from ranks 0-3 (``Shard(0)``) to ranks 4-7 (``Shard(0)``), but rank 3
  is given ``Shard(1)`` for the destination (the same bytes between every pair); then the
  same call with the same plan everywhere; then again with rank 6 passing an ``into`` tensor
  of the wrong shape.  Each rank reports what each call raised or got.
- ``submesh``: torch's own (dp 2, tp 4) mesh; each dp replica holds its own tensor (values
  + 100 on replica 1) as a DTensor on ``mesh2d["tp"]``, ``Shard(0)``; ``backend.redistribute``
  to ``Shard(1)`` on the same sub-mesh, then to ``(Replicate(), Shard(1))`` on the whole 2-D
  mesh (whose replicas hold different tensors); each rank reports what each got or raised.
- ``partial``: every same-mesh pair with a :class:`~mesh.Partial` source on torch's own
  (2, 4) mesh (:func:`partial_pairs`: ``Shard(0)``, ``Shard(1)``, ``Replicate``,
  ``_StridedShard(0, 2)`` and one reduction, the destination any of those or the source's
  own ``Partial`` kept), 7 x 5 and 8 x 6 in float64, the partial contributions all
  different: torch's ``DTensor.redistribute`` (its collectives' bytes counted by
  ``torch_bytes.TorchBytes``) and ``backend.redistribute``; each rank reports, per pair,
  torch's bytes sent from this rank, the plan's bytes, whether each equals the full
  tensor sliced for this rank (a kept partial destination: whether ours equals torch's),
  and the payload bytes our executor posted (a pair torch fails with a ``RuntimeError``, as
  it does on every rank for some ``_StridedShard`` destinations, reports torch as wrong).
- ``mismatch_partial``: a Partial source on ranks 0-3 replicated on ranks 4-7 (its sums
  happen on the way), rank 1 holding float32 where the others hold float64; every rank
  reports what it raised or got.
- ``save``: a DCP checkpoint of two DTensors, ``w`` (12 x 10, ``Shard(0)`` over the 8 ranks)
  and ``m`` (8 x 8, ``(Shard(0), Shard(1))`` over (2, 4)), their values ``arange``, saved
  under ``OUT_DIR/ckpt`` (the test reads boxes of it in one process).
- ``sync``: RL weight sync.  Ranks 0-3 train a small MLP under (dp, tp) = (2, 2), TP then
  FSDP2 (so ``_StridedShard``); ranks 4-7 serve it under tp = 4.  Every parameter moves
  with ``backend.redistribute``; the same state dict also goes through DCP (saved by the
  trainer's ranks, loaded by the server's).  Each server rank reports the largest
  difference of its parameters from DCP's and from the full parameters of the same model
  built in one process, and both times.

The worker asserts nothing; it reports.
"""

from __future__ import annotations

import os
import random
import sys
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gloo_launch import start_together, write_report

PAIRS = 1000
STATES = 6
STATE_TENSORS = 40
BUCKET_TENSORS = 24
WIDTH = 16
TRAIN = [[0, 1], [2, 3]]  # (dp, tp)
SERVE = [4, 5, 6, 7]  # tp
LAYOUT = {  # what TP (Colwise on "0", Rowwise on "2") then FSDP2 give each parameter
    "0.weight": ((32, 16), ("SS0/2", "S0"), ("S0",)),
    "0.bias": ((32,), ("SS0/2", "S0"), ("S0",)),
    "2.weight": ((16, 32), ("S0", "S1"), ("S1",)),
    "2.bias": ((16,), ("S0", "R"), ("R",)),
}
"""name -> (shape, trainer placements on (dp, tp), server placements on tp)."""


def _torch_placement(code: str) -> Any:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    if code == "R":
        return Replicate()
    if code.startswith("SS"):
        dim, sf = code[2:].split("/")
        return _StridedShard(int(dim), split_factor=int(sf))
    return Shard(int(code[1:]))


def _pairs(out_dir: str, backend: Any) -> None:
    import numpy as np
    import torch
    from sharding_cases import pair_in_world

    from backend import reshard_tensor
    from mesh import Partial, reshard

    rank = backend.rank
    rng = random.Random(20261127)
    bad: list[str] = []
    checked = moved = 0
    start = time.monotonic()
    for i in range(PAIRS):
        src, dst = pair_in_world(rng, backend.world_size)
        full = np.array([rng.randint(-1000, 1000) for _ in range(int(np.prod(src.shape)))],
                        dtype=np.float64).reshape(src.shape)
        plan = reshard(src, dst)
        local = (torch.from_numpy(src.local(full, rank))
                 if src.view.coordinate(rank) is not None else None)
        got = reshard_tensor(plan, local, dtype=torch.float64)
        moved += sum(t.elements for t in plan.receives(rank))
        if dst.view.coordinate(rank) is None:
            if got is not None:
                bad.append(f"pair {i}: rank {rank} is not in the destination but got a tensor")
            continue
        checked += 1
        want = torch.from_numpy(dst.local(full, rank))
        partial = any(isinstance(p, Partial) for p in src.placements)
        same = (got.shape == want.shape and (torch.allclose(got, want) if partial
                                              else torch.equal(got, want)))
        if not same:
            bad.append(f"pair {i}: {plan!r}: rank {rank} got {got.tolist()}, "
                       f"want {want.tolist()}"[:600])
    write_report(out_dir, rank, {"checked": checked, "bad": bad[:5], "n_bad": len(bad),
                                 "moved": moved, "seconds": time.monotonic() - start})


def _state(out_dir: str, backend: Any) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from sharding_cases import pair_in_world

    from backend import reshard_state
    from mesh import Partial, reshard

    rank = backend.rank
    rng = random.Random(20261128)
    kinds = (torch.float64, torch.float32, torch.int64, torch.bfloat16)
    calls: list[dict[str, int]] = []  # per batch: peer -> messages posted (sends and receives)
    real = dist.batch_isend_irecv

    def counting(ops: list[Any]) -> Any:
        per_peer: dict[str, int] = {}
        for op in ops:
            key = f"{op.op.__name__}:{op.peer}"
            per_peer[key] = per_peer.get(key, 0) + 1
        calls.append(per_peer)
        return real(ops)

    dist.batch_isend_irecv = counting
    bad: list[str] = []
    checked = 0
    for k in range(STATES):
        plans, state, dtypes, wants = {}, {}, {}, {}
        for i in range(STATE_TENSORS):
            src, dst = pair_in_world(rng, backend.world_size)
            partial = any(isinstance(p, Partial) for p in src.placements)
            kind = torch.float64 if partial else kinds[i % len(kinds)]
            full = np.array([rng.randint(-100, 100) for _ in range(int(np.prod(src.shape)))],
                            dtype=np.float64).reshape(src.shape)
            name = f"t{i:02d}"
            plans[name] = reshard(src, dst)
            dtypes[name] = kind
            if src.view.coordinate(rank) is not None:
                state[name] = torch.from_numpy(src.local(full, rank)).to(kind)
            if dst.view.coordinate(rank) is not None:
                wants[name] = (torch.from_numpy(dst.local(full, rank)).to(kind), partial)
        got = reshard_state(plans, state, dtypes=dtypes)
        for name, value in got.items():
            if name not in wants:
                if value is not None:
                    bad.append(f"state {k} {name}: rank {rank} is not in the destination")
                continue
            checked += 1
            want, partial = wants[name]
            same = (value.dtype == want.dtype and value.shape == want.shape and
                    (torch.allclose(value, want) if partial else torch.equal(value, want)))
            if not same:
                bad.append(f"state {k} {name}: {plans[name]!r}: rank {rank} got "
                           f"{value.dtype} {value.tolist()}, want {want.tolist()}"[:600])
    dist.batch_isend_irecv = real
    write_report(out_dir, rank, {"checked": checked, "bad": bad[:5], "n_bad": len(bad),
                                 "calls": calls})


def _bucket_state(rng: random.Random, world: int) -> tuple[dict[str, Any], ...]:
    """:data:`BUCKET_TENSORS` random pairs of 12-120 elements (so that no one tensor is
    most of the state), float64 where the source is partial, else a dtype in turn."""
    import math

    import torch
    from sharding_cases import pair_in_world

    kinds = (torch.float64, torch.float32, torch.int64, torch.bfloat16)
    src: dict[str, Any] = {}
    dst: dict[str, Any] = {}
    dtypes: dict[str, Any] = {}
    while len(src) < BUCKET_TENSORS:
        a, b = pair_in_world(rng, world)
        if 12 <= math.prod(a.shape) <= 120:
            name = f"b{BUCKET_TENSORS - len(src):02d}"  # the state's order is not name order
            src[name], dst[name] = a, b
            dtypes[name] = torch.float64 if a.partial_dims else kinds[len(src) % len(kinds)]
    return src, dst, dtypes


def _buckets(out_dir: str, backend: Any) -> None:
    """A state under a cap: the smallest the state allows (its largest tensor's buffers on
    one rank), or a quarter of the busiest rank's whole, if larger."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from backend import reshard_state
    from mesh import reshard
    from mesh import reshard_state as plan_state

    rank = backend.rank
    src, dst, dtypes = _bucket_state(random.Random(20261129), backend.world_size)
    sizes = {n: torch.empty((), dtype=k).element_size() for n, k in dtypes.items()}
    whole = plan_state(src, dst, itemsize=sizes)
    largest = max(sum(t.elements for t in (*p.sends(r), *p.receives(r))) * p.itemsize
                  for _, p in whole.named for r in range(backend.world_size))
    cap = max(largest, max(whole.peak_extra(r) for r in range(backend.world_size)) // 4)
    capped = plan_state(src, dst, itemsize=sizes, cap=cap)
    rng = random.Random(7)
    state = {}
    for name, s in src.items():
        full = np.array([rng.randint(-100, 100) for _ in range(int(np.prod(s.shape)))],
                        dtype=np.float64).reshape(s.shape)
        if s.view.coordinate(rank) is not None:
            state[name] = torch.from_numpy(s.local(full, rank)).to(dtypes[name])
    plain = reshard_state({n: reshard(src[n], dst[n]) for n in src}, state, dtypes=dtypes)
    batches: list[list[tuple[str, int, str, int]]] = []  # per batch: (op, peer, dtype, bytes)
    real = dist.batch_isend_irecv

    def counting(ops: list[Any]) -> Any:
        batches.append([(op.op.__name__, op.peer, str(op.tensor.dtype),
                         op.tensor.numel() * op.tensor.element_size()) for op in ops])
        return real(ops)

    dist.batch_isend_irecv = counting
    try:
        got = reshard_state(capped, state, dtypes=dtypes)
    finally:
        dist.batch_isend_irecv = real
    same = _same(plain, got)
    write_report(out_dir, rank, _overlapped(capped, state, dtypes, plain) | {
        "cap": cap, "buckets": capped.buckets, "peak_extra": capped.peak_extra(rank),
        "unbucketed_peak": whole.peak_extra(rank), "same": same,
        "destination": sum(v is not None for v in got.values()),
        "messages": len(capped.messages(rank)), "batches": batches})


def _same(want: dict[str, Any], got: dict[str, Any]) -> dict[str, bool]:
    """Per tensor of ``want``: whether ``got`` has it bit for bit, dtype included (or neither
    has a block of it)."""
    import torch

    return {n: (want[n] is None and got.get(n, 0) is None) or (
        got.get(n) is not None and want[n] is not None and got[n].dtype == want[n].dtype
        and torch.equal(got[n], want[n])) for n in want}


def _overlapped(capped: Any, state: dict[str, Any], dtypes: dict[str, Any],
                plain: dict[str, Any]) -> dict[str, Any]:
    """The same state moved with ``async_op=True`` while this thread all-reduces on the world
    group (the one the move's messages use) 20 times: each bucket's tensors as they land,
    then all at once, against the blocking call's (``plain``); the sums."""
    import torch
    import torch.distributed as dist

    from backend import reshard_state

    work = reshard_state(capped, state, dtypes=dtypes, async_op=True)
    sums = []
    for _ in range(20):  # computing (and communicating) while the state moves
        t = torch.ones(4)
        dist.all_reduce(t)
        sums.append(t.tolist() == [float(dist.get_world_size())] * 4)
    streamed: dict[str, Any] = {}
    for k in range(work.buckets):
        streamed.update(work.bucket(k, timeout=300))
    final = work.wait(timeout=300)
    return {"async_same": _same(plain, final), "streamed_same": _same(plain, streamed),
            "async_done": work.is_completed(), "async_buckets": work.buckets,
            "overlap_sums": all(sums)}


def _mismatch(out_dir: str, backend: Any) -> None:
    import torch

    from backend import reshard_state
    from mesh import MeshView, Shard, Sharding, reshard

    rank = backend.rank
    src, dst = MeshView.from_ranks([0, 1, 2, 3], ["a"]), MeshView.from_ranks([4, 5, 6, 7], ["b"])
    plans = {n: reshard(Sharding(src, (Shard(0),), (8, 3)), Sharding(dst, (Shard(0),), (8, 3)))
             for n in ("x", "y")}
    full = torch.arange(24, dtype=torch.float64).reshape(8, 3)
    state = {"x": full[2 * rank:2 * rank + 2].clone(),
             "y": full[2 * rank:2 * rank + 2].float()} if rank < 4 else {}
    dtypes = {"x": torch.float32 if rank == 5 else torch.float64, "y": torch.float32}
    report: dict[str, Any] = {}
    try:
        got = reshard_state(plans, state, dtypes=dtypes)
        report["got"] = {n: (str(v.dtype), v.tolist()) for n, v in got.items() if v is not None}
    except Exception as e:
        report["raised"] = [type(e).__name__, str(e)]
    write_report(out_dir, rank, report)


def _convert(out_dir: str, backend: Any) -> None:
    import torch

    from backend import reshard_state
    from mesh import MeshView, Partial, Replicate, Shard, Sharding, reshard

    rank = backend.rank
    train, serve, mid = (MeshView.from_ranks(r, [n]) for r, n in (
        ([0, 1, 2, 3], "a"), ([4, 5, 6, 7], "b"), ([2, 3, 4, 5], "c")))
    full = torch.arange(48, dtype=torch.float64).reshape(8, 6) / 7  # not exact in bf16

    def on(view: Any, *placements: Any) -> Any:
        return Sharding(view, placements, (8, 6))

    plans = {"w": reshard(on(train, Shard(0)), on(serve, Shard(1))),
             "v": reshard(on(train, Shard(1)), on(serve, Shard(0))),
             "o": reshard(on(train, Shard(0)), on(mid, Shard(1))),
             "p": reshard(on(train, Partial()), on(serve, Replicate()))}
    kinds = {"w": torch.bfloat16, "v": torch.float32, "o": torch.bfloat16, "p": torch.float32}
    state = {n: torch.from_numpy(plan.src.local(full.numpy(), rank)).to(kinds[n])
             for n, plan in plans.items() if n != "p" and rank < 4}
    if rank < 4:  # contributions (r + 1) / 10 of the full tensor: they sum to it
        state["p"] = (full * (rank + 1) / 10).float()
    into = {"v": torch.full(plans["v"].dst.local_shape(rank), -1.0, dtype=torch.float64)} \
        if rank >= 4 else {}
    got = reshard_state(plans, state, dtypes={"w": torch.float16, "o": torch.float32,
                                              "p": torch.float64},
                        source_dtypes=kinds, into=into)
    write_report(out_dir, rank, {
        "got": {n: (str(v.dtype), v.tolist()) for n, v in got.items() if v is not None},
        "into_kept": {n: got[n] is t for n, t in into.items()}})


def _other_plan(out_dir: str, backend: Any) -> None:
    import torch

    from backend import reshard_state
    from mesh import MeshView, Shard, Sharding, reshard

    rank = backend.rank
    src, dst = MeshView.from_ranks([0, 1, 2, 3], ["a"]), MeshView.from_ranks([4, 5, 6, 7], ["b"])
    full = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    report: dict[str, Any] = {}
    for call, odd in (("first", 3), ("second", None), ("third", None)):
        wrong = Shard(1) if rank == odd else Shard(0)  # the same bytes between every pair
        plans = {"x": reshard(Sharding(src, (Shard(0),), (8, 8)), Sharding(dst, (wrong,), (8, 8)))}
        state = {"x": full[2 * rank:2 * rank + 2].clone()} if rank < 4 else {}
        into = {"x": torch.zeros(3, 8)} if call == "third" and rank == 6 else None  # (2, 8)
        try:
            got = reshard_state(plans, state, source_dtypes={"x": torch.float32}, into=into)
            report[call] = ["got", None if got["x"] is None else got["x"].tolist()]
        except Exception as e:
            report[call] = [type(e).__name__, str(e)]
    write_report(out_dir, rank, report)


def _group_ranks(out_dir: str, backend: Any) -> None:
    """Two groups of their own, ranks 0-3 and 4-7, each moving its own tensor (an arange,
    plus 1,000 in the second) with plans over the group's own ranks 0-3 (``group_ranks``):
    the same numbers in both groups, at once.  Each rank's block against the full tensor
    sliced for it, and the error of a rank calling with the other group."""
    import torch
    import torch.distributed as dist

    from backend import reshard_state
    from mesh import MeshView, Shard, Sharding, reshard

    rank = backend.rank
    groups = [dist.new_group([0, 1, 2, 3]), dist.new_group([4, 5, 6, 7])]
    mine, other = groups[rank // 4], groups[1 - rank // 4]
    full = torch.arange(64, dtype=torch.float32).reshape(8, 8) + 1000 * (rank // 4)
    src, dst = MeshView.from_ranks([0, 1], ["a"]), MeshView.from_ranks([0, 1, 2, 3], ["b"])
    plan = reshard(Sharding(src, (Shard(0),), (8, 8)), Sharding(dst, (Shard(1),), (8, 8)))
    local = rank % 4
    state = {"x": full[4 * local:4 * local + 4].clone()} if local < 2 else {}
    got = reshard_state({"x": plan}, state, group=mine, group_ranks=True,
                        source_dtypes={"x": torch.float32})["x"]
    right = got is not None and torch.equal(got, full[:, 2 * local:2 * local + 2])
    try:
        reshard_state({"x": plan}, state, group=other, group_ranks=True)
        refused = ""
    except Exception as e:
        refused = f"{type(e).__name__}: {e}"
    write_report(out_dir, rank, {"right": right, "refused": refused})


def _other_ranks(out_dir: str, backend: Any) -> None:
    """Ranks 0-6 move a tensor from ranks 0-3 to 4-7; rank 7 is given a plan from ranks 0-3
    to itself alone (other ranks: its agreement counts in another key space).  Every rank's
    error and how long it took (the last mode: the ranks' counts of calls over ranks 0-7 now
    differ, as after any collective's failure)."""
    import time

    import torch

    from backend import reshard_state
    from mesh import MeshView, Shard, Sharding, reshard

    rank = backend.rank
    src = MeshView.from_ranks([0, 1, 2, 3], ["a"])
    dst = MeshView.from_ranks([7] if rank == 7 else [4, 5, 6, 7], ["b"])
    plans = {"x": reshard(Sharding(src, (Shard(0),), (8, 8)), Sharding(dst, (Shard(0),), (8, 8)))}
    state = {"x": torch.ones(2, 8)} if rank < 4 else {}
    start = time.monotonic()
    try:
        reshard_state(plans, state, source_dtypes={"x": torch.float32})
        got = ["got", ""]
    except Exception as e:
        got = [type(e).__name__, str(e)]
    write_report(out_dir, rank, {"error": got, "seconds": time.monotonic() - start})


def _submesh(out_dir: str, backend: Any) -> None:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from backend import redistribute

    mesh2d = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    full = torch.arange(48.0).reshape(8, 6) + 100 * (backend.rank // 4)  # a copy per replica
    dt = distribute_tensor(full, mesh2d["tp"], [Shard(0)])
    report: dict[str, Any] = {}
    for name, dst, placements in (("within", mesh2d["tp"], [Shard(1)]),
                                  ("across", mesh2d, [Replicate(), Shard(1)])):
        try:
            report[name] = ["got", redistribute(dt, dst, placements).to_local().tolist()]
        except Exception as e:
            report[name] = [type(e).__name__, str(e)]
    write_report(out_dir, backend.rank, report)


CODES = ("S0", "S1", "R", "SS0/2")


def partial_pairs() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(source, destination) placement codes over (2, 4): a source with a Partial ("P" +
    op) and one reduction; a destination of ``CODES``, or the source's Partial kept."""
    import itertools

    out = []
    for op in ("sum", "avg", "max"):
        part = "P" + op
        for src in itertools.product((*CODES, part), repeat=2):
            if part not in src:
                continue
            for dst in itertools.product(*[(*CODES, part) if s == part else CODES
                                           for s in src]):
                out.append((src, dst))
    return out


def _code(code: str) -> Any:
    from torch.distributed.tensor import Partial

    return Partial(code[1:]) if code.startswith("P") else _torch_placement(code)


def _contribution(s: Any, full: Any, rank: int) -> Any:
    """Rank's local tensor of the partial source ``s`` of ``full``: contributions that all
    differ and reduce to ``full`` (sum: weights (k + 1) / sum; avg: their p-fold; max: full
    less k; min: full plus k; ``k`` the rank's partial coordinate, numbered)."""
    from mesh import Partial, Replicate, Sharding

    base = Sharding(s.view, [Replicate() if isinstance(p, Partial) else p
                             for p in s.placements], s.shape).local(full, rank)
    c = s.view.coordinate(rank)
    k, p = 0, 1
    for i in s.partial_dims:
        k, p = k * s.view.shape[i] + c[i], p * s.view.shape[i]
    op = s.placements[s.partial_dims[0]].op
    if op == "sum":
        return base * (2 * (k + 1) / (p * (p + 1)))
    if op == "avg":
        return base * (2 * (k + 1) / (p + 1))
    return base - k if op == "max" else base + k


def _partial(out_dir: str, backend: Any) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch_bytes import TorchBytes

    from backend import init_device_mesh, redistribute
    from mesh import MeshView, Partial, Shard, Sharding, StridedShard, reshard
    from mesh import Replicate as OurReplicate

    def ours(code: str) -> Any:
        if code.startswith("P"):
            return Partial(code[1:])
        if code == "R":
            return OurReplicate()
        return StridedShard(0, 2) if code.startswith("SS") else Shard(int(code[1:]))

    rank = backend.rank
    grid = init_device_mesh("cpu", (2, 4), mesh_dim_names=("a", "b"), backend=backend)
    tm = grid.to_torch()
    view = MeshView.from_shape((2, 4), ("a", "b"))
    posted: list[int] = []
    real = dist.batch_isend_irecv

    def counting(ops: list[Any]) -> Any:
        posted.append(sum(op.tensor.numel() for op in ops
                          if op.op is dist.isend and op.tensor.dtype == torch.uint8))
        return real(ops)

    rows = []
    for shape in ((7, 5), (8, 6)):
        full = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
        for src_codes, dst_codes in partial_pairs():
            if shape == (8, 6) and "Psum" not in src_codes:
                continue
            src = Sharding(view, [ours(c) for c in src_codes], shape)
            dst = Sharding(view, [ours(c) for c in dst_codes], shape)
            local = torch.from_numpy(np.ascontiguousarray(_contribution(src, full, rank)))
            dt = DTensor.from_local(local, tm, [_code(c) for c in src_codes], run_check=False,
                                    shape=torch.Size(shape), stride=torch.empty(shape).stride())
            count = TorchBytes()
            try:  # torch fails some (_StridedShard after an all-reduce) on every rank alike
                with count:
                    theirs = dt.redistribute(tm, [_code(c) for c in dst_codes]).to_local()
            except RuntimeError:
                theirs = None
            posted.clear()
            dist.batch_isend_irecv = counting
            try:
                got = redistribute(dt, grid, [_code(c) for c in dst_codes]).to_local()
            finally:
                dist.batch_isend_irecv = real
            plan = reshard(src, dst, itemsize=8)
            if dst.partial_dims:
                want, torch_right = theirs, theirs is not None
            else:
                want = torch.from_numpy(dst.local(full, rank))
                torch_right = theirs is not None and theirs.shape == want.shape and \
                    torch.allclose(theirs, want)
            right = want is not None and got.shape == want.shape and torch.allclose(got, want)
            rows.append([" ".join(src_codes), " ".join(dst_codes), list(shape), count.sent,
                         plan.bytes_moved, bool(right), bool(torch_right), sum(posted),
                         plan.partial, plan.rounds])
    write_report(out_dir, rank, {"rows": rows})


def _mismatch_partial(out_dir: str, backend: Any) -> None:
    """A Partial("sum") source on ranks 0-3 (8 x 3, float64), replicated on ranks 4-7: its
    sums happen on the way (reduce-scatter then gather); rank 1 holds float32.  Every
    rank reports what it raised, or what it got."""
    import torch

    from backend import reshard_tensor
    from mesh import MeshView, Partial, Replicate, Sharding, reshard

    rank = backend.rank
    plan = reshard(Sharding(MeshView.from_ranks([0, 1, 2, 3], ["a"]), (Partial(),), (8, 3)),
                   Sharding(MeshView.from_ranks([4, 5, 6, 7], ["b"]), (Replicate(),), (8, 3)))
    full = torch.arange(24, dtype=torch.float64).reshape(8, 3)
    local = None if rank >= 4 else (full / 4).to(torch.float32 if rank == 1 else torch.float64)
    report: dict[str, Any] = {"partial": plan.partial}
    try:
        got = reshard_tensor(plan, local, dtype=torch.float64)
        report["got"] = None if got is None else got.tolist()
    except Exception as e:
        report["raised"] = [type(e).__name__, str(e)]
    write_report(out_dir, rank, report)


def _save(out_dir: str, backend: Any) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor

    from backend import init_device_mesh

    line = init_device_mesh("cpu", (8,), mesh_dim_names=("w",), backend=backend)
    grid = init_device_mesh("cpu", (2, 4), mesh_dim_names=("a", "b"), backend=backend)
    state = {"w": distribute_tensor(torch.arange(120.).reshape(12, 10), line.to_torch(),
                                    [Shard(0)]),
             "m": distribute_tensor(torch.arange(64, dtype=torch.int64).reshape(8, 8),
                                    grid.to_torch(), [Shard(0), Shard(1)])}
    dcp.save(state, checkpoint_id=os.path.join(out_dir, "ckpt"))
    write_report(out_dir, backend.rank, {"saved": True})


def _sync(out_dir: str, backend: Any) -> None:
    import shutil

    import torch
    import torch.distributed.checkpoint as dcp
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from backend import bind, redistribute
    from mesh import MeshView

    rank = backend.rank
    train = bind(MeshView.from_ranks(TRAIN, ("dp", "tp")), backend)
    serve = bind(MeshView.from_ranks(SERVE, ("tp",)), backend)
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH))
    full = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    result: dict[str, Any] = {"rank": rank, "role": "train" if rank < 4 else "serve"}
    ckpt = os.path.join(out_dir, "ckpt")
    if rank < 4:
        model = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(),
                              nn.Linear(2 * WIDTH, WIDTH))
        model.load_state_dict(full)
        parallelize_module(model, train["tp"].to_torch(),
                           {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=train["dp"].to_torch())
        state = {k: v for k, v in model.state_dict().items()}
        result["placements"] = {k: [repr(p) for p in v.placements] for k, v in state.items()}
        mesh = state["0.weight"].device_mesh
    else:  # the trainer's mesh as this rank sees it: not a member
        mesh = TorchDeviceMesh("cpu", TRAIN, mesh_dim_names=("dp", "tp"), _init_backend=False)
        state = {k: DTensor.from_local(torch.empty(0), mesh,
                                       [_torch_placement(c) for c in tp_], run_check=False,
                                       shape=torch.Size(shape),
                                       stride=torch.empty(shape).stride())
                 for k, (shape, tp_, _) in LAYOUT.items()}
    backend_world = backend  # every rank: one order
    torch.distributed.barrier()
    t0 = time.monotonic()
    synced = {k: redistribute(state[k], serve, [_torch_placement(c) for c in LAYOUT[k][2]])
              for k in sorted(LAYOUT)}
    torch.distributed.barrier()
    result["sync_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    if rank < 4:
        group = bind(MeshView.from_ranks([0, 1, 2, 3], ("all",)), backend_world).get_group("all")
        dcp.save(state, checkpoint_id=ckpt, process_group=group)
    torch.distributed.barrier()
    if rank >= 4:
        group = serve.get_group("tp")
        target = {k: distribute_tensor(torch.zeros(shape), serve.to_torch(),
                                       [_torch_placement(c) for c in sp])
                  for k, (shape, _, sp) in LAYOUT.items()}
        dcp.load(target, checkpoint_id=ckpt, process_group=group)
    torch.distributed.barrier()
    result["dcp_s"] = time.monotonic() - t0
    if rank >= 4:
        result["vs_dcp"] = {k: float((synced[k].to_local() - target[k].to_local()).abs().max())
                            for k in LAYOUT}
        result["vs_full"] = {k: float((synced[k].full_tensor() - full[k]).abs().max())
                             for k in LAYOUT}
        result["local_shapes"] = {k: list(synced[k].to_local().shape) for k in LAYOUT}
    torch.distributed.barrier()
    if rank == 0:
        shutil.rmtree(ckpt, ignore_errors=True)
    write_report(out_dir, rank, result)


MODES = {"pairs": _pairs, "sync": _sync, "state": _state, "save": _save, "partial": _partial,
         "mismatch_partial": _mismatch_partial, "mismatch": _mismatch, "convert": _convert,
         "other_plan": _other_plan, "submesh": _submesh, "buckets": _buckets,
         "other_ranks": _other_ranks, "group_ranks": _group_ranks}
"""MODE's words: several, comma-separated, run in one world in turn, each writing its reports
under ``OUT_DIR/<mode>/`` (one alone writes them in ``OUT_DIR``)."""


def main() -> None:
    import torch

    from backend import GlooBackend

    torch.set_num_threads(1)
    modes, out = sys.argv[1].split(","), sys.argv[2]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}")
    start_together(out, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    backend = GlooBackend.from_env(timeout=timedelta(seconds=60))
    for mode in modes:  # one world, the modes one after another, each from a barrier
        here = out if len(modes) == 1 else os.path.join(out, mode)
        os.makedirs(here, exist_ok=True)
        MODES[mode](here, backend)
        torch.distributed.barrier()  # every rank done (rank 0 holds the store: leave together)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
