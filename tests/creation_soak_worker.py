"""A worker of the creation soak (``bench/creation_soak.py``): group creation under faults.

The store lives in the launching process (as torchrun's agent's does), so it outlives any
worker and a backend's ``shutdown()`` keeps it.  Configured by the environment (``SOAK_*``):

- ``MODE=random``: a (dp, cp, tp) = (2, 2, 2) mesh over 8 ranks; each rank asks three
  groups, dp, tp and "all" (the whole mesh flattened, tagged: two ranks share two groups),
  from ``THREADS`` threads (1: dp, tp, all in order; 2: dp, tp | all; 3: one each),
  the threads started in opposite orders on odd ranks, after a random delay.  With
  ``FAULT=kill`` or ``interrupt``, rank ``VICTIM`` is SIGKILLed or gets a SIGINT (its main
  thread asks the faulty group) at ``STEP`` of its request of ``FAULT_DIM``:
  ``before_ticket``, ``after_ticket``, ``after_commit`` (if it commits; before its
  wake-up), ``after_wakeup`` (the committer, once it woke the others), ``in_torch`` (as
  torch's creation starts), or ``waiting`` (``FAULT_AT`` seconds into the request).  Then
  ``CYCLES`` times, with no fault: shut the backend down, start a new one, ask again.
- ``MODE=recreate``: ``CYCLES`` times: a new backend creates the tagged pair group and the
  whole world's tagged group, all-reduces on both, shuts down (the same names every cycle).
- ``MODE=retry``: ``CYCLES`` times: on odd ranks the first creation of the pair group fails
  inside torch's creation (their partners wait in torch until the timeout); every rank
  tries up to 4 times, then all-reduces.

Every rank writes ``rank<r>.json``: for each request, ``ok`` with the group's all-reduced
sum (groups without the victim) or the error's type, ``missing`` and message, and how long
it took.  The worker asserts nothing.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from fault_gloo_worker import _works
from gloo_launch import write_report

DIMS = ("dp", "tp", "all")  # pairs (i, i ^ 4), pairs (i, i ^ 1), and all 8 (tagged)
PARTS = {1: [[0, 1, 2]], 2: [[0, 1], [2]], 3: [[0], [1], [2]]}


def env(name: str, default: str = "") -> str:
    return os.environ.get(f"SOAK_{name}", default)


class _Wire:
    """A barrier connection that runs ``act`` before or after the first call ``when``
    matches (``when(op, args)`` -> "before", "after" or "")."""

    def __init__(self, store: Any, when: Any, act: Any) -> None:
        self._store, self._when, self._act = store, when, act

    def __getattr__(self, op: str) -> Any:
        method = getattr(self._store, op)

        def call(*args: Any) -> Any:
            at = self._when(op, args) if self._when is not None else ""
            if at:
                self._when = None
            if at == "before":
                self._act()
            out = method(*args)
            if at == "after":
                self._act()
            return out

        return call


def _step(step: str) -> Any:
    """``when`` for a fault at ``step`` of a request."""
    go = str(1 << 40)

    def when(op: str, args: tuple[Any, ...]) -> str:
        key = str(args[0]) if args else ""
        if step == "before_ticket" and op == "add" and "/t/" in key:
            return "before"
        if step == "after_ticket" and op == "add" and "/t/" in key:
            return "after"
        if step == "after_commit" and op == "compare_set" and "/d/" in key and \
                str(args[2]) == go:
            return "after"
        if step == "after_wakeup" and op == "set" and "/o/" in key and str(args[1]) == go:
            return "after"
        return ""

    return when


def _group_sum(rank: int, dim: str) -> int:
    return sum(_members(rank, dim))


def _all_reduce(group: Any, rank: int) -> Any:
    import torch
    import torch.distributed as dist

    return _works(dist, torch, group, rank)


def _ask(mesh: Any, dim: str) -> tuple[Any, dict[str, Any]]:
    start = time.monotonic()
    try:
        group = mesh.get_group(dim)
        return group, {"ok": True, "took": time.monotonic() - start}
    except BaseException as e:
        return None, {"ok": False, "took": time.monotonic() - start,
                      "error": type(e).__name__, "typed": _typed(e),
                      "missing": list(getattr(e, "missing", ())), "message": str(e)[:1500]}


def _typed(e: BaseException) -> bool:
    from backend import BackendError

    return isinstance(e, (BackendError, KeyboardInterrupt))


def _fault(backend: Any, kind: str, step: str, at: float) -> Any:
    """The fault's action, armed for the calling thread's next request (see the module)."""
    main = threading.main_thread().ident
    act = functools.partial(os.kill, os.getpid(), signal.SIGKILL) if kind == "kill" else \
        functools.partial(signal.pthread_kill, main, signal.SIGINT)
    if step == "waiting":
        timer = threading.Timer(at, act)
        timer.daemon = True
        return timer
    if step == "in_torch":
        import backend._c10d._torch_groups as tg

        real = tg._create

        def creating(spec: Any, name: str) -> Any:
            tg._create = real
            act()
            return real(spec, name)

        tg._create = creating
        return None
    rz = backend._rendezvous
    rz._local.store = _Wire(rz._store(), _step(step), act)
    return None


def _gather(store: Any, key: str, expected: int) -> None:
    """Wait (at most a minute) until ``expected`` ranks reached ``key`` (a store counter, so
    that a dead rank cannot hang it the way a collective would)."""
    store.add(key, 1)
    end = time.monotonic() + 60
    while int(store.add(key, 0)) < expected and time.monotonic() < end:
        time.sleep(0.02)


def _random(rank: int, world: int, out: str, store: Any) -> None:
    from backend import GlooBackend, GroupOptions, init_device_mesh

    timeout = timedelta(seconds=float(env("TIMEOUT_S", "5")))
    opts = GroupOptions(timeout=timeout)
    threads = int(env("THREADS", "1"))
    fault, victim = env("FAULT", "none"), int(env("VICTIM", "-1"))
    rng = random.Random(int(env("SEED", "0")) * 1000 + rank)
    report: dict[str, Any] = {"rank": rank, "cycles": []}
    for cycle in range(1 + int(env("CYCLES", "0"))):
        backend = GlooBackend(timeout=timeout, heartbeat=float(env("HEARTBEAT_S", "1")))
        mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"),
                                backend=backend, backend_override={"dp": opts, "tp": opts})
        meshes = {"dp": mesh, "tp": mesh,
                  "all": mesh._flatten("all", GroupOptions(tag="all", timeout=timeout))}
        got: dict[str, Any] = {}
        groups: dict[str, Any] = {}
        faulty = cycle == 0 and fault != "none" and rank == victim

        def part(dims: list[int], delay: float, main: bool, got: dict[str, Any],
                 groups: dict[str, Any], meshes: dict[str, Any] = meshes,
                 backend: Any = backend, faulty: bool = faulty) -> None:
            try:
                time.sleep(delay)
                for d in dims:
                    dim = DIMS[d]
                    time.sleep(rng.uniform(0.0, 0.05))
                    timer = None
                    if faulty and main and dim == env("FAULT_DIM"):
                        timer = _fault(backend, fault, env("STEP"),
                                       float(env("FAULT_AT", "0.5")))
                        if timer is not None:
                            timer.start()
                    groups[dim], got[dim] = _ask(meshes[dim], dim)
                    if timer is not None:
                        timer.cancel()  # it came too late: no fault
                    if got[dim].get("error") == "KeyboardInterrupt":
                        return  # a Ctrl-C ends the program: it asks nothing more
            except KeyboardInterrupt:  # it landed between two requests: the same
                report["between"] = True

        parts = PARTS[threads]
        delays = sorted(rng.uniform(0.0, 0.02) for _ in parts)  # in order: even ranks
        if rank % 2:
            delays.reverse()  # the opposite order: odd ranks
        start = rng.uniform(0.0, float(env("START_S", "0.2"))) if cycle == 0 else 0.0
        workers = [threading.Thread(target=part, args=(p, start + d, False, got, groups))
                   for p, d in zip(parts[1:], delays[1:])]
        for w in workers:
            w.start()
        part(parts[0], start + delays[0], True, got, groups)
        for w in workers:
            w.join()
        alive = world - (1 if cycle == 0 and fault == "kill" else 0)
        _gather(store, f"soak/asked/{cycle}", alive)  # every request is over: sum now
        for dim in DIMS:  # all-reduce on the groups without the victim, in dim order
            if dim in got and got[dim]["ok"] and not (fault != "none" and cycle == 0 and
                                                       victim in _members(rank, dim)):
                got[dim]["sum"] = _all_reduce(groups[dim], rank)
                got[dim]["expected"] = _group_sum(rank, dim)
        report["cycles"].append(got)
        write_report(out, rank, report)
        _gather(store, f"soak/summed/{cycle}", alive)  # nobody leaves a collective early
        if report.get("between") or any(g.get("error") == "KeyboardInterrupt" for g in
                                        got.values()):
            return
        if cycle < int(env("CYCLES", "0")):
            backend.shutdown()


def _members(rank: int, dim: str) -> tuple[int, ...]:
    if dim == "all":
        return tuple(range(8))
    return (rank, rank ^ {"dp": 4, "tp": 1}[dim])


def _cycles(rank: int, world: int, out: str, mode: str, store: Any) -> None:
    """``recreate`` and ``retry`` (see the module)."""
    from backend import GlooBackend, GroupOptions, init_device_mesh

    timeout = timedelta(seconds=float(env("TIMEOUT_S", "5")))
    pair = GroupOptions(timeout=timeout, tag="pair")
    whole = GroupOptions(timeout=timeout, tag="whole")
    report: dict[str, Any] = {"rank": rank, "cycles": []}
    for _ in range(int(env("CYCLES", "1"))):
        backend = GlooBackend(timeout=timeout, heartbeat=float(env("HEARTBEAT_S", "1")))
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"),
                                backend=backend, backend_override={"dp": pair, "tp": pair})
        entry: dict[str, Any] = {}
        partner_sum = rank + (rank ^ 1)
        if mode == "recreate":
            asks = [("tp", mesh, partner_sum),
                    ("all", mesh._flatten("all", whole), world * (world - 1) // 2)]
            for name, m, expected in asks:
                group, entry[name] = _ask(m, name)
                if group is not None:
                    entry[name]["sum"] = _all_reduce(group, rank)
                    entry[name]["expected"] = expected
        else:
            if rank % 2:
                _fail_once_in_torch()
            attempts = []
            for _ in range(4):
                group, got = _ask(mesh, "tp")
                attempts.append(got)
                if group is not None:
                    got["sum"] = _all_reduce(group, rank)
                    got["expected"] = partner_sum
                    break
            entry["tp"] = attempts[-1]
            entry["attempts"] = len(attempts)
        report["cycles"].append(entry)
        backend.shutdown()
    write_report(out, rank, report)
    _gather(store, "soak/end", world)


def _fail_once_in_torch() -> None:
    """This rank's next creation fails inside torch's creation, before it connects."""
    import backend._c10d._torch_groups as tg

    real = tg._create

    def failing(spec: Any, name: str) -> Any:
        tg._create = real
        raise RuntimeError("injected: torch's creation failed on this rank")

    tg._create = failing


def main(out: str) -> None:
    import faulthandler

    import torch.distributed as dist

    faulthandler.dump_traceback_later(float(env("DUMP_S", "100")))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Ctrl-C, as in a terminal
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    mode = env("MODE", "random")
    # a common start: every rank's world is up (the store's counter, not a collective)
    store.add("soak/ready", 1)
    while int(store.add("soak/ready", 0)) < world:
        time.sleep(0.01)
    if mode == "random":
        _random(rank, world, out, store)
    else:
        _cycles(rank, world, out, mode, store)


if __name__ == "__main__":
    main(sys.argv[2])
