"""``torch.compile`` over the facade mesh vs torch 2.13's own ``DeviceMesh``, at worlds 8, 2**12
and 2**20 (torch's fake process group, rank 3), ours and torch's in one process per world,
timed in alternating rounds.  The two sides' meshes are equal (a facade mesh equals torch's
mesh of the same layout, and hashes as it), so DTensor's caches, keyed by mesh equality, would
hand one side's cached plans to the other: each round starts with those caches cleared and
one untimed call, as a process holding one kind of mesh has them.

Both sides build the same (dp, tp) mesh of the whole world (``init_device_mesh``, shape
(sqrt W, sqrt W) so that torch's eager creation stays affordable at 2**20) and compile, with
``fullgraph=True`` and the ``eager`` backend, the two steps a training loop compiles:

- ``funcol``: ``funcol.all_reduce(x * m.size(0) + m.get_local_rank("tp"), "sum", (m, 1))``;
- ``dtensor``: ``DTensor.from_local(x, m, [Partial(), Partial()])`` redistributed to
  ``[Replicate(), Replicate()]`` (an all-reduce per dim: the data moved does not grow with
  the world, so the table shows what the mesh costs).

Per step and side it measures: the compile time (the first call); the per-call time (the
median over rounds of up to 400 calls of the compiled step, fewer when they take over 0.2 s,
the two sides alternating; the step is called with the first mesh after the equal one); the
recompiles caused by passing a new mesh object equal to the first (``init_device_mesh``
again) and then the first again; the bytes dynamo keeps to guard the mesh (the values of the
opaque type's guard function, deep-copied, as ``torch/_dynamo/guards.py`` stores them) and
the bytes of constants baked into the graph (tensor attributes and constant arguments).

Targets: per call ours <= 1.1x torch at every world; recompiles ours <= torch's; the guard
and graph state of ours does not grow with the world (at 2**20 at most 64 bytes more than at 8:
Python ints of 2**20 are wider than those of 8).  The
script prints a table and exits 1 on a miss.

Run:  python bench/compile.py           (worlds 8, 2**12, 2**20; 15 rounds)
      python bench/compile.py --smoke   (world 8 only, 3 short rounds; never fails on ratios)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import run_child, verdict

RANK = 3
WORLDS = (8, 2**12, 2**20)


def _deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by ``obj`` and what it refers to (containers, tensors' storage, objects'
    ``__dict__`` and slots), each object counted once."""
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return sys.getsizeof(obj) + obj.numel() * obj.element_size()
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        return size + sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(_deep_size(v, seen) for v in obj)
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return size
    inner = getattr(obj, "__dict__", None)
    if inner is not None:
        size += _deep_size(inner, seen)
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot) and slot != "__weakref__":
                size += _deep_size(getattr(obj, slot), seen)
    return size


def _graph_constants(gm: Any) -> int:
    """Bytes of the constants a captured graph holds: tensor attributes and constant args."""
    import torch

    total = 0
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            total += _deep_size(getattr(gm, str(node.target)))
        for arg in (*node.args, *node.kwargs.values()):
            if not isinstance(arg, torch.fx.Node):
                total += _deep_size(arg)
    return total


def steps() -> dict[str, Callable[[Any, Any], Any]]:
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.tensor import DTensor, Partial, Replicate

    def dtensor(x: Any, m: Any) -> Any:
        d = DTensor.from_local(x, m, [Partial(), Partial()])
        return d.redistribute(m, [Replicate(), Replicate()]).to_local()

    return {"funcol": lambda x, m: funcol.all_reduce(x * m.size(0) + m.get_local_rank("tp"),
                                                     "sum", (m, 1)),
            "dtensor": dtensor}


def _side(init: Callable[..., Any], shape: tuple[int, int], step: Callable[..., Any],
          graphs: list[Any]) -> dict[str, Any]:
    import torch
    import torch._dynamo
    from torch._dynamo.guards import extract_opaque_obj

    def backend(gm: Any, inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    mesh = init("cpu", shape, mesh_dim_names=("dp", "tp"))
    x = torch.ones(4)
    torch._dynamo.reset()
    graphs.clear()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    start = time.perf_counter()
    compiled(x, mesh)
    compile_s = time.perf_counter() - start
    first = len(graphs)
    compiled(x, init("cpu", shape, mesh_dim_names=("dp", "tp")))
    compiled(x, mesh)
    return {"compiled": compiled, "mesh": mesh, "x": x, "compile_s": compile_s,
            "recompiles": len(graphs) - first,
            "guard_bytes": _deep_size(extract_opaque_obj(None, mesh)),
            "graph_bytes": sum(_graph_constants(g) for g in graphs[:first])}


def _forget_dtensor_caches() -> None:
    """DTensor's caches keyed by mesh equality (sharding propagation, redistribute plans)."""
    import torch
    from torch.distributed.tensor import DTensor, _redistribute

    torch._C._clear_DTensor_sharding_propagator_cache()
    _redistribute._gen_transform_infos.cache_clear()
    _redistribute.clear_redistribute_planner_cache()
    propagator = DTensor._op_dispatcher.sharding_propagator
    propagator.propagate_op_sharding.cache_clear()
    type(propagator)._propagate_tensor_meta_cached.cache_clear()


def _per_call_us(side: dict[str, Any], number: int, budget_s: float) -> float:
    """Microseconds per call of the side's compiled step, after DTensor's caches were cleared
    and one call refilled them: ``number`` calls, or fewer (at least 5) when they would take
    longer than ``budget_s``."""
    f, x, m = side["compiled"], side["x"], side["mesh"]
    _forget_dtensor_caches()
    f(x, m)
    start = time.perf_counter()
    done = 0
    while done < number and (done < 5 or time.perf_counter() - start < budget_s):
        f(x, m)
        done += 1
    return (time.perf_counter() - start) / done * 1e6


def child(world: int, rounds: int, number: int) -> dict[str, Any]:
    """One world, in a fresh interpreter: both sides, both steps."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh as torch_init
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import backend

    torch.set_num_threads(1)
    budget_s = 0.2
    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=world)
    side = math.isqrt(world)
    shape = (world // side, side)
    out: dict[str, Any] = {}
    graphs: list[Any] = []
    for name, step in steps().items():
        _forget_dtensor_caches()
        sides = {"torch": _side(torch_init, shape, step, graphs)}
        _forget_dtensor_caches()
        sides["ours"] = _side(backend.init_device_mesh, shape, step, graphs)
        times: dict[str, list[float]] = {"torch": [], "ours": []}
        for _ in range(rounds):
            for which, s in sides.items():
                times[which].append(_per_call_us(s, number, budget_s))
        for which, s in sides.items():
            out[f"{name}/{which}"] = {
                "compile_s": s["compile_s"], "call_us": statistics.median(times[which]),
                "recompiles": s["recompiles"], "guard_bytes": s["guard_bytes"],
                "graph_bytes": s["graph_bytes"]}
    dist.destroy_process_group()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--smoke", action="store_true", help="world 8, short rounds; no targets")
    p.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child)))
        return 0
    worlds = (8,) if a.smoke else WORLDS
    rounds, number = (3, 50) if a.smoke else (15, 400)
    results = {w: run_child(__file__, [str(w), str(rounds), str(number)], timeout=900)
               for w in worlds}
    print(f"torch.compile(fullgraph=True, backend='eager') over a (dp, tp) mesh of the world, "
          f"rank {RANK}; per call: median of {rounds} rounds x {number} calls")
    print(f"{'step':8} {'world':>8}  {'side':5} {'compile s':>9} {'call us':>8} {'ratio':>6} "
          f"{'recompiles':>10} {'guard B':>10} {'graph B':>8}")
    failures: list[str] = []
    for w, res in results.items():
        for name in steps():
            t, o = res[f"{name}/torch"], res[f"{name}/ours"]
            for which, r in (("torch", t), ("ours", o)):
                ratio = f"{r['call_us'] / t['call_us']:.2f}x" if which == "ours" else ""
                print(f"{name:8} {w:>8,}  {which:5} {r['compile_s']:9.2f} {r['call_us']:8.1f} "
                      f"{ratio:>6} {r['recompiles']:>10} {r['guard_bytes']:>10,} "
                      f"{r['graph_bytes']:>8,}")
            if o["call_us"] > 1.1 * t["call_us"]:
                failures.append(f"{name} at {w}: {o['call_us']:.1f} us per call > 1.1x torch "
                                f"({t['call_us']:.1f} us)")
            if o["recompiles"] > t["recompiles"]:
                failures.append(f"{name} at {w}: {o['recompiles']} recompiles > torch's "
                                f"{t['recompiles']}")
            small = results[min(results)][f"{name}/ours"]
            for key in ("guard_bytes", "graph_bytes"):  # ints of the world's size may widen
                if o[key] > small[key] + 64:
                    failures.append(f"{name} at {w}: {key} {o[key]:,} grew from {small[key]:,} "
                                    f"at world {min(results)}")
    return verdict(failures, smoke=a.smoke)


if __name__ == "__main__":
    sys.exit(main())
