"""Differential test: ``mesh.MeshView`` against torch 2.13's ``DeviceMesh`` (fake process group).

Every case is a small *program* (format in ``tests/torch_mesh_reference.py``) building meshes
by ``init`` (``init_device_mesh``) / explicit rank ``tensor`` (``DeviceMesh("cpu", t)``) /
``slice`` (``m[names]``) / ``flatten`` (``m._flatten(name)``) / ``unflatten``
(``m._unflatten(dim, sizes, names)``) / ``concat`` (``DeviceMesh._concatenate``).  Two
subprocesses run the torch programs on every rank ``r < world``
(``init_process_group("fake", store=FakeStore(), rank=r, world_size=world)``, destroyed after
each rank; ``DeviceMesh`` keeps no other global state we use: ``_mesh_resources`` only holds
the context-manager stack) and print JSON; this process never imports ``torch.distributed``.
Our side runs the same program with ``MeshView`` and, for every variable, rank and dim, checks

- ``coordinate(r)``   == torch ``get_coordinate()`` (``None`` off the mesh, both sides);
- ``instance(r)``     == torch ``mesh.tolist()``;
- ``group(r, k)``     == the line of torch's ``mesh`` through ``r`` along dim ``k``, IN ORDER;
- ``sorted(group)``   == torch ``get_process_group_ranks(get_group(k))``;
- ``local_rank(r,k)`` == torch's coordinate ``k``;  ``names`` and ``shape`` == torch's;

and, wherever the brute-force model (``Model``: an explicit rank array permuted, reshaped and
selected directly) can express the construction, that torch and the model agree.  Cases:
hand-written programs plus 60 random ones (fixed seed; shapes of 1-4 dims, <= 64 ranks,
size-1 dims, permuted explicit rank tensors, tensors over a subset of a larger world, worlds
larger than the mesh; random chains of slices, flattens, unflattens and concatenations).

Torch 2.13 behaviours found, relied on or worked around (each is exercised here):

- Process-group ranks are SORTED.  ``DeviceMesh`` creates groups with ``new_group(ranks)``,
  whose ``sort_ranks=True`` default sorts them (pytorch#193224); a dim spanning the whole
  world reuses the default group (ranks ``0..W-1``).  So for a permuted rank tensor, a
  transposed or a non-ascending flattened dim, ``get_process_group_ranks`` is not in mesh
  order.  The ORDER of our groups is checked against the line of torch's ``mesh`` tensor
  (which is in coordinate order), the set against ``get_process_group_ranks``.  Torch's
  ``get_local_rank`` is the index in the sorted group, so it differs from its own
  ``get_coordinate()`` there (``test_torch_local_rank_is_the_sorted_index``); our
  ``local_rank`` is checked against torch's coordinate.
- Ranks off the mesh (explicit tensor over a subset of the world, or a world larger than the
  mesh): ``get_coordinate()`` is None, but ``get_group`` raises IndexError, and SLICING a
  mesh with several instances raises RuntimeError ("... it needs to contain the local rank")
  on those ranks, so flatten/unflatten/concat of such slices fail there too.  For those ranks
  (only ranks off the root mesh may fail) we check ``coordinate(r) is None`` and that
  ``group`` raises RankNotInMeshError.

Where torch refuses (or accepts what it should not), the check is against torch's
equivalent construction and/or the brute-force model:

1. Non-ascending slices, ``m["c", "a"]``: torch raises KeyError ("Mesh dim indices should be
   in ascending order").  Ours ``v["c", "a"]`` is checked against the model and against
   torch's ``DeviceMesh._concatenate([m["c"], m["a"]])`` (torch does support that).
2. Flattening dims in a non-ascending order: torch cannot slice them first (case 1), so ours
   ``v.flatten(("c", "a"))`` is compared with ``_concatenate([m["c"], m["a"]])._flatten()``.
3. Flattening while keeping the other dims (ours ``v.flatten(("a", "c"))`` on (a, b, c) is
   (a_c, b)): torch's ``_flatten`` returns only the 1-D flattened mesh; compared with
   ``_concatenate([m["a", "c"]._flatten(), m["b"]])`` and with the model.
4. Slicing a non-contiguous flattened dim from the root together with a dim it interleaves
   with: on a (2, 2, 3) mesh after ``m["a", "c"]._flatten("a_c")``, torch ``m["a_c", "b"]`` and
   ``m["b", "a_c"]`` raise KeyError (ascending order); ours ``v.flatten(("a", "c"))["a_c", "b"]``
   and ``[..., "b", "a_c"]`` are checked against the model.  (``m["a_c"]`` alone and
   ``m["a", "b_c"]`` work in torch and are compared directly.)
5. Unflattening a multi-piece (flattened) dim into sizes that cut across its pieces
   (e.g. ``m["a", "c"]._flatten()._unflatten(0, (3, 2), ...)`` on (2, 2, 3), and every
   2- and 3-factor split of every ordered flatten of (2, 3, 2) and (3, 2, 4)): torch raises a
   bare AssertionError; ours must raise NotRepresentableError, and the model must show that
   the split is not affine in rank offsets (else refusing would be a bug).  In every case
   where torch accepted an unflatten, ours accepted it too, and vice versa.
6. ``transpose`` and arbitrary chains of non-ascending slices, flattens (any order, keeping
   the other dims) and unflattens, for which torch has no API, are checked against the model
   only (``test_brute_force_walks``).
7. Torch does not check that dim names stay unique in ``_concatenate`` (``[m["b"], m["b"]]``
   with ``b`` of size 1) or in ``_unflatten`` (names ``("x", "x")``, or an existing name):
   it accepts them; ours must raise DuplicateNameError.  The random programs never
   create equal names.
8. Overlapping ``_concatenate``: torch raises RuntimeError ("Cannot concatenate overlapping
   meshes"), ours OverlapError.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
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

    def __init__(self, flat: Sequence[int], shape: Sequence[int], names: Sequence[str]):
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


def _slice(src: int, names: Sequence[str]) -> dict[str, Any]:
    return {"op": "slice", "src": src, "names": list(names)}


def _flatten(src: int, dims: Sequence[str], name: str, **kw: Any) -> dict[str, Any]:
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
# Cases: hand-written, then random programs from a fixed seed.
# ---------------------------------------------------------------------------------------
def handwritten() -> list[Program]:
    progs = []

    p = Program(8, "2x2x2: slices, flatten, non-ascending via concat")
    m = p.add("init", shape=[2, 2, 2], names=["a", "b", "c"])
    for names in (["a"], ["b"], ["c"], ["a", "b"], ["a", "c"], ["b", "c"]):
        p.add("slice", src=m, names=names)
    ac = p.add("slice", src=m, names=["a", "c"])
    f = p.add("flatten", src=ac, name="a_c")
    p.ours("flatten", f, src=m, dims=["a", "c"], name="a_c", select=["a_c"])
    sc, sa = p.add("slice", src=m, names=["c"]), p.add("slice", src=m, names=["a"])
    ca = p.add("concat", srcs=[sc, sa], model=_slice(m, ["c", "a"]))
    p.ours("slice", ca, src=m, names=["c", "a"])
    p.add("slice", src=m, names=["c", "a"])  # torch refuses (KeyError); checked vs the model
    fca = p.add("flatten", src=ca, name="c_a")
    p.ours("flatten", fca, src=m, dims=["c", "a"], name="c_a", select=["c_a"])
    sb = p.add("slice", src=m, names=["b"])
    # the merged dim goes where "c" (listed first) was
    k = p.add("concat", srcs=[sb, fca], model=_flatten(m, ["c", "a"], "c_a"))
    p.ours("flatten", k, src=m, dims=["c", "a"], name="c_a")
    progs.append(p)

    p = Program(8, "explicit permuted rank tensor (torch sorts group ranks)")
    t = p.add("tensor", ranks=[[3, 0, 6, 5], [1, 7, 2, 4]], names=["x", "y"])
    p.add("slice", src=t, names=["y"])
    p.add("slice", src=t, names=["x"])
    p.add("flatten", src=t, name="xy")
    p.add("unflatten", src=t, dim="y", sizes=[2, 2], names=["y0", "y1"])
    sy, sx = p.add("slice", src=t, names=["y"]), p.add("slice", src=t, names=["x"])
    yx = p.add("concat", srcs=[sy, sx], model=_slice(t, ["y", "x"]))
    p.ours("slice", yx, src=t, names=["y", "x"])
    p.ours("transpose", yx, src=t, dims=["y", "x"])
    p.add("flatten", src=yx, name="yx")
    progs.append(p)

    p = Program(12, "explicit tensor over a subset of the world (ranks off the mesh)")
    t = p.add("tensor", ranks=[[3, 0, 6], [11, 2, 9]], names=["x", "y"])
    p.add("slice", src=t, names=["y"])
    p.add("flatten", src=t, name="xy")
    p.add("unflatten", src=t, dim="y", sizes=[3, 1], names=["p", "q"])
    progs.append(p)

    p = Program(10, "init smaller than the world")
    m = p.add("init", shape=[2, 3], names=["a", "b"])
    p.add("slice", src=m, names=["b"])
    p.add("flatten", src=m, name="ab")
    progs.append(p)

    p = Program(8, "size-1 dims everywhere")
    m = p.add("init", shape=[2, 1, 4, 1], names=["a", "b", "c", "d"])
    for names in (["b"], ["d"], ["b", "d"], ["a", "b"], ["b", "c"], ["a", "b", "c", "d"]):
        p.add("slice", src=m, names=names)
    bd = p.add("slice", src=m, names=["b", "d"])
    p.add("flatten", src=bd, name="bd")
    bc = p.add("slice", src=m, names=["b", "c"])
    p.add("flatten", src=bc, name="bc")
    p.add("unflatten", src=m, dim="c", sizes=[1, 2, 1, 2], names=["w", "x", "y", "z"])
    p.add("unflatten", src=m, dim="b", sizes=[1, 1], names=["b0", "b1"])
    sd, sb = p.add("slice", src=m, names=["d"]), p.add("slice", src=m, names=["b"])
    db = p.add("concat", srcs=[sd, sb], model=_slice(m, ["d", "b"]))
    p.ours("slice", db, src=m, names=["d", "b"])
    # torch does not check that names stay unique (case 7); ours must refuse
    p.add("concat", srcs=[sb, sb], ours_raises="DuplicateNameError")
    p.add("unflatten", src=m, dim="c", sizes=[2, 2], names=["x", "x"],
          ours_raises="DuplicateNameError")
    p.add("unflatten", src=m, dim="c", sizes=[2, 2], names=["a", "x"],
          ours_raises="DuplicateNameError")
    progs.append(p)

    for shape in ([1], [1, 1], [1, 1, 1, 1]):
        p = Program(1, f"all size-1 {shape}")
        names = ["a", "b", "c", "d"][:len(shape)]
        m = p.add("init", shape=shape, names=names)
        p.add("slice", src=m, names=names[-1:])
        p.add("flatten", src=m, name="all")
        p.add("unflatten", src=m, dim=names[0], sizes=[1, 1], names=["u", "v"])
        progs.append(p)

    p = Program(12, "(2,2,3): flattened non-contiguous dim: root slicing, unflatten, concat")
    m = p.add("init", shape=[2, 2, 3], names=["a", "b", "c"])
    ac = p.add("slice", src=m, names=["a", "c"])
    f = p.add("flatten", src=ac, name="a_c")
    bc = p.add("slice", src=m, names=["b", "c"])
    p.add("flatten", src=bc, name="b_c")
    p.add("slice", src=m, names=["a_c"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["a_c"]})
    p.add("slice", src=m, names=["a", "b_c"],
          ours={"op": "flatten", "src": m, "dims": ["b", "c"], "name": "b_c",
                "select": ["a", "b_c"]})
    # torch refuses these two (KeyError, ascending order): checked against the model
    p.add("slice", src=m, names=["a_c", "b"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["a_c", "b"]})
    p.add("slice", src=m, names=["b", "a_c"],
          ours={"op": "flatten", "src": m, "dims": ["a", "c"], "name": "a_c",
                "select": ["b", "a_c"]})
    p.add("unflatten", src=f, dim=0, sizes=[2, 3], names=["p", "q"])
    p.add("unflatten", src=f, dim=0, sizes=[6, 1], names=["p", "q"])
    p.add("unflatten", src=f, dim=0, sizes=[3, 2], names=["p", "q"])  # both refuse
    sb = p.add("slice", src=m, names=["b"])
    bf = p.add("concat", srcs=[sb, f],
               model=_flatten(m, ["a", "c"], "a_c", select=["b", "a_c"]))
    p.ours("flatten", bf, src=m, dims=["a", "c"], name="a_c", select=["b", "a_c"])
    p.add("unflatten", src=bf, dim="a_c", sizes=[2, 3], names=["p", "q"])
    p.add("unflatten", src=bf, dim="a_c", sizes=[3, 2], names=["p", "q"])  # both refuse
    sa = p.add("slice", src=m, names=["a"])
    a2 = p.add("unflatten", src=sa, dim="a", sizes=[2], names=["a2"])  # "a" renamed
    p.add("concat", srcs=[sa, a2])  # overlapping: both refuse
    p.add("concat", srcs=[f, sb], model=_flatten(m, ["a", "c"], "a_c", select=["a_c", "b"]))
    p.add("concat", srcs=[f, p.add("slice", src=m, names=["c"])])  # overlapping
    progs.append(p)

    p = Program(24, "(2,3,4): flatten (c,a) and unflatten it across the pieces")
    m = p.add("init", shape=[2, 3, 4], names=["a", "b", "c"])
    sc, sa = p.add("slice", src=m, names=["c"]), p.add("slice", src=m, names=["a"])
    ca = p.add("concat", srcs=[sc, sa], model=_slice(m, ["c", "a"]))
    fca = p.add("flatten", src=ca, name="c_a")
    p.ours("flatten", fca, src=m, dims=["c", "a"], name="c_a", select=["c_a"])
    for sizes in ([4, 2], [2, 4], [2, 2, 2], [8, 1], [1, 8]):
        names = [f"u{i}" for i in range(len(sizes))]
        p.add("unflatten", src=fca, dim=0, sizes=sizes, names=names)
    progs.append(p)
    for shape, world in (([2, 3, 2], 12), ([3, 2, 4], 24)):
        p = Program(world, f"{shape}: every ordered flatten, unflattened every way")
        m = p.add("init", shape=shape, names=["a", "b", "c"])
        singles = {x: p.add("slice", src=m, names=[x]) for x in "abc"}
        for sel in [*itertools.permutations("abc", 2), *itertools.permutations("abc", 3)]:
            if list(sel) == sorted(sel):
                src = p.add("slice", src=m, names=list(sel))
            else:
                src = p.add("concat", srcs=[singles[x] for x in sel], model=_slice(m, sel))
            name = "".join(sel)
            f = p.add("flatten", src=src, name=name)
            p.ours("flatten", f, src=m, dims=list(sel), name=name, select=[name])
            n = math.prod(shape["abc".index(x)] for x in sel)
            for parts in [*_factorizations(n, 2), *_factorizations(n, 3)]:
                if parts.count(1) <= 1:
                    new = [f"{name}{j}" for j in range(len(parts))]
                    p.add("unflatten", src=f, dim=name, sizes=parts, names=new)
        progs.append(p)
    return progs


_SIZES = [1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 6, 8]
_NAMES = ["a", "b", "c", "d"]


def _factorizations(n: int, parts: int) -> list[list[int]]:
    if parts == 1:
        return [[n]]
    return [[d, *rest] for d in range(1, n + 1) if n % d == 0
            for rest in _factorizations(n // d, parts - 1)]


def random_program(rng: random.Random, cid: int) -> Program:
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
            v = p.add("concat", srcs=parts, model=_slice(src, sel))
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
                k = p.add("concat", srcs=parts, model=_flatten(src, sel, name))
                meta[k] = ([name if x == sel[0] else x for x in order],
                           [meta[q][1][0] for q in parts])
                p.ours("flatten", k, src=src, dims=sel, name=name)
        elif action == "unflatten":
            if flattened and rng.random() < 0.6:  # aim at multi-piece (flattened) dims
                src = rng.choice(flattened)
                nm, sh = meta[src]
            k = rng.randrange(len(nm))
            parts = rng.choice(_factorizations(sh[k], rng.randint(1, 3)))
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


def all_programs() -> list[Program]:
    rng = random.Random(20260521)
    return handwritten() + [random_program(rng, i) for i in range(60)]


PROGRAMS = all_programs()


# ---------------------------------------------------------------------------------------
# Running torch once (a subprocess) and comparing.
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_results(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, Any]]]:
    """Torch's answers for every program: two subprocesses (the suite runs on 2 cores)."""
    tmp = tmp_path_factory.mktemp("torch_mesh")
    shares = [PROGRAMS[0::2], PROGRAMS[1::2]]
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
        assert data["torch"].startswith("2.13"), f"written against torch 2.13, got {data['torch']}"
        outs.append(data["results"])
    results: list[list[dict[str, Any]]] = [[] for _ in PROGRAMS]
    results[0::2], results[1::2] = outs[0], outs[1]
    return results


class SourceFailed(Exception):
    """An op whose source op raised (on our side); not itself a finding."""


# The torch refusals this file knows (see the module docstring), by op: (exception, message).
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


def run_program(prog: Program, results: list[dict[str, Any]], stats: dict[str, int]) -> None:
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


STATS: dict[str, int] = {}


@pytest.mark.parametrize("index", range(len(PROGRAMS)), ids=[p.label for p in PROGRAMS])
def test_against_torch(index: int, torch_results: list[list[dict[str, Any]]]) -> None:
    from collections import Counter

    stats: Counter[str] = Counter()
    run_program(PROGRAMS[index], torch_results[index], stats)
    for k, v in stats.items():
        STATS[k] = STATS.get(k, 0) + v


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
# Brute force only: random walks of our transforms, including what torch cannot express.
# ---------------------------------------------------------------------------------------
def _random_shape(rng: random.Random) -> list[int]:
    while True:
        shape = [rng.choice(_SIZES) for _ in range(rng.randint(1, 4))]
        if math.prod(shape) <= 64:
            return shape


@pytest.mark.parametrize("seed", range(30))
def test_brute_force_walks(seed: int) -> None:
    """Non-ascending slices, transposes, flattens keeping the other dims (any order), and
    unflattens of multi-piece dims, chained at random, against the explicit-array model."""
    rng = random.Random(7919 * seed + 1)
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
    check_view(view, Expected.from_model(model, world), f"walk {seed}: root")
    for step in range(8):
        nm = list(view.names)
        action = rng.choice(["slice", "transpose", "flatten", "flatten", "unflatten",
                             "unflatten"])
        where = f"walk {seed} step {step}: {action} on {view!r}"
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
            parts = rng.choice(_factorizations(view.shape[k], rng.randint(2, 3)))
            new = [f"u{next(fresh)}" for _ in parts]
            target = model.unflatten(k, parts, new)
            try:
                view = view.unflatten(nm[k], parts, new)
            except NotRepresentableError:
                assert_refusal_justified(root, target, new, where)
                continue
            model = target
        check_view(view, Expected.from_model(model, world), f"{where} -> {view!r}")


def test_torch_local_rank_is_the_sorted_index(
        torch_results: list[list[dict[str, Any]]]) -> None:
    """Torch's ``get_local_rank`` is the index in the SORTED group, not the coordinate.

    This is why our ``local_rank`` is checked against torch's ``get_coordinate()``.
    On the explicit permuted tensor ``[[3, 0, 6, 5], [1, 7, 2, 4]]``, rank 3 sits at
    (0, 0), but its "x" group [3, 1] sorts to [1, 3] and its "y" group [3, 0, 6, 5] to
    [0, 3, 5, 6]: torch's local ranks are (1, 1).
    """
    index = next(i for i, p in enumerate(PROGRAMS) if p.label.startswith("explicit permuted"))
    res = torch_results[index][0]
    pgs = res["tables"]["pg"]
    assert res["coord"][3] == [0, 0]
    assert [pgs[i] for i in res["pg"][3]] == [[1, 3], [0, 3, 5, 6]]
    assert res["local"][3] == [1, 1]
    view = MeshView.from_ranks([[3, 0, 6, 5], [1, 7, 2, 4]], ("x", "y"))
    assert (view.local_rank(3, "x"), view.local_rank(3, "y")) == (0, 0)
    assert (view.group(3, "x"), view.group(3, "y")) == ((3, 1), (3, 0, 6, 5))


def test_every_listed_case_is_exercised(torch_results: list[list[dict[str, Any]]]) -> None:
    """Each torch refusal listed at the top happens, and the bulk of the checks is real."""
    from collections import Counter

    stats: Counter[str] = Counter()
    for prog, res in zip(PROGRAMS, torch_results):
        run_program(prog, res, stats)
    assert stats["torch refused slice"] >= 3  # non-ascending slices (case 1 and case 4)
    assert stats["views vs model"] >= 3  # ... where ours answered and matched the model
    assert stats["both refused unflatten"] >= 50
    assert stats["refusals justified by the model"] >= 50
    assert stats["both refused concat"] >= 2
    assert stats["torch raised for ranks off the mesh"] >= 1
    assert stats["ours-only ops vs torch's equivalent"] >= 100
    assert stats["views vs torch and model"] >= 1000
    assert stats["ranks vs torch"] >= 10_000
