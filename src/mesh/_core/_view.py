"""The :class:`MeshView` value: named dims over a rank map, computed from layouts."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

import attrs

from layout import (
    MAX_DEPTH,
    CompositionError,
    Layout,
    LayoutError,
    coalesce,
    complement,
    composition,
    left_inverse,
    make_layout,
)

from ._dims import canonical_dims
from ._errors import (
    DuplicateNameError,
    InvalidDimsError,
    InvalidMeshDataError,
    InvalidRanksError,
    InvalidSizeError,
    MeshTypeError,
    NotRepresentableError,
    RankNotInMeshError,
    UnknownDimError,
)
from ._family import Family, family_of
from ._input import UNORDERED, as_int, as_name, as_names, as_size, ordered, show
from ._listing import MAX_LISTED_RANKS, check_limit, rank_rows, rank_table
from ._numpy import need_numpy
from ._rankmap import RankMap

if TYPE_CHECKING:
    from typing_extensions import deprecated

__all__ = ["FORMAT_VERSION", "Dim", "MeshView", "Nested"]

Dim = Union[str, int]
"""A dim, by name or by index (negative indices count from the end)."""

Nested = Union[int, tuple["Nested", ...]]
"""A rank tensor as nested tuples."""

FORMAT_VERSION = 1
"""The version :meth:`MeshView.to_dict` writes and :meth:`MeshView.from_dict` reads."""

_KEYS = {"version", "layout", "names", "ranks"}


@attrs.frozen(init=False, hash=False, repr=False)
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

    For the package's wings (the drawing evaluates one instance cell by cell):
    :meth:`instance_offset`, the first offset of a rank's instance, beside
    :meth:`group_offset`, the first offset of its group.
    """

    layout: Layout
    names: tuple[str, ...]
    ranks: RankMap

    def __init__(self, layout: Layout, names: object, ranks: RankMap) -> None:
        """Check and canonicalize: every mode coalesced, names unique, dims that tile."""
        self.__attrs_init__(*canonical_dims(layout, names, ranks))

    # ---- constructors ------------------------------------------------------------------
    @classmethod
    def from_shape(cls, shape: object, names: object = None) -> MeshView:
        """A row-major view of ``prod(shape)`` ranks (identity rank map).

        ``shape`` is a size or an ordered sequence of sizes; ``names`` an ordered
        sequence of names (default ``dim0``, ``dim1``, ...).

        >>> MeshView.from_shape((2, 4)).group(5, "dim1")
        (4, 5, 6, 7)
        """
        raw = ordered(shape, "shape") if not _is_int_like(shape) else (shape,)
        if not raw:
            raise InvalidSizeError("a mesh needs at least one dim, got the shape ()")
        sizes = tuple([as_size(s, f"size of dim {i} in shape {show(shape)}")
                       for i, s in enumerate(raw)])
        names_t = tuple(f"dim{i}" for i in range(len(sizes))) if names is None else names
        return cls(Layout(sizes), names_t, RankMap(math.prod(sizes)))

    @classmethod
    def from_ranks(cls, ranks: object, names: object = None) -> MeshView:
        """A view over an explicit rank tensor (nested lists/tuples, NumPy array or torch tensor).

        >>> MeshView.from_ranks([[0, 2], [1, 3]], ("dp", "tp")).group(1, "tp")
        (1, 3)
        """
        if isinstance(ranks, UNORDERED):
            raise MeshTypeError(f"a rank tensor must be nested lists or tuples (or an array), "
                                f"got {show(ranks)}: its order is the mesh's order")
        if hasattr(ranks, "tolist") and not isinstance(ranks, (list, tuple, type)):
            ranks = ranks.tolist()  # NumPy arrays, torch tensors: no import needed
        shape, flat = _parse_tensor(ranks, 0)
        names_t = tuple(f"dim{i}" for i in range(len(shape))) if names is None else names
        return cls(Layout(shape), names_t, RankMap.explicit(flat))

    @classmethod
    def from_dict(cls, d: object) -> MeshView:
        """Inverse of :meth:`to_dict`; strict: any other data is a typed error.

        Refused with :class:`~mesh.InvalidMeshDataError`: a non-dict, a missing,
        unknown or wrongly typed key, a version other than :data:`FORMAT_VERSION`,
        nesting deeper than ``layout.MAX_DEPTH``; inconsistent fields raise the
        error of the value they break (e.g. :class:`~mesh.OverlapError`).
        """
        if type(d) is not dict or set(d) != _KEYS:
            got = show(sorted(map(show, d))) if type(d) is dict else show(d)
            raise InvalidMeshDataError(f"a MeshView dict has exactly the keys {sorted(_KEYS)}; "
                                       f"got {got}")
        version = d["version"]
        if type(version) is not int or version != FORMAT_VERSION:
            raise InvalidMeshDataError(f"unknown MeshView format version {show(version)}; this "
                                       f"library reads version {FORMAT_VERSION}")
        lay = d["layout"]
        if type(lay) is not dict or set(lay) != {"shape", "stride"}:
            raise InvalidMeshDataError(f"'layout' must be {{'shape': ..., 'stride': ...}}, got "
                                       f"{show(lay)}")
        names = d["names"]
        if type(names) is not list:
            raise InvalidMeshDataError(f"'names' must be a list of strings, got {show(names)}")
        shape, stride = _int_tree(lay["shape"], "shape", 0), _int_tree(lay["stride"], "stride", 0)
        try:
            layout = Layout(shape, stride)
        except LayoutError as e:
            raise InvalidMeshDataError(f"'layout' is not a valid layout: {e}") from None
        return cls(layout, names, RankMap.from_dict(d["ranks"]))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: format version, layout, names and rank map.

        >>> MeshView.from_shape((2, 2), ("dp", "tp")).to_dict()
        {'version': 1, 'layout': {'shape': [2, 2], 'stride': [2, 1]}, 'names': ['dp', 'tp'], \
'ranks': {'size': 4}}
        """
        return {"version": FORMAT_VERSION,
                "layout": {"shape": _listify(self.layout.shape),
                           "stride": _listify(self.layout.stride)},
                "names": list(self.names), "ranks": self.ranks.to_dict()}

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:  # computed once: views and rank maps key caches
        return hash((self.layout, self.names, self.ranks))

    def __reduce__(self) -> tuple[Any, ...]:
        return (MeshView.from_dict, (self.to_dict(),))

    # ---- shape queries -----------------------------------------------------------------
    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        """The size of each dim."""
        return tuple([m.size for m in self.layout])

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.names)

    def size(self, dim: Dim | None = None) -> int:
        """The size of ``dim``, or of a whole instance when ``dim`` is None."""
        if dim is None:
            return self.layout.size
        return self.shape[self.index(dim)]

    @property
    def num_instances(self) -> int:
        """How many instances the view stands for: ``N / size()``."""
        return self._complement.size

    def dim_layout(self, dim: Dim) -> Layout:
        """The canonical (coalesced) layout of one dim: it alone determines its groups."""
        return self.layout[self.index(dim)]

    def family(self, dim: Dim) -> Family:
        """The canonical value of this dim's groups: equal, across views, exactly when
        the groups are the same ordered rank tuples (see :class:`mesh.Family`)."""
        k = self.index(dim)
        found = self._families.get(k)
        if found is None:  # computed once per dim (a listing, for an explicit universe)
            found = self._families[k] = family_of(self.ranks, self.layout[k])
        return found

    @functools.cached_property
    def _families(self) -> dict[int, Family]:
        return {}

    def index(self, dim: Dim) -> int:
        """The position of ``dim``: a name, or an index that may be negative."""
        if isinstance(dim, str):
            try:
                return self.names.index(dim)
            except ValueError:
                raise UnknownDimError(f"unknown dim {dim!r}; the dims are {self.names!r}"
                                      ) from None
        k = as_int(dim, "a dim", "a name (str) or an index (int)")
        if -self.ndim <= k < self.ndim:
            return k % self.ndim
        raise UnknownDimError(f"dim index {show(k)} is out of range for the {self.ndim} dims "
                              f"{self.names!r}")

    def _indices(self, dims: object, what: str) -> tuple[int, ...]:
        """Positions of an ordered, non-empty selection of distinct dims."""
        idx = tuple([self.index(d) for d in ordered(dims, what)])
        if not idx:
            raise InvalidDimsError(f"{what} must name at least one dim of {self.names!r}")
        if len(set(idx)) != len(idx):
            dup = next(self.names[i] for i in idx if idx.count(i) > 1)
            raise DuplicateNameError(f"dim {dup!r} is selected twice in {what} {show(dims)}")
        return idx

    # ---- transforms --------------------------------------------------------------------
    def _with(self, modes: list[Layout], names: list[str]) -> MeshView:
        return MeshView(make_layout(*modes), names, self.ranks)

    def __getitem__(self, key: Dim | tuple[Dim, ...] | list[Dim]) -> MeshView:
        """Select dims by name or index, in any order (a reordered selection transposes).

        ``key`` is one dim or a tuple or list of dims.
        """
        many = isinstance(key, (tuple, list, set, frozenset, dict))  # the unordered: refused
        idx = self._indices(key if many else (key,), "the selection")
        return self._with([self.layout[i] for i in idx], [self.names[i] for i in idx])

    def transpose(self, *dims: Dim) -> MeshView:
        """Reorder all dims (reverse them when none are given)."""
        if not dims:
            return self[tuple(reversed(range(self.ndim)))]
        idx = self._indices(dims, "transpose")
        if len(idx) != self.ndim:
            missing = [n for i, n in enumerate(self.names) if i not in idx]
            raise InvalidDimsError(f"transpose needs every dim of {self.names!r}; missing "
                                   f"{missing!r}")
        return self[idx]

    def rename(self, mapping: Mapping[Dim, str]) -> MeshView:
        """Rename dims: ``mapping`` maps old names (or indices) to new names."""
        if not isinstance(mapping, Mapping):
            raise MeshTypeError(f"rename takes a mapping from dims to new names, got "
                                f"{show(mapping)}")
        names = list(self.names)
        renamed: set[int] = set()
        try:
            items = list(mapping.items())
        except Exception:  # a hostile mapping
            raise MeshTypeError(f"rename could not read the mapping {show(mapping)}") from None
        for old, new in items:
            k = self.index(old)
            if k in renamed:
                raise DuplicateNameError(f"dim {self.names[k]!r} is renamed twice in "
                                         f"{show(mapping)}")
            renamed.add(k)
            names[k] = as_name(new, "a new dim name")
        return MeshView(self.layout, names, self.ranks)

    def flatten(self, dims: Dim | tuple[Dim, ...] | list[Dim] | None = None,
                name: str | None = None) -> MeshView:
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
            one = isinstance(dims, str) or _is_int_like(dims)
            idx = self._indices((dims,) if one else dims, "flatten")
        new_name = "_".join(self.names[i] for i in idx) if name is None \
            else as_name(name, "the flattened dim's name")
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

    def unflatten(self, dim: Dim, sizes: object, names: object) -> MeshView:
        """Split ``dim`` into dims of ``sizes`` (row-major), named ``names``.

        >>> world = MeshView.from_shape(8, ("world",))
        >>> world.unflatten("world", (2, 2, 2), ("dp", "ep", "ep_tp")).group(5, "ep")
        (5, 7)
        """
        k = self.index(dim)
        sz = tuple([as_size(s, f"unflatten size {show(s)} in {show(sizes)}")
                    for s in ordered(sizes, "unflatten sizes")])
        new = as_names(names, "unflatten names")
        if not sz:
            raise InvalidDimsError("unflatten needs at least one size, got ()")
        if len(new) != len(sz):
            raise InvalidDimsError(f"unflatten needs one name per size; got sizes {show(sz)} and "
                                   f"names {new!r}")
        if math.prod(sz) != self.shape[k]:
            raise InvalidSizeError(
                f"cannot unflatten dim {self.names[k]!r} of size {self.shape[k]} into sizes "
                f"{show(sz)}: their product is {show(math.prod(sz))}, not {self.shape[k]}")
        try:
            split = composition(self.layout[k], Layout(sz))
        except CompositionError as e:
            raise NotRepresentableError(
                f"dim {self.names[k]!r} has the non-contiguous layout {self.layout[k]}; no layout "
                f"splits it into sizes {show(sz)} (the pieces would cut across its parts): {e}"
            ) from None
        modes = [*self.layout[:k], *split, *self.layout[k + 1:]]
        return self._with(modes, [*self.names[:k], *new, *self.names[k + 1:]])

    # ---- per-rank queries: O(ndim + group size), never a search ------------------------
    @functools.cached_property
    def _complement(self) -> Layout:
        return complement(self.layout, self.ranks.size)

    @functools.cached_property
    def _inverse(self) -> Layout:
        """Offset -> (instance, index) in one evaluation.

        ``(C, V)`` with ``C = complement(V, N)`` is a bijection from ``[0, N)`` onto
        the offsets ``[0, N)``: index ``j * size(V) + x`` goes to ``C(j) + V(x)``.
        Its left inverse sends an offset back to that index, and
        ``divmod(index, size(V))`` is ``(instance j, index x within it)``.  For
        ``mesh["dp", "tp"]`` of a ``(dp, cp, tp) = (2, 2, 2)`` mesh: ``V = (2,2):(4,1)``,
        ``C = 2:2`` (the cp step), and offset 5 ``= C(0) + V(1, 1)`` has index 3, so
        rank 5 is at ``x = 3``, coordinate ``(1, 1)``, of instance 0:

        >>> view = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))["dp", "tp"]
        >>> print(view._complement, view._inverse), divmod(view._inverse(5), 4)
        2:2 (2,2,2):(2,4,1)
        (None, (0, 3))
        """
        return left_inverse(make_layout(self._complement, self.layout))

    def _locate(self, rank: int) -> tuple[int, int, int]:
        """(offset, instance index, index within the instance) of a rank in the universe."""
        off = self.ranks.offset_of(rank)
        if off is None:
            raise RankNotInMeshError(
                f"rank {show(rank)} is not in the universe of this view ({self.ranks!r})")
        j, x = divmod(self._inverse(off), self.layout.size)
        return off, j, x

    def coordinate(self, rank: int) -> tuple[int, ...] | None:
        """The coordinate of ``rank`` in its instance, or None if it is not in the universe."""
        off = self.ranks.offset_of(rank)
        if off is None:
            return None
        return self._coords(self._inverse(off) % self.layout.size)

    def _coords(self, x: int) -> tuple[int, ...]:
        """The row-major coordinate of index ``x`` of an instance (the last dim fastest)."""
        out = []
        for size in reversed(self.shape):
            x, c = divmod(x, size)
            out.append(c)
        return tuple(reversed(out))

    def local_rank(self, rank: int, dim: Dim) -> int:
        """The index of ``rank`` in its group along ``dim``."""
        k = self.index(dim)
        return self._coords(self._locate(rank)[2])[k]

    def group_offset(self, rank: int, dim: Dim) -> int:
        """The offset of the first member of ``rank``'s group along ``dim``.

        The group is ``ranks(group_offset + dim_layout(dim)(i))`` for ``i < size(dim)``.
        """
        k = self.index(dim)
        off, _, x = self._locate(rank)
        return off - self.layout[k](self._coords(x)[k])

    def instance_offset(self, rank: int) -> int:
        """The offset of the first member of ``rank``'s instance.

        The instance is ``ranks(instance_offset + layout(x))`` for every index ``x``.
        """
        _, j, _ = self._locate(rank)
        return self._complement(j)

    def group(self, rank: int, dim: Dim, *, limit: int = MAX_LISTED_RANKS) -> tuple[int, ...]:
        """The global ranks of ``rank``'s group along ``dim``, in coordinate order."""
        k = self.index(dim)
        check_limit(self.shape[k], f"the group along {self.names[k]!r}", limit)
        return self._rows(Layout(1, 0), self.layout[k], self.group_offset(rank, k))[0]

    def groups(self, dim: Dim, *, limit: int = MAX_LISTED_RANKS
               ) -> tuple[tuple[int, ...], ...]:
        """Every group along ``dim`` (lists all N ranks), ordered by first offset."""
        k = self.index(dim)
        check_limit(self.ranks.size, f"groups({self.names[k]!r})", limit)
        mode = self.layout[k]
        return self._rows(complement(mode, self.ranks.size), mode)

    def _rows(self, starts: Layout, inner: Layout, base: int = 0) -> tuple[tuple[int, ...], ...]:
        return tuple(rank_rows(self.ranks, starts, inner, base))

    def instance(self, rank: int, *, limit: int = MAX_LISTED_RANKS) -> Nested:
        """The rank tensor of ``rank``'s instance (what torch's ``DeviceMesh.mesh`` is there)."""
        start = self.instance_offset(rank)
        check_limit(self.size(), "instance()", limit)
        return _nest(self._rows(Layout(1, 0), self.layout, start)[0], self.shape)

    def instance_array(self, rank: int, *, limit: int = MAX_LISTED_RANKS,
                       dtype: str = "int64") -> Any:
        """:meth:`instance` as a NumPy array of shape :attr:`shape` (needs NumPy).

        Computed by array arithmetic over the layout: strided offsets, then one
        gather through the rank map.  ``dtype`` is ``"int64"`` or ``"int32"``
        (torch's ``DeviceMesh.mesh`` type; int64 if a rank does not fit).
        """
        if not isinstance(dtype, str) or dtype not in ("int64", "int32"):
            raise MeshTypeError(f"dtype must be 'int64' or 'int32', got {show(dtype)}")
        need_numpy("MeshView.instance_array")
        start = self.instance_offset(rank)
        check_limit(self.size(), "instance_array()", limit)
        rows = rank_table(self.ranks, Layout(1, 0), self.layout, start, dtype)
        return rows.reshape(self.shape)

    def instances(self, *, limit: int = MAX_LISTED_RANKS) -> tuple[Nested, ...]:
        """Every instance's rank tensor (lists all N ranks)."""
        check_limit(self.ranks.size, "instances()", limit)
        return tuple([_nest(row, self.shape)
                      for row in self._rows(self._complement, self.layout)])

    # ---- presentation ------------------------------------------------------------------
    if TYPE_CHECKING:  # the package (mesh/__init__.py) puts this deprecated alias on the class
        @deprecated("MeshView.render(rank) is deprecated; use mesh.render(view, rank)")
        def render(self, rank: int | None = None, *, width: int = 120) -> str: ...

    def __repr__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self.names, self.shape))
        natural = make_layout(*(coalesce(m) for m in Layout(self.shape)))
        if self.ranks.is_identity and self.ranks.size == self.layout.size and (
                self.layout == natural):
            return f"MeshView({dims})"
        return f"MeshView({dims}; layout={self.layout}, ranks={self.ranks!r})"


def _is_int_like(x: object) -> bool:
    """An int, or a scalar with ``__index__`` (NumPy/torch integer scalars and 0-d arrays)."""
    return isinstance(x, int) or (hasattr(type(x), "__index__") and getattr(x, "ndim", 0) == 0)


def _nest(flat: tuple[int, ...], shape: tuple[int, ...]) -> Nested:
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0]
    return tuple([_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])])


def _parse_tensor(obj: object, depth: int) -> tuple[tuple[int, ...], list[object]]:
    """(shape, flat ranks) of a nested list/tuple rank tensor; ragged or deep is refused."""
    if not isinstance(obj, (list, tuple)):
        raise InvalidRanksError(f"a rank tensor must be nested lists or tuples (or an array), "
                                f"got {show(obj)}")
    items = ordered(obj, "a rank tensor")  # hostile sequences, and the length, checked there
    if not items:
        raise InvalidRanksError("a rank tensor needs at least one rank, got an empty list")
    if depth >= MAX_DEPTH:
        raise InvalidRanksError(f"a rank tensor may have at most {MAX_DEPTH} dims")
    if all([not isinstance(x, (list, tuple)) for x in items]):
        return (len(items),), list(items)
    if not all([isinstance(x, (list, tuple)) for x in items]):
        raise InvalidRanksError(f"ragged rank tensor: {show(obj)} mixes lists and scalars")
    parts = [_parse_tensor(x, depth + 1) for x in items]
    inner = parts[0][0]
    for p, x in zip(parts, items):
        if p[0] != inner:
            raise InvalidRanksError(f"ragged rank tensor: rows of shapes {inner} and {p[0]} "
                                    f"({show(x)})")
    return (len(items), *inner), [r for p in parts for r in p[1]]


def _int_tree(x: object, what: str, depth: int) -> Any:
    """A JSON int tree (ints and lists, nested at most ``MAX_DEPTH``) as ints and tuples."""
    if type(x) is int:
        return x
    if type(x) is not list or depth >= MAX_DEPTH:
        raise InvalidMeshDataError(f"'{what}' must be an int or a list of them nested at most "
                                   f"{MAX_DEPTH} deep, got {show(x)}")
    return tuple([_int_tree(v, what, depth + 1) for v in x])


def _listify(x: Any) -> Any:
    return [_listify(v) for v in x] if isinstance(x, tuple) else x
