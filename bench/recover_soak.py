"""Randomized soak of surviving a failed rank on real Gloo processes (issue 20).

Each trial forks a world of 8 workers (``tests/recover_gloo_worker.py``, torch imported once
here) around a store this process hosts, as torchrun's agent does: it watches the workers
and writes the ranks that die under ``agent/failed``.  A trial draws the plan (``2d``
(dp=4, tp=2), ``3d`` (dp=2, cp=2, tp=2) with the flattened dp_cp, or ``spare`` (dp=3, tp=2)
with ranks 6, 7 spare), who dies (one rank, or a host of two), when (step 0..3, before or
between the step's collectives) and the way to go on (drop along dp, or substitute spares).

A trial passes when every survivor either rebinds and all-reduces the right sum on every dim
of the new plan (sums from a NumPy rank tensor in the worker; kept groups within the intact
ones), or every survivor reports the same typed refusal (``SurvivalError``: e.g. a drop that
leaves nothing).  A trial fails on a wrong sum or an unequal outcome, and **hangs** when a
worker still runs at the trial's bound (all are killed then).  Exits 1 on any failure or hang.

Run:  python bench/recover_soak.py              (200 trials, seed 0)
      python bench/recover_soak.py --trials 3   (a smoke run)
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

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

import recover_gloo_worker as worker  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _common import forked_worker  # noqa: E402
from gloo_launch import AGENT_FAILED  # noqa: E402

_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["torch.distributed", "numpy", "mesh", "backend",
                               "backend._c10d._backends", "backend._facade._torch_facade"])

WORLD = 8
BOUND_S = 60.0
SETTLE_S = 0.3


def draw(rng: random.Random) -> dict[str, str]:
    """One trial's configuration."""
    plan = rng.choice(["2d", "3d", "spare"])
    members = 6 if plan == "spare" else 8
    if rng.random() < 0.3:
        host = rng.randrange(members // 2)
        victims = [2 * host, 2 * host + 1]
    else:
        victims = [rng.randrange(members)]
    way = rng.choice(["drop", "substitute"]) if plan == "spare" else "drop"
    return {"PLAN": plan, "VICTIMS": ",".join(map(str, victims)), "WAY": way,
            "KILL_STEP": str(rng.randrange(4)), "KILL_AT": str(rng.randrange(2)),
            "RECOVER_TIMEOUT_S": "2"}


def _child(rank: int, port: int, cfg: dict[str, str], out: str) -> None:
    """One worker, in a process the fork server made (torch already imported there)."""
    forked_worker(worker.main, out, {**cfg, "RANK": str(rank), "WORLD_SIZE": str(WORLD),
                                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def _agent(procs: list[Any], store: Any, deadline: float) -> tuple[dict[int, int], list[int]]:
    """Wait for the workers, reporting those that died (a signal or an error exit), as
    torchrun's agent would; (exit codes, stuck ranks)."""
    codes: dict[int, int] = {}
    dead: list[int] = []
    told, last = 0, 0.0
    while len(codes) < len(procs) and time.monotonic() < deadline:
        for rank, p in enumerate(procs):
            if rank not in codes and p.exitcode is not None:
                codes[rank] = p.exitcode
                if p.exitcode != 0:
                    dead.append(rank)
                    last = time.monotonic()
        if len(dead) > told and time.monotonic() - last >= SETTLE_S:
            store.set(AGENT_FAILED, ",".join(map(str, sorted(dead))))
            told = len(dead)
        time.sleep(0.01)
    stuck = [r for r in range(len(procs)) if r not in codes]
    for r in stuck:
        procs[r].kill()
        procs[r].join()
    return codes, stuck


def trial(cfg: dict[str, str]) -> str:
    """``"ok"``, ``"refused"``, ``"hang"`` or ``"wrong: ..."``.

    Workers come from a fork server (a clean process that imported torch once), never from
    this one: forking a process whose store server thread holds a lock can deadlock the
    child (it did: a worker stuck creating its store client)."""
    out = tempfile.mkdtemp(prefix="soak-")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=BOUND_S))
    procs = [_FORKS.Process(target=_child, args=(rank, store.port, cfg, out))
             for rank in range(WORLD)]
    for p in procs:
        p.start()
    codes, stuck = _agent(procs, store, time.monotonic() + BOUND_S)
    if stuck:
        return "hang"
    return judge(cfg, codes, {r: json.loads(Path(out, f"rank{r}.json").read_text())
                              for r in range(WORLD) if Path(out, f"rank{r}.json").exists()})


def judge(cfg: dict[str, str], codes: dict[int, int], reports: dict[int, Any]) -> str:
    victims = {int(v) for v in cfg["VICTIMS"].split(",")}
    if any(codes[r] != (-9 if r in victims else 0) for r in range(WORLD)):
        return f"wrong: exit codes {codes}"
    refusals = {rep.get("refused") for rep in reports.values()}
    if refusals != {None}:
        return "refused" if len(refusals) == 1 and len(reports) == WORLD - len(victims) \
            else f"wrong: unequal outcomes {refusals}"
    for rank, rep in reports.items():
        if rep["in_new"] and rep["sums"] != rep["expected"]:
            return f"wrong: rank {rank} summed {rep['sums']}, expected {rep['expected']}"
        if rep["in_new"] and not set(rep["kept"]) <= intact(cfg, rank):
            return f"wrong: rank {rank} kept {rep['kept']}, beyond its intact groups"
    return "ok"


def intact(cfg: dict[str, str], rank: int) -> set[str]:
    """The dims whose group of ``rank`` holds no victim (NumPy over the plan's tensor)."""
    tensor, names, _ = worker._plans(cfg["PLAN"])
    victims = {int(v) for v in cfg["VICTIMS"].split(",")}
    if rank not in tensor:
        return set()
    where = tuple(int(i) for i in np.argwhere(tensor == rank)[0])
    out = set()
    for k, name in enumerate(names):
        index: list[Any] = list(where)
        index[k] = slice(None)
        if not set(tensor[tuple(index)].flat) & victims:
            out.add(name)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tally: Counter[str] = Counter()
    start = time.monotonic()
    for i in range(args.trials):
        cfg = draw(rng)
        outcome = trial(cfg)
        tally[outcome.split(":")[0]] += 1
        if outcome not in ("ok", "refused"):
            print(f"trial {i} {cfg}: {outcome}", flush=True)
    took = time.monotonic() - start
    print(f"{args.trials} trials in {took:.0f} s (seed {args.seed}): {tally['ok']} rebound and "
          f"checked, {tally['refused']} refused with a typed error, {tally['hang']} hangs, "
          f"{tally['wrong']} wrong")
    return 0 if tally["hang"] == 0 and tally["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
