"""Randomized soak of group creation under faults on real Gloo processes (issue 29).

Each trial forks a world of workers (``tests/creation_soak_worker.py``, torch imported once
here) around a store this process hosts, as torchrun's agent does.  Four kinds of run:

- random trials (default) on 8 processes, a (dp, cp, tp) = (2, 2, 2) mesh: each draws the
  threads per process that ask three groups (dp, tp and all 8 flattened; 1, 2 or 3
  threads; opposite start orders on odd ranks), start delays, a fault or none (a rank
  SIGKILLed, or interrupted by SIGINT, at a step of one of its requests: before or after
  its ticket, after its commit, after its wake-up, as torch's creation starts, or while it
  waits) and, for fault-free trials, 0-2 re-creations (shutdown, a new backend, the same
  groups again);
- ``--threads N``: N runs of 8 processes asking dp, tp and all 8 at once from 3 threads in
  opposite orders on odd ranks;
- ``--recreate N --world W``: N cycles, in one world of W processes, of a new backend
  creating the same two groups (a pair and the world, tagged), all-reducing, shutting down;
- ``--retry N --world W``: N cycles of a creation that fails inside torch's creation on odd
  ranks (their partners wait in torch until the timeout), then retries on every rank.

Every request ends in one of: **created** (and the group all-reduces the right sum, for a
group without the victim), **named** (a typed failure whose ``missing`` names the victim, or
the victim's own KeyboardInterrupt), **cascade** (a typed failure whose ``missing`` are all
members held up by the victim: each failed a request naming the victim, or naming such
members; e.g. a partner whose other thread was inside a creation with the victim came after
this rank's bound, twice its timeout), **unnamed** (a failure of a group whose members are
all alive and uninterrupted, or one that does not name the victim, or an untyped error),
**wrong** (a wrong sum, a failure slower than twice the timeout plus 4 s, or a worker that
exited unexpectedly); a trial **hangs** when a worker still runs at its bound (all are
killed then).  Exits 1 on any hang, wrong or unnamed outcome.

Run:  python bench/creation_soak.py                   (100 random trials, seed 0)
      python bench/creation_soak.py --threads 50      (the issue's thread runs)
      python bench/creation_soak.py --recreate 200 --world 2
      python bench/creation_soak.py --retry 200 --world 4
      python bench/creation_soak.py --smoke           (a few of each: part of the test suite)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

import creation_soak_worker as worker  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _common import forked_worker  # noqa: E402

_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["torch.distributed", "mesh", "backend",
                               "backend._c10d._backends", "backend._facade._torch_facade"])

STEPS = ("before_ticket", "after_ticket", "after_commit", "after_wakeup", "in_torch", "waiting")
TIMEOUT_S = 8.0  # the groups' timeout in random and thread runs: more than the 5 s that
# opening a TCPStore connection takes now and then, with the GIL held (see _rendezvous.Lease)


def draw(rng: random.Random) -> dict[str, str]:
    """One random trial's configuration (see the module)."""
    cfg = {"MODE": "random", "SEED": str(rng.randrange(10**6)), "TIMEOUT_S": str(TIMEOUT_S)}
    fault = rng.choice(["none", "kill", "interrupt"])
    threads = 1 if fault == "interrupt" else rng.choice([1, 2, 3])
    cfg.update(THREADS=str(threads), FAULT=fault)
    if fault == "none":
        cfg["CYCLES"] = str(rng.randrange(3))
    else:
        main_dims = [worker.DIMS[d] for d in worker.PARTS[threads][0]]
        cfg.update(VICTIM=str(rng.randrange(8)), STEP=rng.choice(STEPS),
                   FAULT_DIM=rng.choice(main_dims), FAULT_AT=f"{rng.uniform(0.05, 1.0):.2f}")
    return cfg


def _child(rank: int, world: int, port: int, cfg: dict[str, str], out: str) -> None:
    """One worker, in a process the fork server made (torch already imported there)."""
    forked_worker(worker.main, out, {**{f"SOAK_{k}": v for k, v in cfg.items()},
                                     "RANK": str(rank), "WORLD_SIZE": str(world),
                                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def run_world(world: int, cfg: dict[str, str], bound_s: float
              ) -> tuple[dict[int, int | None], dict[int, Any]]:
    """Fork ``world`` workers around a store hosted here; (exit codes: None for a worker
    killed at the bound, reports)."""
    out = tempfile.mkdtemp(prefix="creation-soak-")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=bound_s))
    procs = [_FORKS.Process(target=_child, args=(r, world, store.port, cfg, out))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + bound_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes: dict[int, int | None] = {}
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            codes[r] = None
        else:
            codes[r] = p.exitcode
    reports = {r: json.loads(Path(out, f"rank{r}.json").read_text())
               for r in range(world) if Path(out, f"rank{r}.json").exists()}
    del store
    return codes, reports


def judge_request(got: dict[str, Any], members: tuple[int, ...], victim: int | None,
                  timeout: float) -> str:
    """created, named, unnamed or wrong (see the module) for one request."""
    hit = victim is not None and victim in members
    if got["ok"]:
        if "sum" in got and got["sum"] != got["expected"]:
            return "wrong"
        return "created"
    if got["took"] > 2 * timeout + 4.0:
        return "wrong"
    if not got["typed"]:
        return "unnamed"
    if hit and (victim in got["missing"] or got["error"] == "KeyboardInterrupt"):
        return "named"
    return "unnamed"


def _behind_the_victim(reports: dict[int, Any], victim: int | None) -> set[int]:
    """The victim, and every rank with a failed request of the faulty cycle whose ``missing``
    are all such ranks (a fixpoint): ranks held up, directly or through others, by the
    victim."""
    if victim is None:
        return set()
    behind = {victim}
    while True:
        more = {rank for rank, rep in reports.items() if rank not in behind and rep["cycles"]
                and any(not got["ok"] and got["missing"] and set(got["missing"]) <= behind
                        for got in rep["cycles"][0].values())}
        if not more:
            return behind
        behind |= more


def judge_random(cfg: dict[str, str], codes: dict[int, int | None],
                 reports: dict[int, Any]) -> tuple[str, Counter[str]]:
    """The trial's outcome and its requests' outcomes."""
    tally: Counter[str] = Counter()
    victim = int(cfg["VICTIM"]) if cfg["FAULT"] != "none" else None
    if any(c is None for c in codes.values()):
        return "hang", tally
    for rank, code in codes.items():
        killed = cfg["FAULT"] == "kill" and rank == victim and code == -9
        if code != 0 and not killed:
            return f"wrong: rank {rank} exited with {code}", tally
        if code == 0 and rank not in reports:
            return f"wrong: rank {rank} wrote no report", tally
    behind = _behind_the_victim(reports, victim)
    for rank, rep in reports.items():
        for i, cycle in enumerate(rep["cycles"]):
            faulty = i == 0 and victim is not None
            for dim, got in cycle.items():
                members = worker._members(rank, dim)
                if rank == victim and faulty:
                    continue  # the victim's own view (it was killed or interrupted)
                verdict = judge_request(got, members, victim if faulty else None,
                                        float(cfg["TIMEOUT_S"]))
                if verdict == "unnamed" and faulty and got["typed"] and got["missing"] and \
                        set(got["missing"]) <= behind:
                    verdict = "cascade"
                tally[verdict] += 1
                if verdict in ("wrong", "unnamed"):
                    return f"{verdict}: rank {rank} cycle {i} {dim}: {got}", tally
            if not faulty:
                if sorted(cycle) != sorted(worker.DIMS):
                    return f"wrong: rank {rank} cycle {i} asked only {sorted(cycle)}", tally
    return "named" if tally["named"] else "created", tally


def judge_cycles(cfg: dict[str, str], codes: dict[int, int | None],
                 reports: dict[int, Any]) -> tuple[list[str], Counter[str]]:
    """Per cycle: "created" or why not; and the requests' outcomes."""
    tally: Counter[str] = Counter()
    if any(c is None for c in codes.values()):
        return ["hang"], tally
    if any(c != 0 for c in codes.values()) or len(reports) != len(codes):
        return [f"wrong: exit codes {codes}"], tally
    cycles = len(next(iter(reports.values()))["cycles"])
    out = []
    for i in range(cycles):
        bad = ""
        for rank, rep in sorted(reports.items()):
            for name, got in rep["cycles"][i].items():
                if name == "attempts":
                    continue
                verdict = "created" if got["ok"] and got.get("sum") == got["expected"] else \
                    "wrong" if got["ok"] else "unnamed"
                tally[verdict] += 1
                if verdict != "created" and not bad:
                    bad = f"{verdict}: rank {rank} {name}: {got}"
        out.append(bad or "created")
    return out, tally


def random_trials(trials: int, seed: int) -> bool:
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    requests: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    start = time.monotonic()
    for i in range(trials):
        cfg = draw(rng)
        codes, reports = run_world(8, cfg, 6 * TIMEOUT_S + 30)
        outcome, tally = judge_random(cfg, codes, reports)
        outcomes[outcome.split(":")[0]] += 1
        requests.update(tally)
        kinds[cfg["FAULT"] if cfg["FAULT"] == "none" else f"{cfg['FAULT']}/{cfg['STEP']}"] += 1
        if outcome not in ("created", "named"):
            print(f"trial {i} {cfg}: {outcome[:2000]}", flush=True)
    took = time.monotonic() - start
    print(f"{trials} random trials on 8 processes in {took:.0f} s (seed {seed}): "
          f"{outcomes['created']} created everything, {outcomes['named']} with typed failures "
          f"naming the right rank, {outcomes['hang']} hangs, {outcomes['wrong']} wrong, "
          f"{outcomes['unnamed']} unnamed")
    print(f"  requests: {requests['created']} created, {requests['named']} typed failures "
          f"naming the right rank, {requests['cascade']} naming members held up by it, "
          f"{requests['unnamed']} unnamed, {requests['wrong']} wrong")
    print(f"  faults drawn: {dict(sorted(kinds.items()))}")
    return outcomes["hang"] == outcomes["wrong"] == outcomes["unnamed"] == 0


def cycle_runs(mode: str, cycles: int, world: int, timeout: float) -> bool:
    cfg = {"MODE": mode, "CYCLES": str(cycles), "TIMEOUT_S": str(timeout),
           "HEARTBEAT_S": "0.25", "DUMP_S": str(cycles * (timeout + 5) + 60)}
    start = time.monotonic()
    codes, reports = run_world(world, cfg, cycles * (4 * timeout + 5) + 60)
    outcomes, tally = judge_cycles(cfg, codes, reports)
    took = time.monotonic() - start
    failed = [o for o in outcomes if o != "created"]
    what = "same-name re-creations (new backend, same store)" if mode == "recreate" else \
        "retries after a failure inside torch's creation"
    print(f"{len(outcomes)} cycles of {what} on {world} processes in {took:.0f} s: "
          f"{len(outcomes) - len(failed)} created, {len(failed)} failed "
          f"({tally['created']} requests created, {tally['unnamed']} failed, "
          f"{tally['wrong']} wrong)")
    if mode == "retry" and reports:
        attempts = Counter(c["attempts"] for rep in reports.values() for c in rep["cycles"])
        print(f"  attempts per rank and cycle: {dict(sorted(attempts.items()))}")
    for o in failed[:5]:
        print("  ", o[:1500])
    return not failed


def thread_runs(runs: int) -> bool:
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    start = time.monotonic()
    for i in range(runs):
        cfg = {"MODE": "random", "SEED": str(i), "THREADS": "3", "FAULT": "none",
               "CYCLES": "0", "TIMEOUT_S": str(TIMEOUT_S), "START_S": "0.02"}
        codes, reports = run_world(8, cfg, 4 * TIMEOUT_S + 30)
        outcome, _ = judge_random(cfg, codes, reports)
        outcomes[outcome.split(":")[0]] += 1
        for rep in reports.values():
            slowest = max([slowest, *(g["took"] for g in rep["cycles"][0].values())])
        if outcome != "created":
            print(f"run {i}: {outcome[:2000]}", flush=True)
    took = time.monotonic() - start
    print(f"{runs} runs of 8 processes x 3 threads (opposite orders on odd ranks) in {took:.0f} "
          f"s: {outcomes['created']} created every group with the right sums, "
          f"{runs - outcomes['created']} failed; slowest request {slowest:.2f} s")
    return outcomes["created"] == runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=None, help="random trials (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="runs of 8 x 3 threads")
    p.add_argument("--recreate", type=int, default=0, help="same-name re-creation cycles")
    p.add_argument("--retry", type=int, default=0, help="retry-after-failure cycles")
    p.add_argument("--world", type=int, default=2, help="processes for --recreate/--retry")
    p.add_argument("--smoke", action="store_true", help="a few of each kind")
    args = p.parse_args()
    ok = True
    if args.smoke:
        ok &= random_trials(2, args.seed)
        ok &= thread_runs(1)
        ok &= cycle_runs("recreate", 5, 2, 3.0)
        ok &= cycle_runs("retry", 2, 2, 1.0)
    else:
        if args.recreate:
            ok &= cycle_runs("recreate", args.recreate, args.world, 3.0)
        if args.retry:
            ok &= cycle_runs("retry", args.retry, args.world, 1.0)
        if args.threads:
            ok &= thread_runs(args.threads)
        if args.trials or not (args.recreate or args.retry or args.threads):
            ok &= random_trials(args.trials or 100, args.seed)
    print("all outcomes created or named" if ok else "FAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
