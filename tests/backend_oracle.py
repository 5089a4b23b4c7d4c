"""A brute-force mesh for the backend tests: every rank written out in a NumPy array.

:class:`BruteMesh` holds an array of shape ``(instances, *shape)``: axis 0 enumerates the
instances (the submeshes a view stands for), the other axes are the named dims.  Each
transform is the obvious array operation (slicing moves the dropped dims into axis 0,
flatten transposes then reshapes, unflatten reshapes), and each query searches the array,
so nothing here uses ``layout`` or ``mesh``.  The backend tests derive their expected groups
from it, independently of the code under test.

Ops are plain tuples, applied with :func:`apply` to a ``mesh.MeshView`` and a
:class:`BruteMesh` alike:

- ``("select", dims)``: ``view[dims]`` (any order, a subset transposes and slices)
- ``("transpose", dims)``: ``view.transpose(*dims)``
- ``("flatten", dims, name)``: ``view.flatten(dims, name)``
- ``("unflatten", dim, sizes, names)``: ``view.unflatten(dim, sizes, names)``
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Op = tuple[Any, ...]


class BruteMesh:
    """A mesh as an explicit ``(instances, *shape)`` array of global ranks."""

    def __init__(self, arr: np.ndarray, names: Sequence[str]) -> None:
        assert arr.ndim == len(names) + 1, (arr.shape, names)
        self.arr = arr
        self.names = tuple(names)

    @classmethod
    def from_shape(cls, shape: Sequence[int], names: Sequence[str]) -> BruteMesh:
        return cls(np.arange(math.prod(shape)).reshape(1, *shape), names)

    @classmethod
    def from_ranks(cls, ranks: Any, names: Sequence[str]) -> BruteMesh:
        return cls(np.array(ranks)[None], names)

    # ---- transforms ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.arr.shape[1:])

    def _idx(self, dim: str | int) -> int:
        return self.names.index(dim) if isinstance(dim, str) else dim % len(self.names)

    def select(self, dims: Sequence[str | int]) -> BruteMesh:
        keep = [self._idx(d) for d in dims]
        rest = [i for i in range(len(self.names)) if i not in keep]
        a = self.arr.transpose([0, *(1 + i for i in rest), *(1 + i for i in keep)])
        return BruteMesh(a.reshape(-1, *(self.shape[i] for i in keep)),
                         [self.names[i] for i in keep])

    def flatten(self, dims: Sequence[str | int], name: str) -> BruteMesh:
        idx = [self._idx(d) for d in dims]
        order: list[int] = []
        names: list[str] = []
        for i in range(len(self.names)):
            if i == idx[0]:
                order.extend(idx)
                names.append(name)
            elif i not in idx:
                order.append(i)
                names.append(self.names[i])
        a = self.arr.transpose([0, *(1 + i for i in order)])
        shape = [math.prod(self.shape[i] for i in idx) if i == idx[0] else self.shape[i]
                 for i in range(len(self.names)) if i == idx[0] or i not in idx]
        return BruteMesh(a.reshape(a.shape[0], *shape), names)

    def unflatten(self, dim: str | int, sizes: Sequence[int], names: Sequence[str]) -> BruteMesh:
        k = self._idx(dim)
        shape = [*self.shape[:k], *sizes, *self.shape[k + 1:]]
        return BruteMesh(self.arr.reshape(self.arr.shape[0], *shape),
                         [*self.names[:k], *names, *self.names[k + 1:]])

    # ---- queries (by search) ------------------------------------------------------------
    @property
    def ranks(self) -> set[int]:
        return set(self.arr.flatten().tolist())

    def _where(self, rank: int) -> tuple[int, ...] | None:
        hits = np.argwhere(self.arr == rank)
        assert len(hits) <= 1, f"rank {rank} appears {len(hits)} times"
        return tuple(int(x) for x in hits[0]) if len(hits) else None

    def coordinate(self, rank: int) -> tuple[int, ...] | None:
        where = self._where(rank)
        return None if where is None else where[1:]

    def coord(self, rank: int) -> tuple[int, ...]:
        """The coordinate of a rank that is in the mesh."""
        where = self._where(rank)
        assert where is not None, f"rank {rank} is not in the mesh"
        return where[1:]

    def group(self, rank: int, dim: str | int) -> tuple[int, ...]:
        where = self._where(rank)
        assert where is not None, f"rank {rank} is not in the mesh"
        index: list[Any] = list(where)
        index[1 + self._idx(dim)] = slice(None)
        return tuple(int(x) for x in self.arr[tuple(index)])

    def instance(self, rank: int) -> list[Any]:
        where = self._where(rank)
        assert where is not None, f"rank {rank} is not in the mesh"
        out: list[Any] = self.arr[where[0]].tolist()
        return out


def apply(obj: Any, op: Op) -> Any:
    """Apply one op (see the module docstring) to a ``MeshView`` or a :class:`BruteMesh`."""
    kind = op[0]
    if kind == "select":
        return obj.select(op[1]) if isinstance(obj, BruteMesh) else obj[tuple(op[1])]
    if kind == "transpose":
        return obj.select(op[1]) if isinstance(obj, BruteMesh) else obj.transpose(*op[1])
    if kind == "flatten":
        return obj.flatten(tuple(op[1]), op[2])
    if kind == "unflatten":
        return obj.unflatten(op[1], tuple(op[2]), tuple(op[3]))
    raise ValueError(f"unknown op {op!r}")


def build(start: tuple[Any, ...], ops: Sequence[Op]) -> tuple[Any, BruteMesh]:
    """``(MeshView, BruteMesh)`` for a start (``("shape", shape, names)`` or
    ``("ranks", nested, names)``) followed by ``ops``."""
    from mesh import MeshView

    kind, data, names = start
    if kind == "shape":
        view, brute = MeshView.from_shape(tuple(data), tuple(names)), BruteMesh.from_shape(
            data, names)
    else:
        view, brute = MeshView.from_ranks(data, tuple(names)), BruteMesh.from_ranks(data, names)
    for op in ops:
        view, brute = apply(view, op), apply(brute, op)
    return view, brute
