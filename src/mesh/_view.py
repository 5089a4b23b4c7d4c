"""The :class:`MeshView` value: named dims over a rank map, computed from layouts."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

import attrs

from layout import (
    CompositionError,
    Layout,
    coalesce,
    complement,
    composition,
    flatten,
    is_tractable,
    left_inverse,
    make_layout,
)

from ._errors import (
    DuplicateNameError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshTypeError,
    NotRepresentableError,
    OverlapError,
    RankNotInMeshError,
    UnknownDimError,
)
from ._rankmap import RankMap, as_int, as_size

__all__ = ["Dim", "MeshView", "Nested"]

Dim = Union[str, int]
"""A dim, by name or by index (negative indices count from the end)."""

Nested = Union[int, tuple["Nested", ...]]
"""A rank tensor as nested tuples."""


def _check_names(names: tuple[object, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    for n in names:
        if not isinstance(n, str):
            raise InvalidNameError(f"dim names must be non-empty strings, got {n!r}")
        if not n:
            raise InvalidNameError(f"dim names must be non-empty strings, got '' in {names!r}")
        if n in seen:
            raise DuplicateNameError(f"dim name {n!r} appears twice in {names!r}; names must be "
                                     "unique")
        seen.add(n)
    return names  # type: ignore[return-value]


def _names_conv(names: object) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise MeshTypeError(f"names must be a sequence of strings, got {names!r}")
    return _check_names(tuple(names))


def _image(mode: Layout, base: int) -> Sequence[int]:
    """The offsets ``base + mode(i)`` for ``i`` in ``[0, size)``, in index order."""
    shapes, strides = flatten(mode.shape), flatten(mode.stride)
    if len(shapes) == 1:
        s, d = shapes[0], strides[0]
        return range(base, base + s * d, d) if d else [base] * s
    cur: list[int] = [base]
    for s, d in zip(shapes, strides):
        if s != 1:
            steps = range(0, s * d, d) if d else [0] * s
            cur = [x + c for x in cur for c in steps]
    return cur


def _nest(flat: Sequence[int], shape: tuple[int, ...]) -> Nested:
    if len(shape) == 1:
        return tuple(flat)
    step = len(flat) // shape[0]
    return tuple(_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0]))


def _span(mode: Layout) -> int:
    return max((s * d for s, d in zip(flatten(mode.shape), flatten(mode.stride)) if s > 1),
               default=1)


@attrs.frozen(cache_hash=True, repr=False)
class MeshView:
    """An immutable mesh: named dims over a universe of ranks, as a layout.

    A view is a *family* of submeshes (its instances): with ``V = layout`` and
    ``C = complement(V, N)``, instance ``j`` is the rank tensor
    ``x -> ranks(C(j) + V(x))``.  Every rank of the universe lies in exactly one
    instance, and which one a process is in is a function of its rank, passed as
    an argument.  Nothing here creates a process group.

    >>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    >>> mesh
    MeshView(dp=2, cp=2, tp=2)
    >>> mesh.coordinate(5), mesh.group(5, "tp"), mesh.group(5, "dp")
    ((1, 0, 1), (4, 5), (1, 5))
    >>> mesh["tp"].instances()
    ((0, 1), (2, 3), (4, 5), (6, 7))
    """

    layout: Layout
    names: tuple[str, ...] = attrs.field(converter=_names_conv)
    ranks: RankMap

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.layout, Layout):
            raise MeshTypeError(f"layout must be a layout.Layout, got {self.layout!r}")
        if not isinstance(self.ranks, RankMap):
            raise MeshTypeError(f"ranks must be a RankMap, got {self.ranks!r}")
        modes = [coalesce(m) for m in self.layout]
        if len(modes) != len(self.names):
            raise InvalidNameError(
                f"the layout {self.layout} has {len(modes)} dims but {len(self.names)} names "
                f"were given: {self.names!r}"
            )
        object.__setattr__(self, "layout", make_layout(*modes))
        n = self.ranks.size
        for name, m in zip(self.names, modes):
            if any(s > 1 and d == 0 for s, d in zip(flatten(m.shape), flatten(m.stride))):
                raise OverlapError(f"dim {name!r} has the stride-0 layout {m}: it would repeat "
                                   "ranks")
        if not is_tractable(self.layout):
            raise OverlapError(
                f"the dims {self._dims_text()} overlap or interleave (layout {self.layout}), so "
                f"their instances cannot tile the {n} ranks of the universe"
            )
        span = _span(self.layout)
        if n % span:
            raise OverlapError(
                f"the dims {self._dims_text()} (layout {self.layout}) span {span} offsets, which "
                f"does not divide the universe of {n} ranks"
            )

    def _dims_text(self) -> str:
        return ", ".join(f"{n}={m.size}" for n, m in zip(self.names, self.layout))

    # ---- constructors ------------------------------------------------------------------
    @classmethod
    def from_shape(cls, shape: int | Sequence[int], names: Sequence[str] | None = None
                   ) -> MeshView:
        """A row-major view of ``prod(shape)`` ranks (identity rank map).

        >>> MeshView.from_shape((2, 4)).group(5, "dim1")
        (4, 5, 6, 7)
        """
        sizes = (shape,) if not isinstance(shape, Sequence) else tuple(shape)
        if not sizes:
            raise InvalidSizeError("a mesh needs at least one dim, got the shape ()")
        sizes = tuple(as_size(s, f"size of dim {i} in shape {shape!r}")
                      for i, s in enumerate(sizes))
        names_t = tuple(f"dim{i}" for i in range(len(sizes))) if names is None else names
        return cls(Layout(sizes), names_t, RankMap.identity(math.prod(sizes)))

    @classmethod
    def from_ranks(cls, ranks: Any, names: Sequence[str] | None = None) -> MeshView:
        """A view over an explicit rank tensor (nested lists/tuples, NumPy array or torch tensor).

        >>> MeshView.from_ranks([[0, 2], [1, 3]], ("dp", "tp")).group(1, "tp")
        (1, 3)
        """
        if hasattr(ranks, "tolist"):  # NumPy arrays, torch tensors: no import needed
            ranks = ranks.tolist()
        shape, flat = _parse_tensor(ranks)
        names_t = tuple(f"dim{i}" for i in range(len(shape))) if names is None else names
        return cls(Layout(shape), names_t, RankMap.explicit(flat))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeshView:
        """Inverse of :meth:`to_dict`."""
        need = "a MeshView dict needs 'layout' (with 'shape' and 'stride'), 'names' and 'ranks'"
        if not isinstance(d, Mapping) or not isinstance(d.get("layout"), Mapping):
            raise InvalidMeshDataError(f"{need}; got {d!r}")
        try:
            shape, stride = d["layout"]["shape"], d["layout"]["stride"]
            names, ranks = d["names"], d["ranks"]
        except KeyError as e:
            raise InvalidMeshDataError(f"{need}; missing {e}") from None
        return cls(Layout(_tuplify(shape), _tuplify(stride)), names, RankMap.from_dict(ranks))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: layout, names and rank map.

        >>> MeshView.from_shape((2, 2), ("dp", "tp")).to_dict()
        {'layout': {'shape': [2, 2], 'stride': [2, 1]}, 'names': ['dp', 'tp'], 'ranks': {'size': 4}}
        """
        return {"layout": {"shape": _listify(self.layout.shape),
                           "stride": _listify(self.layout.stride)},
                "names": list(self.names), "ranks": self.ranks.to_dict()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (MeshView.from_dict, (self.to_dict(),))

    # ---- shape queries -----------------------------------------------------------------
    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return tuple(m.size for m in self.layout)

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.names)

    def size(self, dim: Dim | None = None) -> int:
        """The size of ``dim``, or of a whole instance when ``dim`` is None."""
        if dim is None:
            return self.layout.size
        return self.shape[self._dim(dim)]

    @property
    def num_instances(self) -> int:
        """How many instances the view stands for: ``N / size()``."""
        return self._complement.size

    def dim_layout(self, dim: Dim) -> Layout:
        """The canonical (coalesced) layout of one dim: it alone determines its groups."""
        return self.layout[self._dim(dim)]

    def index(self, dim: Dim) -> int:
        """The position of ``dim`` (a name, or an index that may be negative)."""
        return self._dim(dim)

    def _dim(self, dim: Dim) -> int:
        if isinstance(dim, str):
            try:
                return self.names.index(dim)
            except ValueError:
                raise UnknownDimError(f"unknown dim {dim!r}; the dims are {self.names!r}") from None
        if isinstance(dim, int) and not isinstance(dim, bool):
            if -self.ndim <= dim < self.ndim:
                return dim % self.ndim
            raise UnknownDimError(f"dim index {dim} is out of range for the {self.ndim} dims "
                                  f"{self.names!r}")
        raise MeshTypeError(f"a dim is a name (str) or an index (int), got {dim!r}")

    def _dims(self, dims: Iterable[Dim]) -> tuple[int, ...]:
        idx = tuple(self._dim(d) for d in dims)
        if len(set(idx)) != len(idx):
            dup = next(self.names[i] for i in idx if idx.count(i) > 1)
            raise DuplicateNameError(f"dim {dup!r} is selected twice in {tuple(dims)!r}")
        return idx

    # ---- transforms --------------------------------------------------------------------
    def _with(self, modes: Iterable[Layout], names: Iterable[str]) -> MeshView:
        return MeshView(make_layout(*modes), tuple(names), self.ranks)

    def __getitem__(self, key: Dim | tuple[Dim, ...]) -> MeshView:
        """Select dims by name or index, in any order (a reordered selection transposes)."""
        keys = key if isinstance(key, tuple) else (key,)
        if not keys:
            raise UnknownDimError(f"select at least one dim of {self.names!r}")
        idx = self._dims(keys)
        return self._with((self.layout[i] for i in idx), (self.names[i] for i in idx))

    def transpose(self, *dims: Dim) -> MeshView:
        """Reorder all dims (reverse them when none are given)."""
        if not dims:
            return self[tuple(reversed(range(self.ndim)))]
        idx = self._dims(dims)
        if len(idx) != self.ndim:
            missing = [n for i, n in enumerate(self.names) if i not in idx]
            raise UnknownDimError(f"transpose needs every dim of {self.names!r}; missing "
                                  f"{missing!r}")
        return self[idx]

    def rename(self, mapping: Mapping[Dim, str]) -> MeshView:
        """Rename dims: ``mapping`` maps old names (or indices) to new names."""
        names = list(self.names)
        renamed: set[int] = set()
        for old, new in mapping.items():
            k = self._dim(old)
            if k in renamed:
                raise DuplicateNameError(f"dim {self.names[k]!r} is renamed twice in {mapping!r}")
            renamed.add(k)
            names[k] = new
        return MeshView(self.layout, tuple(names), self.ranks)

    def flatten(self, dims: Dim | Sequence[Dim] | None = None, name: str | None = None
                ) -> MeshView:
        """Merge ``dims`` (default: all) into one dim, placed where the first listed dim was.

        The listed order is the order of the merged dim (first listed = outer).
        Dims need not be adjacent; the default name joins the names with ``_``.

        >>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
        >>> mesh.flatten(("dp", "tp")).group(0, "dp_tp")
        (0, 1, 4, 5)
        """
        if dims is None:
            idx = tuple(range(self.ndim))
        else:
            idx = self._dims((dims,) if isinstance(dims, (str, int)) else dims)
        if not idx:
            raise UnknownDimError(f"flatten needs at least one dim of {self.names!r}")
        new_name = "_".join(self.names[i] for i in idx) if name is None else name
        merged = coalesce(make_layout(*(self.layout[i] for i in idx)))
        modes: list[Layout] = []
        names: list[str] = []
        for i in range(self.ndim):
            if i == idx[0]:
                modes.append(merged)
                names.append(new_name)
            elif i not in idx:
                modes.append(self.layout[i])
                names.append(self.names[i])
        return self._with(modes, names)

    def unflatten(self, dim: Dim, sizes: Sequence[int], names: Sequence[str]) -> MeshView:
        """Split ``dim`` into dims of ``sizes`` (row-major), named ``names``.

        >>> world = MeshView.from_shape(8, ("world",))
        >>> world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp")).group(5, "ep")
        (5, 7)
        """
        k = self._dim(dim)
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise MeshTypeError(f"sizes must be a sequence of positive ints, got {sizes!r}")
        sz = tuple(as_size(s, f"unflatten size {s!r} in {tuple(sizes)!r}") for s in sizes)
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise MeshTypeError(f"names must be a sequence of strings, got {names!r}")
        if len(names) != len(sz) or not sz:
            raise InvalidSizeError(f"unflatten needs one name per size and at least one size; "
                                   f"got sizes {sz!r} and names {tuple(names)!r}")
        if math.prod(sz) != self.shape[k]:
            raise InvalidSizeError(
                f"cannot unflatten dim {self.names[k]!r} of size {self.shape[k]} into sizes "
                f"{sz!r}: their product is {math.prod(sz)}, not {self.shape[k]}"
            )
        try:
            split = composition(self.layout[k], Layout(sz))
        except CompositionError as e:
            raise NotRepresentableError(
                f"dim {self.names[k]!r} has the non-contiguous layout {self.layout[k]}; no layout "
                f"splits it into sizes {sz!r} (the pieces would cut across its parts): {e}"
            ) from None
        modes = [*self.layout[:k], *split, *self.layout[k + 1:]]
        return self._with(modes, (*self.names[:k], *names, *self.names[k + 1:]))

    # ---- per-rank queries: O(ndim + group size), never a search ------------------------
    @functools.cached_property
    def _complement(self) -> Layout:
        return complement(self.layout, self.ranks.size)

    @functools.cached_property
    def _inverse(self) -> Layout:
        return left_inverse(make_layout(self._complement, self.layout))

    def _offset(self, rank: int) -> int | None:
        return self.ranks.offset_of(as_int(rank, "a rank"))

    def _locate(self, rank: int) -> tuple[int, int, int]:
        """(offset, instance index, index within the instance) of a rank in the universe."""
        off = self._offset(rank)
        if off is None:
            raise RankNotInMeshError(
                f"rank {rank} is not in the universe of this view ({self.ranks!r})"
            )
        j, x = divmod(self._inverse(off), self.layout.size)
        return off, j, x

    def _coords(self, x: int) -> tuple[int, ...]:
        out = []
        for s in reversed(self.shape):
            x, c = divmod(x, s)
            out.append(c)
        return tuple(reversed(out))

    def coordinate(self, rank: int) -> tuple[int, ...] | None:
        """The coordinate of ``rank`` in its instance, or None if it is not in the universe."""
        off = self._offset(rank)
        if off is None:
            return None
        return self._coords(self._inverse(off) % self.layout.size)

    def local_rank(self, rank: int, dim: Dim) -> int:
        """The index of ``rank`` in its group along ``dim``."""
        k = self._dim(dim)
        return self._coords(self._locate(rank)[2])[k]

    def group_offset(self, rank: int, dim: Dim) -> int:
        """The offset of the first member of ``rank``'s group along ``dim``.

        The group is ``ranks(group_offset + dim_layout(dim)(i))`` for ``i < size(dim)``.
        """
        k = self._dim(dim)
        off, _, x = self._locate(rank)
        return off - self.layout[k](self._coords(x)[k])

    def group(self, rank: int, dim: Dim) -> tuple[int, ...]:
        """The global ranks of ``rank``'s group along ``dim``, in coordinate order."""
        k = self._dim(dim)
        return self.ranks.take(_image(self.layout[k], self.group_offset(rank, k)))

    def groups(self, dim: Dim) -> tuple[tuple[int, ...], ...]:
        """Every group along ``dim`` (materializes all N ranks), ordered by first offset."""
        mode = self.layout[self._dim(dim)]
        starts = complement(mode, self.ranks.size)
        return tuple(self.ranks.take(_image(mode, b)) for b in _image(starts, 0))

    def instance(self, rank: int) -> Nested:
        """The rank tensor of ``rank``'s instance (what torch's ``DeviceMesh.mesh`` is there)."""
        _, j, _ = self._locate(rank)
        return self._instance(j)

    def _instance(self, j: int) -> Nested:
        return _nest(self.ranks.take(_image(self.layout, self._complement(j))), self.shape)

    def instances(self) -> tuple[Nested, ...]:
        """Every instance's rank tensor (materializes all N ranks)."""
        return tuple(self._instance(j) for j in range(self._complement.size))

    # ---- presentation ------------------------------------------------------------------
    def __repr__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self.names, self.shape))
        natural = make_layout(*(coalesce(m) for m in Layout(self.shape)))
        if self.ranks.is_identity and self.ranks.size == self.layout.size and (
                self.layout == natural):
            return f"MeshView({dims})"
        return f"MeshView({dims}; layout={self.layout}, ranks={self.ranks!r})"

    def render(self, rank: int | None = None) -> str:
        """A text picture of a 1-, 2- or 3-D view; see :func:`mesh.render`."""
        from ._render import render

        return render(self, rank)


def _parse_tensor(obj: Any) -> tuple[tuple[int, ...], list[object]]:
    if not isinstance(obj, (list, tuple)):
        raise InvalidRanksError(f"a rank tensor must be nested lists or tuples (or an array), "
                                f"got {obj!r}")
    if not obj:
        raise InvalidRanksError("a rank tensor needs at least one rank, got an empty list")
    if all(not isinstance(x, (list, tuple)) for x in obj):
        return (len(obj),), list(obj)
    if not all(isinstance(x, (list, tuple)) for x in obj):
        raise InvalidRanksError(f"ragged rank tensor: {obj!r} mixes lists and scalars")
    parts = [_parse_tensor(x) for x in obj]
    inner = parts[0][0]
    for p, x in zip(parts, obj):
        if p[0] != inner:
            raise InvalidRanksError(f"ragged rank tensor: rows of shapes {inner} and {p[0]} "
                                    f"({x!r})")
    return (len(obj), *inner), [r for p in parts for r in p[1]]


def _tuplify(x: Any) -> Any:
    return tuple(_tuplify(v) for v in x) if isinstance(x, (list, tuple)) else x


def _listify(x: Any) -> Any:
    return [_listify(v) for v in x] if isinstance(x, tuple) else x
