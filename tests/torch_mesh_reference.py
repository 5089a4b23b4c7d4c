"""Torch's side of the differential test: run mesh programs on torch's ``DeviceMesh``.

Run as a script (``python tests/torch_mesh_reference.py < cases.json``); never imported
for its torch code by the test process, which stays free of ``torch.distributed``.
Importing this module only defines the program format below and imports nothing heavy.

Input (stdin): ``{"cases": [case, ...]}`` with ``case = {"world": W, "ops": [op, ...]}``.
Each op builds one variable (its index in ``ops``) on every rank ``r < W``, under the
fake process group ``init_process_group("fake", store=FakeStore(), rank=r, world_size=W)``:

- ``{"op": "init", "shape": [...], "names": [...]}``: ``init_device_mesh("cpu", shape, ...)``
- ``{"op": "tensor", "ranks": nested, "names": [...]}``: ``DeviceMesh("cpu", torch.tensor(ranks))``
- ``{"op": "slice", "src": i, "names": [...]}``: ``var[i][names]``
- ``{"op": "flatten", "src": i, "name": s}``: ``var[i]._flatten(s)`` (a 1-D mesh)
- ``{"op": "unflatten", "src": i, "dim": d, "sizes": [...], "names": [...]}``:
  ``var[i]._unflatten(d, sizes, names)``
- ``{"op": "concat", "srcs": [i, ...]}``: ``DeviceMesh._concatenate([var[i], ...])``

Output (stdout, one JSON object): ``{"torch": version, "results": [case_result, ...]}``;
``case_result`` is a list with one entry per op:

- ``{"error": "ExcType: message"}`` when the op raised on every rank (the message of a
  rank where its source did not fail, else "RuntimeError: the source of this op
  failed"; "rank-dependent failure: ..." if those ranks raised different types), or
- ``{"names": [...], "shape": [...], "coord": [c_r for r < W], "mesh": [m_r],
  "pg": [[g_{r,k} for k < ndim] for r], "local": [[l_{r,k}] for r],
  "errors": {"r": "ExcType: message"}}`` with ``errors`` for the ranks where the op
  raised (their entries are null) and, for every other rank r,
  ``c_r`` = ``get_coordinate()`` (None off the mesh), ``m_r`` = ``.mesh.tolist()``,
  ``g_{r,k}`` = ``get_process_group_ranks(get_group(k))`` and ``l_{r,k}`` =
  ``get_local_rank(k)``.  Each of ``m_r``, ``g_{r,k}``, ``l_{r,k}`` is null when
  that call raised for rank ``r`` (torch raises there for ranks off a sliced mesh).
  Meshes and groups are stored once each (``"tables"``) and referred to by index to keep
  the output O(W) per variable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["main"]


_PROPAGATED = "the source of this op failed"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _build(op: dict[str, Any], var: list[Any], torch: Any, DeviceMesh: Any,
           init_device_mesh: Any) -> Any:
    kind = op["op"]
    if kind == "init":
        return init_device_mesh("cpu", tuple(op["shape"]), mesh_dim_names=tuple(op["names"]))
    if kind == "tensor":
        return DeviceMesh("cpu", torch.tensor(op["ranks"]), mesh_dim_names=tuple(op["names"]))
    if kind == "concat":
        srcs = [var[i] for i in op["srcs"]]
        if any(isinstance(s, BaseException) for s in srcs):
            raise RuntimeError(_PROPAGATED)
        return DeviceMesh._concatenate(srcs)
    src = var[op["src"]]
    if isinstance(src, BaseException):
        raise RuntimeError(_PROPAGATED)
    if kind == "slice":
        return src[tuple(op["names"])]
    if kind == "flatten":
        return src._flatten(op["name"])
    if kind == "unflatten":
        return src._unflatten(op["dim"], tuple(op["sizes"]), tuple(op["names"]))
    raise ValueError(f"unknown op {kind!r}")


def _try(f: Any) -> Any:
    try:
        return f()
    except Exception:
        return None


def run_case(case: dict[str, Any]) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, _mesh_resources, init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = case["world"]
    ops = case["ops"]
    out: list[dict[str, Any]] = [{} for _ in ops]
    tables: list[dict[str, Any]] = [{"mesh": {}, "pg": {}} for _ in ops]

    def intern(table: dict[str, int], value: Any) -> int | None:
        if value is None:
            return None
        return table.setdefault(json.dumps(value), len(table))

    for rank in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        try:
            var: list[Any] = []
            for i, op in enumerate(ops):
                res = out[i]
                try:
                    m = _build(op, var, torch, DeviceMesh, init_device_mesh)
                except Exception as e:
                    var.append(e)
                    res.setdefault("errors", {})[str(rank)] = _err(e)
                    for key in ("coord", "mesh", "pg", "local"):
                        res.setdefault(key, []).append(None)
                    continue
                var.append(m)
                res["names"] = list(m.mesh_dim_names)
                res["shape"] = list(m.shape)
                coord = m.get_coordinate()
                res.setdefault("coord", []).append(None if coord is None else list(coord))
                res.setdefault("mesh", []).append(
                    intern(tables[i]["mesh"], _try(lambda m=m: m.mesh.tolist())))
                res.setdefault("pg", []).append([
                    intern(tables[i]["pg"],
                           _try(lambda m=m, k=k: dist.get_process_group_ranks(m.get_group(k))))
                    for k in range(m.ndim)])
                res.setdefault("local", []).append([_try(lambda m=m, k=k: m.get_local_rank(k))
                                                    for k in range(m.ndim)])
        finally:
            dist.destroy_process_group()
        # nothing may leak into the next rank: no group, no mesh on the context stack
        # (flatten caches live on each root mesh object, which is dropped here)
        assert not dist.is_initialized() and not _mesh_resources.mesh_stack
    for i, (res, tab) in enumerate(zip(out, tables)):
        errors = res.get("errors", {})
        if len(errors) == world:
            # ranks off the mesh fail earlier (slicing there raises); the others decide
            own = {r: e for r, e in errors.items() if _PROPAGATED not in e} or errors
            kinds = {e.split(":")[0] for e in own.values()}
            out[i] = {"error": next(iter(own.values())) if len(kinds) == 1 else
                      f"rank-dependent failure: {sorted(own.items())}"}
        else:
            res["tables"] = {key: [json.loads(s) for s in t] for key, t in tab.items()}
    return out


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")  # torch warns that slicing flattened dims is deprecated
    import torch

    cases = json.load(sys.stdin)["cases"]
    results = [run_case(c) for c in cases]
    json.dump({"torch": torch.__version__, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
