"""Random valid parallel programs for ``check_spmd``: what it must pass (0 false positives).

:func:`program` builds, from a seed, a torchtitan-like job: a world of 8 to 128 ranks split
into (pp, dp_replicate, dp_shard, cp, tp) degrees, unflattened in a random dim order, with
flattens (torchtitan's ``batch``, ``fsdp``, ``loss`` and random others, in random orders)
and slices; groups asked for eagerly (``materialize``-like, in one random order) or lazily
at first use; then a training step: collectives on random groups (all_reduce, all_gather,
reduce_scatter, reduce, broadcast from a random member, barrier, all_to_all with uneven
sizes that pair up, even ones on large groups of large worlds: :data:`EVEN_SPLITS_ABOVE`),
shapes that may depend on the pipeline stage on groups inside a stage, and pipeline p2p (a
forward and a backward chain of blocking send/recv, or the same as batched isend/irecv).
Some programs run at the torch level (``dist.*`` calls on torch's fake process group).  The
backend modelled is random; under NCCL only families that NCCL splits are used (ascending
groups covering the world, no tags: anything else would be a true finding, a members-only
creation on a device-bound world), and a topology is given with hosts that every group spans
evenly.

Every choice is made from the seed, never from the rank (except what SPMD programs do:
the stage a rank is, its place in its groups), so every program is valid by construction.
Run ``python tests/spmd_programs.py 10000`` for the one-off run of 10^4.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

BASE = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
EVEN_SPLITS_ABOVE = 1024
"""In worlds larger than this (where ``check_spmd`` uses automatic classes), an all_to_all on
a group of more than 8 sends every peer the same count: uneven sizes there would cost every
rank O(size**2) draws and, read by local rank, make one class per member of a group of up to
the world (the check's documented worst case, a program that branches on every rank)."""
OPS = ("all_reduce", "all_gather", "reduce_scatter", "reduce", "broadcast", "barrier",
       "all_to_all")


@attrs.frozen
class Generated:
    """A random valid program, its world and how to check it."""

    seed: int
    world: int
    program: Callable[[Any], object]
    check: dict[str, Any]
    calls: int  # collective and p2p calls per rank (about)
    words: str  # the plan in words, for a failure's message
    planted: list[int] = attrs.Factory(list)  # the call the planted bug changed, once run


def degrees(rng: random.Random, world: int) -> dict[str, int]:
    """Powers of two for the base dims whose product is ``world``."""
    exp = world.bit_length() - 1
    sizes = dict.fromkeys(BASE, 1)
    for _ in range(exp):
        sizes[rng.choice(BASE)] *= 2
    return sizes


def program(seed: int, *, torch_share: float = 0.1, max_world: int = 64,
            plant: bool = False, world: int | None = None) -> Generated:
    """The random valid program of ``seed``; with ``plant``, one rank (chosen from the seed)
    gives one collective on a group of two or more a different shape (a desync the check
    must find).  ``world`` (a power of two) replaces the world drawn from the seed."""
    rng = random.Random(seed)
    drawn = rng.choice([w for w in (4, 8, 16, 32, 64, 128) if w <= max_world])
    world = drawn if world is None else world
    sizes = degrees(rng, world)
    order = list(BASE)
    rng.shuffle(order)
    kind = rng.choice(["gloo", "nccl", "auto"])
    device = "cuda" if kind == "nccl" or (kind == "auto" and rng.random() < 0.5) else "cpu"
    nccl = kind == "nccl" or device == "cuda"
    torch_level = rng.random() < torch_share
    flattens = [("batch", ("dp_replicate", "dp_shard")), ("fsdp", ("dp_shard", "cp")),
                ("loss", ("dp_replicate", "dp_shard", "cp"))]
    for i in range(rng.randint(0, 2)):  # random others, their dims in a random order
        dims = rng.sample(BASE, rng.randint(2, 3))
        flattens.append((f"f{i}", tuple(dims)))
    tagged = not nccl and rng.random() < 0.3
    eager = rng.random() < 0.5
    calls = rng.randint(5, 40)
    p2p = sizes["pp"] > 1 and rng.random() < 0.6
    batched = rng.random() < 0.5
    micro = rng.randint(1, 3)
    seed_calls = rng.getrandbits(32)
    bug_rank, bug_call = rng.randrange(world), rng.randrange(calls)
    planted: list[int] = []
    words = (f"seed {seed}: world {world} {sizes} order {order} kind {kind} device {device} "
             f"torch {torch_level} flattens {flattens} tagged {tagged} eager {eager} "
             f"calls {calls} p2p {p2p} batched {batched}")

    def run(backend: Any) -> None:
        from backend import GroupOptions, init_device_mesh

        top = init_device_mesh(device, (world,), mesh_dim_names=("world",), backend=backend)
        mesh = top._unflatten(0, tuple(sizes[d] for d in order), tuple(order))
        pool: list[tuple[Any, str, frozenset[str]]] = [(mesh, d, frozenset({d}))
                                                       for d in order]
        for name, dims in flattens:
            flat = mesh[tuple(d for d in dims)]._flatten(name)
            pool.append((flat, name, frozenset(dims)))
        if tagged:
            flat = mesh[("dp_shard", "tp")]._flatten("tagged", GroupOptions(tag="t"))
            pool.append((flat, "tagged", frozenset({"dp_shard", "tp"})))
        if nccl:  # what NCCL splits: ascending groups (families of one universe cover it)
            pool = [(m, d, s) for m, d, s in pool if _ascending(m.view, d)]
        crng = random.Random(seed_calls)
        crng.shuffle(pool)
        if eager:
            for m, d, _ in pool:
                m.get_group(d)
        coord = dict(zip(order, mesh.get_coordinate()))
        bug_done: list[int] = []
        stage = coord["pp"]
        do = _TorchCalls() if torch_level else _FreeCalls(backend)
        for i in range(calls):
            m, d, spans = crng.choice(pool)
            group = m.get_group(d)
            size = m.size(d)
            shape = (crng.randint(1, 4) * size, crng.randint(1, 3))
            if "pp" not in spans and crng.random() < 0.3:
                shape = (shape[0] * (stage + 1), shape[1])  # a stage's own shape
            op = crng.choice(OPS)
            if plant and i >= bug_call and size > 1 and mesh.get_rank() == bug_rank:
                op, shape = "all_reduce", (shape[0] + 1, shape[1])  # the planted desync
                bug_done.append(i)
                planted.append(i)
            if op == "all_to_all" and (world <= EVEN_SPLITS_ABOVE or size <= 8):
                matrix = [[crng.randint(1, 3) for _ in range(size)] for _ in range(size)]
                me = m.get_local_rank(d)
                do.all_to_all(group, matrix[me], [matrix[j][me] for j in range(size)],
                              shape[1])
            elif op == "all_to_all":  # a large group of a large world: even splits
                even = [crng.randint(1, 3)] * size
                do.all_to_all(group, even, even, shape[1])
            elif op in ("broadcast", "reduce"):
                do.rooted(op, group, shape, crng.randrange(size))
            else:
                do.call(op, group, shape)
            if bug_done:
                break  # one planted call, then this rank's step ends
        if p2p:
            pp = mesh.get_group("pp")
            last = sizes["pp"] - 1
            for direction in (1, -1):  # forward, then backward
                for _ in range(micro):
                    prev, nxt = stage - direction, stage + direction
                    has_prev, has_next = 0 <= prev <= last, 0 <= nxt <= last
                    if batched:
                        do.batch(pp, [("recv", prev)] * has_prev + [("send", nxt)] * has_next)
                    else:
                        if has_prev:
                            do.p2p("recv", pp, prev)
                        if has_next:
                            do.p2p("send", pp, nxt)

    check: dict[str, Any] = {"backend": kind, "torch": torch_level}
    if nccl and rng.random() < 0.5:
        from mesh import Topology

        check["topology"] = Topology(world, min(world, rng.choice([2, 4, 8])))
        check["nvls_slots"] = 10**6  # resources are the corpus's: here, validity only
    per_rank = calls + (2 * micro * 2 if p2p else 0)
    return Generated(seed, world, run, check, per_rank, words, planted)


def _ascending(view: Any, dim: str) -> bool:
    return all(list(g) == sorted(g) for g in view.groups(dim))


class _FreeCalls:
    """The step's calls on the torch-free recorder."""

    def __init__(self, backend: Any) -> None:
        self.b = backend

    def call(self, op: str, group: Any, shape: tuple[int, int]) -> None:
        if op == "barrier":
            self.b.barrier(group)
        elif op == "reduce_scatter":
            self.b.reduce_scatter((shape[0] // group.size(), shape[1]), group=group)
        else:
            getattr(self.b, op)(shape, group=group)

    def rooted(self, op: str, group: Any, shape: tuple[int, int], root: int) -> None:
        src = group.ranks[root]
        if op == "broadcast":
            self.b.broadcast(shape, src=src, group=group)
        else:
            self.b.reduce(shape, dst=src, group=group)

    def all_to_all(self, group: Any, ins: list[int], outs: list[int], cols: int) -> None:
        self.b.all_to_all((sum(ins), cols), group=group, input_splits=ins, output_splits=outs)

    def p2p(self, op: str, group: Any, stage: int) -> None:
        peer = group.ranks[stage]
        (self.b.send if op == "send" else self.b.recv)((4, 4), peer, group=group)

    def batch(self, group: Any, ops: list[tuple[str, int]]) -> None:
        if ops:
            self.b.batch_isend_irecv([(op, (4, 4), group.ranks[s]) for op, s in ops],
                                     group=group).wait()


class _TorchCalls:
    """The same calls through ``torch.distributed``."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist

    def _t(self, shape: tuple[int, ...]) -> Any:
        return self.torch.zeros(shape)

    def call(self, op: str, group: Any, shape: tuple[int, int]) -> None:
        dist, n = self.dist, group.size()
        if op == "barrier":
            dist.barrier(group=group)
        elif op == "all_reduce":
            dist.all_reduce(self._t(shape), group=group)
        elif op == "all_gather":
            dist.all_gather_into_tensor(self._t((shape[0] * n, shape[1])), self._t(shape),
                                        group=group)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self._t((shape[0] // n, shape[1])), self._t(shape),
                                       group=group)

    def rooted(self, op: str, group: Any, shape: tuple[int, int], root: int) -> None:
        src = self.dist.get_global_rank(group, root)
        if op == "broadcast":
            self.dist.broadcast(self._t(shape), src=src, group=group)
        else:
            self.dist.reduce(self._t(shape), dst=src, group=group)

    def all_to_all(self, group: Any, ins: list[int], outs: list[int], cols: int) -> None:
        self.dist.all_to_all_single(self._t((sum(outs), cols)), self._t((sum(ins), cols)),
                                    output_split_sizes=outs, input_split_sizes=ins,
                                    group=group)

    def p2p(self, op: str, group: Any, stage: int) -> None:
        peer = self.dist.get_global_rank(group, stage)
        if op == "send":
            self.dist.send(self._t((4, 4)), dst=peer, group=group)
        else:
            self.dist.recv(self._t((4, 4)), src=peer, group=group)

    def batch(self, group: Any, ops: list[tuple[str, int]]) -> None:
        dist = self.dist
        if ops:
            p2p = [dist.P2POp(dist.isend if op == "send" else dist.irecv, self._t((4, 4)),
                              dist.get_global_rank(group, s), group) for op, s in ops]
            for work in dist.batch_isend_irecv(p2p):
                work.wait()


TITAN = {"pp": 4, "dp_replicate": 2, "dp_shard": 16, "cp": 2, "tp": 4}
"""The degrees of the torchtitan-like step at 1,024 ranks (``titan_step``)."""


def titan_degrees(world: int) -> dict[str, int]:
    """TITAN's degrees for ``world`` ranks (dp_shard takes what is left)."""
    fixed = TITAN["pp"] * TITAN["dp_replicate"] * TITAN["cp"] * TITAN["tp"]
    return {**TITAN, "dp_shard": max(1, world // fixed)}


def titan_step(backend: Any, *, layers: int = 4, micro: int = 2, bug: int | None = None,
               odd_rank: int | None = None, spread: int = 1) -> None:
    """A torchtitan-like training step: torchtitan's meshes (pp, dp_replicate, dp_shard, cp,
    tp; ``batch``, ``fsdp`` and ``loss`` flattened), then per microbatch and layer an FSDP
    all-gather of the weights, a TP all-reduce, a CP all-gather of the keys (forward) and
    the reverse in backward with an FSDP reduce-scatter of the gradients, the pipeline's
    p2p chain, a dp_replicate all-reduce of the gradients and a loss all-reduce:
    2 * micro * (3 + 3) * layers + about 10 calls per rank (58 with the defaults).  On the
    torch-free recorder through its methods; on a torch backend (``check_spmd(...,
    torch=True)``) through ``torch.distributed``.  With ``bug``, the ranks at that tp
    coordinate all-reduce a wrong shape once; with ``odd_rank``, that rank alone (read as
    ``dist.get_rank()`` or ``backend.rank``) does, on its tp group; with ``spread``, the
    backward TP all-reduce's shape varies with the dp_shard coordinate modulo ``spread``
    (valid: a tp group lies at one dp_shard coordinate), making 4 x ``spread`` classes."""
    from backend import init_device_mesh

    world = backend.world_size
    deg = titan_degrees(world)
    top = init_device_mesh("cpu", (world,), mesh_dim_names=("world",), backend=backend)
    mesh = top._unflatten(0, tuple(deg[d] for d in BASE), BASE)
    fsdp = mesh["dp_shard", "cp"]._flatten("fsdp")
    loss = mesh["dp_replicate", "dp_shard", "cp"]._flatten("loss")
    tp, cp, pp, dp = (mesh.get_group(d) for d in ("tp", "cp", "pp", "dp_replicate"))
    shard = fsdp.get_group()
    coord = dict(zip(BASE, mesh.get_coordinate()))
    stage, last = coord["pp"], deg["pp"] - 1
    b: Any = _TitanTorch() if getattr(backend, "torch_groups", False) else backend
    odd = odd_rank is not None and (b.get_rank() if b is not backend else backend.rank) \
        == odd_rank
    hidden = (1024, 512)
    for m in range(micro):
        if stage > 0:
            b.recv((8, 512), _member(pp, stage - 1), group=pp)
        for layer in range(layers):
            b.all_gather((4096 // deg["dp_shard"] // deg["cp"], 512), group=shard)
            wrong = (odd or (bug is not None and coord["tp"] == bug)) and m == layer == 0
            b.all_reduce((1024, 256) if wrong else hidden, group=tp)
            b.all_gather((256, 64), group=cp)
        if stage < last:
            b.send((8, 512), _member(pp, stage + 1), group=pp)
    for _m in range(micro):
        if stage < last:
            b.recv((8, 512), _member(pp, stage + 1), group=pp)
        for _layer in range(layers):
            b.reduce_scatter((256, 64), group=cp)
            b.all_reduce(hidden if spread == 1 else
                         (1024, 512 + 8 * (coord["dp_shard"] % spread)), group=tp)
            b.reduce_scatter((4096 // deg["dp_shard"] // deg["cp"], 512), group=shard)
        if stage > 0:
            b.send((8, 512), _member(pp, stage - 1), group=pp)
    b.all_reduce((4096, 512), group=dp)
    b.all_reduce((1,), group=loss.get_group())


def _member(group: Any, place: int) -> int:
    """The global rank at ``place`` of ``group`` (a recorder's group or a torch one)."""
    ranks = getattr(group, "ranks", None)
    if ranks is not None:
        return int(ranks[place])
    import torch.distributed as dist

    return dist.get_global_rank(group, place)


class _TitanTorch:
    """``titan_step``'s calls through ``torch.distributed`` (tensors of the shapes)."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist

    def _t(self, shape: tuple[int, ...]) -> Any:
        return self.torch.empty(shape, device="meta")

    def get_rank(self) -> Any:
        return self.dist.get_rank()

    def all_reduce(self, shape: tuple[int, ...], group: Any) -> None:
        self.dist.all_reduce(self._t(shape), group=group)

    def all_gather(self, shape: tuple[int, ...], group: Any) -> None:
        out = (shape[0] * group.size(), *shape[1:])
        self.dist.all_gather_into_tensor(self._t(out), self._t(shape), group=group)

    def reduce_scatter(self, shape: tuple[int, ...], group: Any) -> None:
        whole = (shape[0] * group.size(), *shape[1:])
        self.dist.reduce_scatter_tensor(self._t(shape), self._t(whole), group=group)

    def send(self, shape: tuple[int, ...], dst: int, group: Any) -> None:
        self.dist.send(self._t(shape), dst=dst, group=group)

    def recv(self, shape: tuple[int, ...], src: int, group: Any) -> None:
        self.dist.recv(self._t(shape), src=src, group=group)


def main(count: int, start: int = 0) -> int:
    """Check ``count`` programs; print the false positives and the time."""
    import warnings

    from backend import check_spmd

    warnings.filterwarnings("ignore")
    t0, bad, ranks, torch_level = time.perf_counter(), 0, 0, 0
    for seed in range(start, start + count):
        g = program(seed, max_world=128)
        report = check_spmd(g.world, g.program, **g.check)
        ranks += g.world
        torch_level += bool(g.check["torch"])
        if not report.ok:
            bad += 1
            print(f"FALSE POSITIVE {g.words}\n{report}", flush=True)
        if (seed - start + 1) % 500 == 0:
            print(f"{seed - start + 1} programs, {bad} false positives, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    print(f"{count} programs ({torch_level} at the torch level, {ranks} rank runs): {bad} false "
          f"positives in {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300,
                  int(sys.argv[2]) if len(sys.argv) > 2 else 0))
