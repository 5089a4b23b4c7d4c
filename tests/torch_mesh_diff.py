"""The machinery of the differential test ``tests/test_mesh_vs_torch.py``.

That file holds the tests, the hand-written programs and the torch 2.13 behaviours they
exercise (its docstring lists them); this module holds what they run on.  Nothing here
imports ``torch``: torch's side is ``tests/torch_mesh_reference.py``, run as a script.

- :class:`Model`, the brute-force model: a view as an explicit rank array of shape
  ``(H, *shape)`` (H instances of ``shape``); every transform permutes, reshapes or selects
  that list of ranks, every query searches it, so it uses neither ``layout`` nor ``mesh``.
- :class:`Expected` and :func:`check_view`: per-rank answers (from torch's output or from
  the model) and the assertion that a ``MeshView`` gives them, for every rank ``< world``.
- :class:`Program`: one list of ops, our side's and torch's.  Torch ops have the format of
  ``tests/torch_mesh_reference.py`` (which :meth:`Program.torch_json` sends it); an op may
  also carry
    - ``torch=False`` (added by :meth:`Program.ours`): run on our side only, compared with
      torch's variable ``expect`` (an index in the program; None: with the model only);
    - ``ours=op`` / ``model=op``: what our side / the model runs instead (a ``concat`` has
      a model only through ``model=``, an equivalent that is itself checked against torch);
    - ``ours_raises="ErrorName"``: torch accepts the op, ours must raise that error;

  and our side has ops torch lacks: ``{"op": "transpose", "src": i, "dims": [...]}``, and
  ``flatten`` with ``"dims"`` (merged where the first listed dim was, the other dims kept;
  all dims when absent) and ``"select"`` (a slice of the result).
- :func:`run_torch`: torch's answers for a list of programs, from two subprocesses (the
  suite runs on 2 cores); the test process never imports ``torch.distributed``.
- :func:`run_program`: one program op by op against torch's answers, the refusals torch is
  known for (:data:`TORCH_REFUSALS`) and the model; it counts what it checked.
- Generators: :func:`random_program` (random chains of slices, flattens, unflattens and
  concatenations as torch ops, with our equivalents) and :func:`check_random_walk` (random
  chains of our transforms, including what torch cannot express, against the model only).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mesh import (
    MeshError,
    MeshView,
    NotRepresentableError,
    OverlapError,
    RankNotInMeshError,
    concatenate,
)

REFERENCE_SCRIPT = Path(__file__).with_name("torch_mesh_reference.py")
# The torch releases whose DeviceMesh behaviours (TORCH_REFUSALS, test_mesh_vs_torch.py's
# docstring) were checked: pyproject's range.  Another torch must be checked before it is run.
TORCH_CHECKED = ("2.13", "2.14", "2.15")
TORCH_TIMEOUT_S = 240


# ---------------------------------------------------------------------------------------
# Brute-force model: an explicit rank array, axes (hidden, *visible), row-major.
# ---------------------------------------------------------------------------------------
def _strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


def _permute(flat: Sequence[int], shape: Sequence[int], perm: Sequence[int]) -> list[int]:
    st = _strides(shape)
    new_st = [st[p] for p in perm]
    return [flat[sum(i * s for i, s in zip(idx, new_st))]
            for idx in itertools.product(*(range(shape[p]) for p in perm))]


def _nest(flat: Sequence[int], shape: Sequence[int]) -> Any:
    if len(shape) == 1:
        return tuple(flat)
    step = len(flat) // shape[0]
    return tuple(_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0]))


class Model:
    """A view as an explicit array of shape ``(H, *shape)``: H instances of ``shape``.

    Every transform permutes/reshapes the explicit list of ranks; every query searches it.
    """

    def __init__(self, flat: Sequence[int], shape: Sequence[int],
                 names: Sequence[str]) -> None:
        self.flat = list(flat)
        self.shape = tuple(shape)
        self.names = tuple(names)
        self.size = math.prod(self.shape)
        assert len(self.flat) % self.size == 0
        self.hidden = len(self.flat) // self.size

    @classmethod
    def from_shape(cls, shape: Sequence[int], names: Sequence[str]) -> Model:
        return cls(range(math.prod(shape)), shape, names)

    @classmethod
    def from_nested(cls, ranks: Any, names: Sequence[str]) -> Model:
        shape: list[int] = []
        x = ranks
        while isinstance(x, list):
            shape.append(len(x))
            x = x[0]
        flat: list[int] = []

        def walk(y: Any) -> None:
            if isinstance(y, list):
                for z in y:
                    walk(z)
            else:
                flat.append(y)

        walk(ranks)
        return cls(flat, shape, names)

    def _idx(self, dim: str | int) -> int:
        return self.names.index(dim) if isinstance(dim, str) else dim

    def _rearrange(self, order: Sequence[int]) -> list[int]:
        """The ranks with visible axes in ``order``; the rest join the hidden axis."""
        rest = [i for i in range(len(self.shape)) if i not in order]
        full = (self.hidden, *self.shape)
        perm = [0, *(1 + i for i in rest), *(1 + i for i in order)]
        return _permute(self.flat, full, perm)

    def select(self, dims: Sequence[str | int]) -> Model:
        order = [self._idx(d) for d in dims]
        return Model(self._rearrange(order), [self.shape[i] for i in order],
                     [self.names[i] for i in order])

    def flatten(self, dims: Sequence[str | int] | None, name: str) -> Model:
        idx = list(range(len(self.shape))) if dims is None else [self._idx(d) for d in dims]
        order: list[int] = []
        shape: list[int] = []
        names: list[str] = []
        for i in range(len(self.shape)):
            if i == idx[0]:
                order += idx
                shape.append(math.prod(self.shape[j] for j in idx))
                names.append(name)
            elif i not in idx:
                order.append(i)
                shape.append(self.shape[i])
                names.append(self.names[i])
        return Model(self._rearrange(order), shape, names)

    def unflatten(self, dim: str | int, sizes: Sequence[int], names: Sequence[str]) -> Model:
        k = self._idx(dim)
        assert math.prod(sizes) == self.shape[k]
        return Model(self.flat, [*self.shape[:k], *sizes, *self.shape[k + 1:]],
                     [*self.names[:k], *names, *self.names[k + 1:]])

    def _locate(self, rank: int) -> tuple[int, list[int]] | None:
        if rank not in self.flat:
            return None
        h, x = divmod(self.flat.index(rank), self.size)
        coord = []
        for s in reversed(self.shape):
            x, c = divmod(x, s)
            coord.append(c)
        return h, coord[::-1]

    def coordinate(self, rank: int) -> tuple[int, ...] | None:
        loc = self._locate(rank)
        return None if loc is None else tuple(loc[1])

    def group(self, rank: int, k: int) -> tuple[int, ...]:
        loc = self._locate(rank)
        assert loc is not None
        h, c = loc
        st = _strides(self.shape)
        base = h * self.size + sum(ci * si for i, (ci, si) in enumerate(zip(c, st)) if i != k)
        return tuple(self.flat[base + t * st[k]] for t in range(self.shape[k]))

    def instance(self, rank: int) -> Any:
        loc = self._locate(rank)
        assert loc is not None
        h = loc[0]
        return _nest(self.flat[h * self.size:(h + 1) * self.size], self.shape)


# ---------------------------------------------------------------------------------------
# Expected answers (from torch or from the model) and the comparison with a MeshView.
# ---------------------------------------------------------------------------------------
def _tuplify(x: Any) -> Any:
    return tuple(_tuplify(y) for y in x) if isinstance(x, list) else x


def _line(mesh: Any, coord: Sequence[int], k: int) -> tuple[int, ...]:
    """The ranks of nested ``mesh`` along dim ``k`` through ``coord``."""
    out = []
    for t in range(len(_at(mesh, coord[:k]))):
        c = [*coord[:k], t, *coord[k + 1:]]
        out.append(_at(mesh, c))
    return tuple(out)


def _at(mesh: Any, coord: Sequence[int]) -> Any:
    for c in coord:
        mesh = mesh[c]
    return mesh


class Expected:
    """Per-rank answers for ranks ``0..world-1``: coordinate, instance and groups."""

    def __init__(self, names: Sequence[str], shape: Sequence[int], world: int) -> None:
        self.names = tuple(names)
        self.shape = tuple(shape)
        self.world = world
        self.coord: list[tuple[int, ...] | None] = []
        self.instance: list[Any] = []
        self.groups: list[list[tuple[int, ...]]] = []
        self.pg: list[list[list[int]] | None] = []  # torch's (sorted) group ranks

    @classmethod
    def from_torch(cls, res: dict[str, Any], world: int, off_mesh: set[int]) -> Expected:
        """Torch's answers; ``off_mesh``: the ranks torch says are not in the root mesh.

        Torch raises (RuntimeError: "... it needs to contain the local rank") when such a
        rank slices a mesh with several instances; only those ranks may have errors, and
        for them the expected coordinate is None.
        """
        e = cls(res["names"], res["shape"], world)
        meshes, pgs = res["tables"]["mesh"], res["tables"]["pg"]
        for r_text, err in res.get("errors", {}).items():
            assert int(r_text) in off_mesh, f"torch failed on rank {r_text} only: {err}"
            assert ("it needs to contain the local rank" in err
                    or "source of this op failed" in err), err
        for r in range(world):
            c = res["coord"][r]
            if c is None:
                e.coord.append(None)
                e.instance.append(None)
                e.groups.append([])
                e.pg.append(None)
                continue
            m = meshes[res["mesh"][r]]
            e.coord.append(tuple(c))
            e.instance.append(_tuplify(m))
            e.groups.append([_line(m, c, k) for k in range(len(e.shape))])
            e.pg.append([pgs[i] for i in res["pg"][r]])
        return e

    @classmethod
    def from_model(cls, model: Model, world: int) -> Expected:
        e = cls(model.names, model.shape, world)
        for r in range(world):
            c = model.coordinate(r)
            e.coord.append(c)
            e.instance.append(None if c is None else model.instance(r))
            e.groups.append([] if c is None else
                            [model.group(r, k) for k in range(len(model.shape))])
            e.pg.append(None)
        return e

    def diff(self, other: Expected) -> str | None:
        """A description of the first difference with ``other``, or None."""
        if (self.names, self.shape) != (other.names, other.shape):
            return f"names/shape {self.names}{self.shape} != {other.names}{other.shape}"
        for r in range(self.world):
            a = (self.coord[r], self.instance[r], self.groups[r])
            b = (other.coord[r], other.instance[r], other.groups[r])
            if a != b:
                return f"rank {r}: {a} != {b}"
        return None


def check_view(view: MeshView, exp: Expected, where: str) -> int:
    """Assert that ``view`` answers like ``exp`` for every rank; returns the ranks checked."""
    assert view.names == exp.names, where
    assert view.shape == exp.shape, where
    for r in range(exp.world):
        at = f"{where}, rank {r}"
        c = exp.coord[r]
        assert view.coordinate(r) == c, at
        if c is None:
            with pytest.raises(RankNotInMeshError):
                view.group(r, 0)
            continue
        assert view.instance(r) == exp.instance[r], at
        for k, name in enumerate(exp.names):
            g = view.group(r, k)
            assert g == exp.groups[r][k], f"{at}, dim {name!r}"
            assert view.group(r, name) == g, f"{at}, dim {name!r}"
            assert view.local_rank(r, k) == c[k], f"{at}, dim {name!r}"
            pg = exp.pg[r]
            if pg is not None:
                assert sorted(g) == pg[k], f"{at}, dim {name!r}: torch's process group"
    for r in (exp.world, exp.world + 3, 10**9):  # never a wrong answer off the universe
        assert view.coordinate(r) is None
    return exp.world


# ---------------------------------------------------------------------------------------
# Programs: torch ops (sent to the subprocess) and ours-only ops, one list.
# ---------------------------------------------------------------------------------------
class Program:
    """A list of ops.  ``torch=False`` ops run only on our side; ``expect=j`` compares
    such an op with torch's variable ``j``; ``ours=`` replaces an op on our side."""

    def __init__(self, world: int, label: str) -> None:
        self.world = world
        self.label = label
        self.ops: list[dict[str, Any]] = []

    def add(self, op: str, **kw: Any) -> int:
        self.ops.append({"op": op, "torch": True, **kw})
        return len(self.ops) - 1

    def ours(self, op: str, expect: int | None, **kw: Any) -> int:
        self.ops.append({"op": op, "torch": False, "expect": expect, **kw})
        return len(self.ops) - 1

    @property
    def remap(self) -> dict[int, int]:
        """Index of each torch op in the torch-only program."""
        torch_ops = [i for i, op in enumerate(self.ops) if op["torch"]]
        return {i: j for j, i in enumerate(torch_ops)}

    def torch_json(self) -> dict[str, Any]:
        remap = self.remap
        ops = []
        for op in self.ops:
            if not op["torch"]:
                continue
            t = {k: v for k, v in op.items()
                 if k not in ("torch", "ours", "expect", "model", "ours_raises")}
            if "src" in t:
                t["src"] = remap[t["src"]]
            if "srcs" in t:
                t["srcs"] = [remap[s] for s in t["srcs"]]
            ops.append(t)
        return {"world": self.world, "ops": ops}


def run_ours(op: dict[str, Any], views: list[Any]) -> MeshView:
    """Our side of ``op`` (its ``ours=`` replacement if any) on the earlier ``views``."""
    op = op.get("ours", op)
    kind = op["op"]
    if kind == "init":
        return MeshView.from_shape(tuple(op["shape"]), tuple(op["names"]))
    if kind == "tensor":
        return MeshView.from_ranks(op["ranks"], tuple(op["names"]))
    if kind == "concat":
        srcs = [views[i] for i in op["srcs"]]
        for s in srcs:
            if isinstance(s, BaseException):
                raise RuntimeError("a source failed") from s
        return concatenate(srcs)
    src = views[op["src"]]
    if isinstance(src, BaseException):
        raise RuntimeError("the source failed") from src
    if kind == "slice":
        return src[tuple(op["names"])]
    if kind == "flatten":
        dims = op.get("dims")
        out = src.flatten(None if dims is None else tuple(dims), op["name"])
        return out[tuple(op["select"])] if "select" in op else out
    if kind == "unflatten":
        return src.unflatten(op["dim"], tuple(op["sizes"]), tuple(op["names"]))
    if kind == "transpose":
        return src.transpose(*op["dims"])
    raise AssertionError(kind)


def slice_op(src: int, names: Sequence[str]) -> dict[str, Any]:
    """A slice op, for ``model=`` or ``ours=``."""
    return {"op": "slice", "src": src, "names": list(names)}


def flatten_op(src: int, dims: Sequence[str], name: str, **kw: Any) -> dict[str, Any]:
    """An ours-only flatten op (``dims`` merged, the other dims kept), for ``model=``."""
    return {"op": "flatten", "src": src, "dims": list(dims), "name": name, **kw}


def run_model(op: dict[str, Any], models: list[Any]) -> Model | None:
    """The model's answer, or None where the model cannot express the op.

    A ``concat`` has a model only when the program states its equivalent (``model=``: a
    slice or flatten of one source); that equivalence is itself checked against torch.
    """
    op = op.get("model", op.get("ours", op))
    kind = op["op"]
    if kind == "init":
        return Model.from_shape(op["shape"], op["names"])
    if kind == "tensor":
        return Model.from_nested(op["ranks"], op["names"])
    if kind == "concat":
        return None
    src = models[op["src"]]
    if src is None:
        return None
    if kind == "slice":
        return src.select(op["names"])
    if kind == "flatten":
        out = src.flatten(op.get("dims"), op["name"])
        return out.select(op["select"]) if "select" in op else out
    if kind == "unflatten":
        return src.unflatten(op["dim"], op["sizes"], op["names"])
    if kind == "transpose":
        return src.select(op["dims"])
    raise AssertionError(kind)


# ---------------------------------------------------------------------------------------
# Running torch once (subprocesses) and comparing, op by op.
# ---------------------------------------------------------------------------------------
def run_torch(programs: Sequence[Program], tmp: Path) -> list[list[dict[str, Any]]]:
    """Torch's answers for every program: two subprocesses (the suite runs on 2 cores).

    Each runs ``tests/torch_mesh_reference.py`` on every other program; their input,
    output and stderr files go in ``tmp``.
    """
    shares = [programs[0::2], programs[1::2]]
    procs = []
    for j, share in enumerate(shares):
        (tmp / f"in{j}.json").write_text(json.dumps({"cases": [p.torch_json() for p in share]}))
        with open(tmp / f"in{j}.json") as fin, open(tmp / f"out{j}.json", "w") as fout, \
                open(tmp / f"err{j}.txt", "w") as ferr:
            procs.append(subprocess.Popen([sys.executable, str(REFERENCE_SCRIPT)],
                                          stdin=fin, stdout=fout, stderr=ferr))
    try:
        for proc in procs:
            proc.wait(timeout=TORCH_TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outs = []
    for j, proc in enumerate(procs):
        assert proc.returncode == 0, (tmp / f"err{j}.txt").read_text()[-4000:]
        data = json.loads((tmp / f"out{j}.json").read_text())
        release = ".".join(data["torch"].split(".")[:2])
        assert release in TORCH_CHECKED, \
            f"checked against torch {' and '.join(TORCH_CHECKED)}, got {data['torch']}"
        outs.append(data["results"])
    results: list[list[dict[str, Any]]] = [[] for _ in programs]
    results[0::2], results[1::2] = outs[0], outs[1]
    return results


class SourceFailed(Exception):
    """An op whose source op raised (on our side); not itself a finding."""


# The torch refusals the test knows (cases 1, 4, 5 and 8 in test_mesh_vs_torch.py's docstring),
# by op: (exception, message).
TORCH_REFUSALS = {
    "slice": ("KeyError", "Mesh dim indices should be in ascending order"),
    "unflatten": ("AssertionError", ""),
    "concat": ("RuntimeError", "Cannot concatenate overlapping meshes"),
}
# What ours raises where torch refuses too.
OUR_REFUSALS: dict[str, type[MeshError]] = {
    "unflatten": NotRepresentableError,
    "concat": OverlapError,
}


def _is_propagated(err: str) -> bool:
    return "source of this op failed" in err


def run_program(prog: Program, results: list[dict[str, Any]], stats: Counter[str]) -> None:
    """Run ``prog`` on our side and the model's, op by op, against torch's ``results``.

    For each op, in this order: ``ours_raises`` must be what ours raised, torch having
    answered; an op whose source failed on our side must have failed in torch too; where
    torch answers (the op itself or its ``expect``), ours must answer the same for every
    rank, and torch must agree with the model where the model expresses the op; where
    torch refuses, the refusal must be listed (:data:`TORCH_REFUSALS`) and, if ours
    refuses too, with the error listed in :data:`OUR_REFUSALS` (a refused unflatten must be
    non-affine in the model); otherwise ours must answer like the model.  ``stats`` counts
    the checks by kind.
    """
    views: list[Any] = []
    models: list[Model | None] = []
    world = prog.world
    remap = prog.remap
    root = results[0]
    assert "error" not in root and "errors" not in root, root
    off_mesh = {r for r in range(world) if root["coord"][r] is None}
    if off_mesh:
        stats["torch raised for ranks off the mesh"] += sum(
            bool(res.get("errors")) for res in results)
    for i, op in enumerate(prog.ops):
        where = f"{prog.label}: op {i} {op}"
        try:
            view: Any = run_ours(op, views)
        except (MeshError, RuntimeError) as e:
            view = e if isinstance(e, MeshError) else SourceFailed(str(e))
        model = None if isinstance(view, BaseException) else run_model(op, models)
        views.append(view)
        models.append(model)
        torch_res = None
        if op["torch"]:
            torch_res = results[remap[i]]
        elif op["expect"] is not None:
            torch_res = results[remap[op["expect"]]]
        if "ours_raises" in op:  # torch accepts what ours must refuse
            assert type(view).__name__ == op["ours_raises"], f"{where}: {view!r}"
            assert torch_res is not None and "error" not in torch_res, where
            stats[f"torch accepted, ours raised {op['ours_raises']}"] += 1
            continue
        if isinstance(view, SourceFailed):
            assert torch_res is None or "error" in torch_res, where
            continue
        if torch_res is not None and "error" not in torch_res:
            assert not isinstance(view, BaseException), \
                f"{where}: torch answers, ours raised {view!r}"
            exp = Expected.from_torch(torch_res, world, off_mesh)
            stats["ranks vs torch"] += check_view(view, exp, where)
            stats["views vs torch"] += 1
            if not op["torch"]:
                stats["ours-only ops vs torch's equivalent"] += 1
            if model is not None:
                d = exp.diff(Expected.from_model(model, world))
                assert d is None, f"{where}: torch disagrees with the brute-force model: {d}"
                stats["views vs torch and model"] += 1
            continue
        if torch_res is not None:  # torch refused
            err = torch_res["error"]
            if _is_propagated(err):
                continue
            kind = prog.ops[i]["op"] if op["torch"] else prog.ops[op["expect"]]["op"]
            exc, msg = TORCH_REFUSALS[kind]
            assert err.startswith(exc + ":") and msg in err, f"{where}: unlisted refusal {err}"
            stats[f"torch refused {kind}"] += 1
            if isinstance(view, MeshError):
                assert isinstance(view, OUR_REFUSALS[kind]), f"{where}: {view!r} vs {err}"
                stats[f"both refused {kind}"] += 1
                src_model = models[op["src"]] if "src" in op else None
                if kind == "unflatten" and src_model is not None:
                    target = src_model.unflatten(op["dim"], op["sizes"], op["names"])
                    root_model = models[0]
                    assert root_model is not None
                    assert_refusal_justified(root_model, target, op["names"], where)
                    stats["refusals justified by the model"] += 1
                continue
        assert not isinstance(view, BaseException), f"{where}: {view!r}"
        assert model is not None, f"{where}: no torch answer and no model"
        stats["ranks vs model"] += check_view(view, Expected.from_model(model, world), where)
        stats["views vs model"] += 1



def _stride_of(offsets: Sequence[int]) -> int | None:
    """``d`` if ``offsets`` is ``o, o + d, o + 2d, ...`` (``d > 0``; 1 for one element)."""
    d = {b - a for a, b in zip(offsets, offsets[1:])} or {1}
    return d.pop() if len(d) == 1 and min(d) > 0 else None


def assert_refusal_justified(root: Model, result: Model, new_dims: Sequence[str],
                             where: str) -> None:
    """An unflatten we refused must not be an affine map of offsets.

    Offsets are positions in the root's rank list.  If, for every new dim, every group
    along it is an arithmetic progression of offsets with one common stride, the dims
    are the single-mode layouts ``size:stride`` and the split is representable.
    """
    affine = True
    for name in new_dims:
        k = result.names.index(name)
        strides = {_stride_of([root.flat.index(g) for g in result.group(r, k)])
                   for r in result.flat}
        affine = affine and len(strides) == 1 and None not in strides
    assert not affine, f"{where}: refused, but every new dim is a single stride: {new_dims}"



# ---------------------------------------------------------------------------------------
# Generators: random programs (torch ops and our equivalents) and random walks (ours only).
# ---------------------------------------------------------------------------------------
_SIZES = [1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 6, 8]
_NAMES = ["a", "b", "c", "d"]


def factorizations(n: int, parts: int) -> list[list[int]]:
    """Every ordered way of writing ``n`` as a product of ``parts`` positive factors."""
    if parts == 1:
        return [[n]]
    return [[d, *rest] for d in range(1, n + 1) if n % d == 0
            for rest in factorizations(n // d, parts - 1)]


def random_program(rng: random.Random, cid: int) -> Program:
    """Random program ``#cid``: a root of 1-4 dims (<= 64 ranks; ``init`` or a permuted
    explicit tensor, in a world of its ranks or, for some, a possibly larger one), then 3-6
    random steps of slices, flattens, unflattens and concatenations.  Torch expresses a
    non-ascending slice, and a flatten that keeps the other dims, by a ``concat``, against
    which ours (``ours`` ops) is compared."""
    while True:
        ndim = rng.randint(1, 4)
        shape = [rng.choice(_SIZES) for _ in range(ndim)]
        if math.prod(shape) <= 64 and (math.prod(shape) > 1 or rng.random() < 0.2):
            break
    n = math.prod(shape)
    names = _NAMES[:ndim]
    kind = rng.choices(["init", "perm", "subset", "bigworld"], [4, 3, 2, 1])[0]
    world = n
    if kind in ("subset", "bigworld"):
        world = rng.randint(n, max(n, 64 if n > 16 else 2 * n + 2))
    p = Program(world, f"random #{cid}: {kind} {shape} world={world}")
    if kind in ("init", "bigworld"):
        root = p.add("init", shape=shape, names=names)
    else:
        ranks = rng.sample(range(world), n)
        it = iter(ranks)

        def nest(sh: Sequence[int]) -> Any:
            return [next(it) for _ in range(sh[0])] if len(sh) == 1 else \
                [nest(sh[1:]) for _ in range(sh[0])]

        root = p.add("tensor", ranks=nest(shape), names=names)
    meta: dict[int, tuple[list[str], list[int]]] = {root: (names, shape)}
    fresh = itertools.count()
    flattened: list[int] = []

    def slice_(src: int, sel: Sequence[str]) -> int:
        """torch: an ascending slice, or a concat of single-dim slices (non-ascending)."""
        nm, sh = meta[src]
        if list(sel) == [x for x in nm if x in sel]:
            v = p.add("slice", src=src, names=list(sel))
        else:
            parts = [p.add("slice", src=src, names=[x]) for x in sel]
            for q, x in zip(parts, sel):
                meta[q] = ([x], [sh[nm.index(x)]])
            v = p.add("concat", srcs=parts, model=slice_op(src, sel))
            p.ours("slice", v, src=src, names=list(sel))
        meta[v] = (list(sel), [sh[nm.index(x)] for x in sel])
        return v

    for _ in range(rng.randint(3, 6)):
        src = rng.choice(list(meta))
        nm, sh = meta[src]
        action = rng.choice(["slice", "slice", "flatten", "flatten", "unflatten",
                             "unflatten", "concat"])
        if action == "slice":
            sel = rng.sample(nm, rng.randint(1, len(nm)))
            slice_(src, sel)
        elif action == "flatten":
            sel = rng.sample(nm, rng.randint(1, len(nm)))
            s = slice_(src, sel) if sel != nm else src
            name = f"f{next(fresh)}"
            f = p.add("flatten", src=s, name=name)
            meta[f] = ([name], [math.prod(sh[nm.index(x)] for x in sel)])
            flattened.append(f)
            p.ours("flatten", f, src=src, dims=sel, name=name, select=[name])
            others = [x for x in nm if x not in sel]
            if others and rng.random() < 0.6:
                # ours v.flatten(sel) keeps the other dims; the merged one at sel[0]'s place
                order = [x for x in nm if x not in sel[1:]]
                parts = []
                for x in order:
                    if x == sel[0]:
                        parts.append(f)
                    else:
                        q = p.add("slice", src=src, names=[x])
                        meta[q] = ([x], [sh[nm.index(x)]])
                        parts.append(q)
                k = p.add("concat", srcs=parts, model=flatten_op(src, sel, name))
                meta[k] = ([name if x == sel[0] else x for x in order],
                           [meta[q][1][0] for q in parts])
                p.ours("flatten", k, src=src, dims=sel, name=name)
        elif action == "unflatten":
            if flattened and rng.random() < 0.6:  # aim at multi-piece (flattened) dims
                src = rng.choice(flattened)
                nm, sh = meta[src]
            k = rng.randrange(len(nm))
            parts = rng.choice(factorizations(sh[k], rng.randint(1, 3)))
            new = [f"u{next(fresh)}" for _ in parts]
            u = p.add("unflatten", src=src, dim=rng.choice([k, nm[k]]), sizes=parts,
                      names=new)
            meta[u] = ([*nm[:k], *new, *nm[k + 1:]], [*sh[:k], *parts, *sh[k + 1:]])
        else:
            other = rng.choice(list(meta))
            if set(meta[other][0]) & set(nm):
                continue  # torch does not check name uniqueness in _concatenate
            c = p.add("concat", srcs=[src, other])
            meta[c] = (nm + meta[other][0], sh + meta[other][1])
    return p


def _random_shape(rng: random.Random) -> list[int]:
    while True:
        shape = [rng.choice(_SIZES) for _ in range(rng.randint(1, 4))]
        if math.prod(shape) <= 64:
            return shape


def check_random_walk(rng: random.Random, label: str) -> None:
    """Non-ascending slices, transposes, flattens keeping the other dims (any order), and
    unflattens of multi-piece dims, chained at random, against the explicit-array model.

    The root is a ``from_shape`` view (world: its ranks and 2 more) or, half the time, an
    explicit rank tensor over a random sample of a world of up to 2n + 2 ranks (n: the
    root's); then 8 random transforms, each result checked for every rank; an unflatten
    ours refuses (NotRepresentableError) must not be affine in the model
    (:func:`assert_refusal_justified`).
"""
    shape = _random_shape(rng)
    names = _NAMES[:len(shape)]
    n = math.prod(shape)
    if rng.random() < 0.5:
        view, model = MeshView.from_shape(shape, names), Model.from_shape(shape, names)
        world = n + 2
    else:
        world = rng.randint(n, 2 * n + 2)
        flat = rng.sample(range(world), n)
        model = Model(flat, shape, names)
        view = MeshView.from_ranks(_nest(flat, shape), names)
    root = model
    fresh = itertools.count()
    check_view(view, Expected.from_model(model, world), f"{label}: root")
    for step in range(8):
        nm = list(view.names)
        action = rng.choice(["slice", "transpose", "flatten", "flatten", "unflatten",
                             "unflatten"])
        where = f"{label} step {step}: {action} on {view!r}"
        if action == "slice":
            sel = rng.sample(nm, rng.randint(1, len(nm)))
            view, model = view[tuple(sel)], model.select(sel)
        elif action == "transpose":
            perm = rng.sample(nm, len(nm))
            view, model = view.transpose(*perm), model.select(perm)
        elif action == "flatten":
            sel = rng.sample(nm, rng.randint(1, len(nm)))
            name = f"f{next(fresh)}"
            view, model = view.flatten(tuple(sel), name), model.flatten(sel, name)
        else:
            k = rng.randrange(len(nm))
            parts = rng.choice(factorizations(view.shape[k], rng.randint(2, 3)))
            new = [f"u{next(fresh)}" for _ in parts]
            target = model.unflatten(k, parts, new)
            try:
                view = view.unflatten(nm[k], parts, new)
            except NotRepresentableError:
                assert_refusal_justified(root, target, new, where)
                continue
            model = target
        check_view(view, Expected.from_model(model, world), f"{where} -> {view!r}")
