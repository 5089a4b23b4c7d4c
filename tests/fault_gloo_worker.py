"""One process of a 4-rank Gloo world for ``tests/test_faults_gloo.py``: one fault per mode.

Run as ``python tests/fault_gloo_worker.py MODE OUT_DIR`` with torchrun's environment.  The
mesh is (dp, tp) = (2, 2) with both dims' timeouts :data:`TIMEOUT_S` (dp groups {0, 2} and
{1, 3}, tp groups {0, 1} and {2, 3}).  Each rank writes ``rank<r>.json``: for every group
request, the outcome (``ok`` or the error's type and message) and when it started and ended
(seconds since a common start in the store's clock domain: wall time); then whether a
collective on each of its groups works.  The worker asserts nothing.

Modes (the issue's scenarios):

- ``late``: every rank asks dp then tp, rank 3 starts :data:`LATE_S` late; every rank that
  failed a request asks once more (dp then tp), then all_reduces on both groups.
- ``misorder``: ranks 1 and 2 ask tp then dp, ranks 0 and 3 dp then tp.
- ``skip``: every rank asks dp then tp, except rank 3, which never asks dp; then the ranks
  with groups all_reduce on them; then every rank shuts its backend down, starts a new
  one (a new world, on ``SECOND_MASTER_PORT``) and all_reduces on it.
- ``killed``: every rank creates its groups and all_reduces; then rank 3 exits, and the
  others' next all_reduce on tp and dp fails; they report ``backend.diagnose`` of that
  error, then shut down (twice), start a new backend and all_reduce on it.
- ``abort``: every rank creates tp (dp stays lazy) and all_reduces on it; then rank 3 exits,
  and the others call ``mesh.abort()`` (torch 2.15's name): it must return without creating
  dp (its creation would wait on the dead rank), forget tp, and ``shutdown()`` must then
  return too.  Each reports the dims created before and after, and how long each step took.
- ``retry_after_go``: every rank asks tp; on rank 1 the creation fails after torch made the
  group (after the members met), and rank 1 asks again: that retry must wait for a peer
  that will not come, not pass alone.
- ``killed_waiting``: rank 3 asks for the 4-rank group "all" (a tagged flatten) and is
  SIGKILLed half a second into its wait; the others ask at 1.5 s (all four tickets are
  taken, so torch's creation starts and cannot finish), then ask once more.
- ``timeouts``: each rank's backend has another default timeout (60 + rank s) and the dims
  none of their own: the groups still meet.  Then every rank closes its side of the
  barrier and rank 0 reports the barrier keys left in the store.

Round 4 (issue 29), in a world the worker starts itself (so a backend's ``shutdown()`` keeps
the store, as with an agent's store), groups with :data:`SHORT_S` timeouts:

- ``live`` (nobody dies), in phases: ``cycles``: :data:`CYCLES` times, a new backend creates
  tp and the 4-rank group "all", all_reduces on both and shuts down (the same names every
  cycle); ``retry``: on ranks 1 and 3 the first tp creation fails inside torch's creation
  (before it connects: their partners wait in torch until the timeout), and every rank tries
  up to 4 times; ``threads``: :data:`THREAD_ROUNDS` times, dp, tp and "all" asked at once
  from three threads (started up to 30 ms apart, in opposite orders on odd ranks);
  ``ctrl_c``: ranks 0, 1, 2 ask the 4-rank group "i1" (rank 3 never does) and rank 0 gets a
  real SIGINT 0.5 s into its wait;
  ``ticket``: rank 0 gets a SIGINT while it takes its ticket of "i2" (the ticket is counted,
  its value lost), then asks again at once; the others ask 1 s later.
- ``kills``: two pairs at once, tp {0, 1} and {2, 3}, each partner arriving 0.5 s after the
  other waits: rank 1 is SIGKILLed holding the round's last ticket before it commits, rank 3
  right after it commits; the survivors then ask once more.
"""

from __future__ import annotations

import datetime
import functools
import os
import random
import signal
import sys
import threading
import time
from typing import Any

from gloo_launch import write_report

TIMEOUT_S = 5.0
LATE_S = 7.0
VICTIM = 3
SHORT_S = 3.0  # the round-4 scenarios' group timeout
CYCLES = 12
THREAD_ROUNDS = 6


def _request(mesh: Any, dim: str, log: list[dict[str, Any]], t0: float) -> Any:
    start = time.time() - t0
    try:
        group = mesh.get_group(dim)
        log.append({"dim": dim, "ok": True, "start": start, "end": time.time() - t0})
        return group
    except Exception as e:
        log.append({"dim": dim, "ok": False, "start": start, "end": time.time() - t0,
                    "error": type(e).__name__, "message": str(e)[:2000],
                    "missing": list(getattr(e, "missing", ())),
                    "builtin_timeout": isinstance(e, TimeoutError)})
        return None


def _works(dist: Any, torch: Any, group: Any, rank: int) -> Any:
    """The sum of the ranks of ``group`` from an all_reduce, or the error."""
    if group is None:
        return None
    t = torch.tensor([float(rank)])
    try:
        dist.all_reduce(t, group=group)
        return float(t.item())
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]


def _main(mode: str, out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from backend import GlooBackend, GroupOptions, init_device_mesh

    rank = int(os.environ["RANK"])
    backend = GlooBackend.from_env(timeout=timedelta(seconds=60 + (rank if mode == "timeouts"
                                                                    else 0)))
    short = GroupOptions(timeout=timedelta(seconds=TIMEOUT_S))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend,
                            backend_override=None if mode == "timeouts" else
                            {"dp": short, "tp": short})
    dist.barrier()  # a common start
    t0 = time.time()
    log: list[dict[str, Any]] = []
    result: dict[str, Any] = {"rank": rank, "log": log}
    groups: dict[str, Any] = {}
    if mode in ("late", "skip"):
        if mode == "late" and rank == VICTIM:
            time.sleep(LATE_S)
        for dim in ("dp", "tp"):
            if mode == "skip" and rank == VICTIM and dim == "dp":
                continue
            groups[dim] = _request(mesh, dim, log, t0)
        if mode == "late":
            for dim in ("dp", "tp"):  # one more try of what failed
                if groups[dim] is None:
                    groups[dim] = _request(mesh, dim, log, t0)
    elif mode == "misorder":
        for dim in (("tp", "dp") if rank in (1, 2) else ("dp", "tp")):
            groups[dim] = _request(mesh, dim, log, t0)
    elif mode == "retry_after_go":
        _fail_once_after_torch(rank)
        groups["tp"] = _request(mesh, "tp", log, t0)
        if groups["tp"] is None:
            groups["tp"] = _request(mesh, "tp", log, t0)  # the retry
    elif mode == "killed_waiting":
        everyone = mesh._flatten("all", GroupOptions(tag="all",
                                                     timeout=timedelta(seconds=TIMEOUT_S)))
        if rank == VICTIM:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
            everyone.get_group()
        time.sleep(1.5)
        for _ in range(2):  # the first request, then a retry
            _request(everyone, "all", log, t0)
        write_report(out_dir, rank, result)
        if rank == 0:  # the store lives here: let the others finish with it (no barrier:
            time.sleep(3.0)  # rank 3 is dead)
        backend.shutdown()
        os._exit(0)
    elif mode == "timeouts":
        for dim in ("dp", "tp"):
            groups[dim] = _request(mesh, dim, log, t0)
    elif mode == "abort":
        groups["tp"] = _request(mesh, "tp", log, t0)
        result["before"] = _works(dist, torch, groups["tp"], rank)
        if rank == VICTIM:
            time.sleep(0.5)
            os._exit(17)
        time.sleep(1.0)
        result["created_before"] = [r.dim for r in backend.created]
        _timed(result, "abort", mesh.abort)
        result["created_after"] = [r.dim for r in backend.created]
        write_report(out_dir, rank, result)
        _timed(result, "shutdown", backend.shutdown)
        write_report(out_dir, rank, result)
        os._exit(0)
    elif mode == "killed":
        for dim in ("dp", "tp"):
            groups[dim] = _request(mesh, dim, log, t0)
        result["before"] = {d: _works(dist, torch, g, rank) for d, g in groups.items()}
        if rank == VICTIM:
            time.sleep(0.5)
            os._exit(17)
        time.sleep(1.0)
        explained = {}
        for dim in ("tp", "dp"):
            try:
                dist.all_reduce(torch.ones(1), group=groups[dim])
                explained[dim] = None
            except Exception as e:
                why = backend.diagnose(e, groups[dim])
                explained[dim] = {"type": type(why).__name__, "message": str(why)[:1500],
                                  "lost": list(getattr(why, "lost", ()))}
        result["explained"] = explained
        write_report(out_dir, rank, result)
        t = time.time()
        backend.shutdown()
        backend.shutdown()  # idempotent
        result["shutdown_s"] = time.time() - t
        write_report(out_dir, rank, result)
        os._exit(0)
    if mode != "killed":
        dist.barrier()  # every request is done before a collective waits on a group's timeout
        result["works"] = {d: _works(dist, torch, g, rank) for d, g in groups.items()}
    if mode == "timeouts":
        backend._rendezvous.close()  # type: ignore[union-attr]
        dist.barrier()
        if rank == 0:
            store = dist.distributed_c10d._get_default_store()
            result["keys"] = sorted(k for k in store.list_keys() if "meshlayout" in k)
    write_report(out_dir, rank, result)
    dist.barrier()
    backend.shutdown()
    if mode == "skip":  # the process can start a new backend (and world) after a shutdown
        # A new world needs a store no rank still holds: on another port (as an elastic
        # restart uses a new rendezvous); the old one on rank 0 may outlive this rank's
        # shutdown for a moment.
        os.environ["MASTER_PORT"] = os.environ["SECOND_MASTER_PORT"]
        again = GlooBackend.from_env(timeout=timedelta(seconds=30))
        fresh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=again)
        result["again"] = _works(dist, torch, fresh.get_group("tp"), rank)
        dist.barrier()
        again.shutdown()
        write_report(out_dir, rank, result)
    os._exit(0)


def _timed(result: dict[str, Any], key: str, act: Any) -> None:
    """Run ``act()``: ``result[key]`` is "ok" or the error, ``result[key + "_s"]`` its time."""
    t = time.time()
    try:
        act()
        result[key] = "ok"
    except Exception as e:
        result[key] = f"{type(e).__name__}: {e}"
    result[f"{key}_s"] = time.time() - t


def _attempt(mesh: Any, dim: str, t0: float) -> tuple[Any, dict[str, Any]]:
    """One request of ``dim``: (group or None, what happened), whatever it raises
    (KeyboardInterrupt included)."""
    start = time.time() - t0
    try:
        group = mesh.get_group(dim)
        return group, {"dim": dim, "ok": True, "start": start, "end": time.time() - t0,
                       "name": str(group.group_name)}
    except BaseException as e:
        return None, {"dim": dim, "ok": False, "start": start, "end": time.time() - t0,
                      "error": type(e).__name__, "message": str(e)[:2000],
                      "missing": list(getattr(e, "missing", ()))}


class _Tripwire:
    """A rank's barrier connection that does ``act`` right after (or instead of returning
    from) the first call ``when(op, args)`` matches."""

    def __init__(self, store: Any, when: Any, act: Any) -> None:
        self._store, self._when, self._act = store, when, act

    def __getattr__(self, op: str) -> Any:
        method = getattr(self._store, op)

        def call(*args: Any) -> Any:
            out = method(*args)
            if self._when is not None and self._when(op, args):
                self._when = None
                self._act()
            return out

        return call


def _trip(backend: Any, when: Any, act: Any) -> None:
    """Make the calling thread's barrier connection a :class:`_Tripwire`."""
    rz = backend._rendezvous
    wire = _Tripwire(rz._store(), when, act)
    rz._local.store = wire


def _ticket(op: str, args: tuple[Any, ...]) -> bool:
    return op == "add" and "/t/" in str(args[0])


def _commit(op: str, args: tuple[Any, ...]) -> bool:
    return op == "compare_set" and "/d/" in str(args[0]) and str(args[2]) == str(1 << 40)


def _sum(dist: Any, torch: Any, group: Any, rank: int) -> Any:
    return _works(dist, torch, group, rank)


def _round4(mode: str, out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from backend import GlooBackend, GroupOptions, init_device_mesh

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=4,
                            timeout=timedelta(seconds=60))
    short = timedelta(seconds=SHORT_S)
    opts = GroupOptions(timeout=short)
    result: dict[str, Any] = {"rank": rank}

    def mesh_of(backend: Any) -> Any:
        return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend,
                                backend_override={"dp": opts, "tp": opts})

    def tagged(mesh: Any, tag: str) -> Any:
        return mesh._flatten(tag, GroupOptions(tag=tag, timeout=short))

    dist.barrier()
    t0 = time.time()
    if mode == "kills":
        backend = GlooBackend(timeout=short)
        mesh = mesh_of(backend)
        if rank in (1, 3):
            time.sleep(0.5)  # the partner waits: this rank's ticket is the round's last
            kill = functools.partial(os.kill, os.getpid(), signal.SIGKILL)
            _trip(backend, _ticket if rank == 1 else _commit, kill)
        log = []
        for _ in range(2):  # the request, then one retry
            log.append(_attempt(mesh, "tp", t0)[1])
        result["log"] = log
        write_report(out_dir, rank, result)
        end = time.time() + 30
        while rank == 0 and time.time() < end and not os.path.exists(
                os.path.join(out_dir, "rank2.json")):  # the store lives here: rank 2 uses it
            time.sleep(0.1)
        os._exit(0)

    # ---- live: nobody dies ----
    cycles = []
    for _ in range(CYCLES):  # the same names every cycle, the store kept
        backend = GlooBackend(timeout=short)
        mesh = mesh_of(backend)
        entry: dict[str, Any] = {}
        for dim, m in (("tp", mesh), ("all", tagged(mesh, "all"))):
            group, got = _attempt(m, dim, t0)
            entry[dim] = got
            entry[dim + "_sum"] = _sum(dist, torch, group, rank)
        cycles.append(entry)
        backend.shutdown()
    result["cycles"] = cycles
    dist.barrier()

    backend = GlooBackend(timeout=short)
    mesh = mesh_of(backend)
    if rank in (1, 3):
        _fail_once_in_torch()
    retry = []
    for _ in range(4):
        group, got = _attempt(mesh, "tp", t0)
        retry.append(got)
        if group is not None:
            break
    result["retry"] = retry
    result["retry_sum"] = _sum(dist, torch, group, rank)
    dist.barrier()
    backend.shutdown()

    rounds = []
    for i in range(THREAD_ROUNDS):  # dp, tp and "all" at once from three threads
        backend = GlooBackend(timeout=short)
        mesh = mesh_of(backend)
        order = [("dp", mesh), ("tp", mesh), ("all", tagged(mesh, "all"))]
        if rank % 2:
            order.reverse()
        got: dict[str, Any] = {}
        groups: dict[str, Any] = {}
        rng = random.Random(100 * rank + i)
        delays = sorted(rng.uniform(0.0, 0.03) for _ in order)

        def ask(delay: float, dim: str, m: Any, groups: dict[str, Any],
                got: dict[str, Any]) -> None:
            time.sleep(delay)
            groups[dim], got[dim] = _attempt(m, dim, t0)

        workers = [threading.Thread(target=ask, args=(d, dim, m, groups, got))
                   for d, (dim, m) in zip(delays, order)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(4 * SHORT_S + 10)
        dist.barrier()
        got["sums"] = {d: _sum(dist, torch, groups.get(d), rank) for d in ("dp", "tp", "all")}
        rounds.append(got)
        dist.barrier()
        backend.shutdown()
    result["threads"] = rounds

    backend = GlooBackend(timeout=short)
    mesh = mesh_of(backend)
    # Ctrl-C raises KeyboardInterrupt, as in a terminal (a launcher may start us with SIGINT
    # ignored, and Python then leaves it so)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    store = dist.distributed_c10d._get_default_store()
    if rank in (1, 2):  # about to ask: on a busy machine a rank may start a second late
        store.set(f"ctrl_c/ready/{rank}", "1")
    if rank == 0:  # the SIGINT 0.5 s into rank 0's wait, once ranks 1 and 2 ask too
        store.wait(["ctrl_c/ready/1", "ctrl_c/ready/2"], datetime.timedelta(seconds=60))
        main = threading.main_thread().ident
        threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()
    t1 = time.time()
    result["ctrl_c"] = _attempt(tagged(mesh, "i1"), "i1", t1)[1] if rank != 3 else None
    dist.barrier()
    if rank == 0:
        main = threading.main_thread().ident
        _trip(backend, _ticket, functools.partial(signal.pthread_kill, main, signal.SIGINT))
    else:
        time.sleep(1.0)
    i2 = tagged(mesh, "i2")
    ticket = []
    for _ in range(2):  # rank 0 asks again at once after the interrupt
        group, got = _attempt(i2, "i2", t0)
        ticket.append(got)
        if group is not None or got["error"] != "KeyboardInterrupt":
            break
    result["ticket"] = ticket
    dist.barrier()
    result["ticket_sum"] = _sum(dist, torch, group, rank)
    write_report(out_dir, rank, result)
    backend.shutdown()
    dist.barrier()  # rank 0 hosts the store: nobody uses it after this
    dist.destroy_process_group()
    os._exit(0)


def _fail_once_in_torch() -> None:
    """This rank's first tp creation fails inside torch's creation, before it connects (its
    partner, inside torch too, waits there until its timeout)."""
    import backend._c10d._torch_groups as tg

    real, failed = tg._create, []

    def flaky(spec: Any, *args: Any, **kw: Any) -> Any:
        if spec.dim == "tp" and not failed:
            failed.append(True)
            raise RuntimeError("injected: torch's creation failed on this rank")
        return real(spec, *args, **kw)

    tg._create = flaky


def _fail_once_after_torch(rank: int) -> None:
    """On rank 1, the first tp creation raises after torch created the group."""
    import backend._c10d._torch_groups as tg

    real, failed = tg._create, []

    def flaky(spec: Any, *args: Any) -> Any:
        group = real(spec, *args)
        if rank == 1 and spec.dim == "tp" and not failed:
            failed.append(True)
            raise RuntimeError("injected: the creation failed on rank 1 after the members met")
        return group

    tg._create = flaky


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    if sys.argv[1] in ("live", "kills"):
        _round4(sys.argv[1], sys.argv[2])
    _main(sys.argv[1], sys.argv[2])
