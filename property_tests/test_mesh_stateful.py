"""Stateful differential test: ``MeshView`` transforms against a brute-force model.

The model of a view is what ARCHITECTURE.md §2 says a view *is*: a family of
instances, each an explicit rank tensor of the view's shape, every rank of the
universe in exactly one of them.  The model never looks at a layout: it
permutes, reshapes and splits explicit tensors (flat row-major tuples of ranks).

Law (checked after every step of a random sequence of transforms)::

    for every rank r of the universe and every dim k:
        view.coordinate(r)   == coordinate of r in the model instance holding r
        view.local_rank(r,k) == that coordinate's k-th entry
        view.group(r, k)     == the model instance holding r, read along dim k
                                with the other coordinates fixed
        view.instance(r)     == the model instance holding r, as nested tuples
    view.groups(k)  == every such line of every model instance (as a set, no repeats)
    view.instances() == the model's instances (as a set, no repeats)
    shape, names, ndim and size(k) agree with the model;
    a rank outside the universe has coordinate None and no group;
    two views with the same names are equal (with equal hashes) exactly when
    their models hold the same shape and the same set of instances.

``unflatten`` may raise :class:`mesh.NotRepresentableError`; the model then
checks that the split is genuinely not expressible as layouts (see
:func:`_split_is_expressible`) before the step is skipped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import brute
import hypothesis.strategies as st
import pytest
from hypothesis import note, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mesh import (
    DuplicateNameError,
    MeshView,
    NotRepresentableError,
    RankNotInMeshError,
    concatenate,
)

MAX_RANKS = 64
MAX_DIMS = 6  # unflatten grows the view; keep it small enough to check every rank each step

Flat = tuple[int, ...]  # a rank tensor, row-major


# ---- the brute-force model -----------------------------------------------------------------
def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(brute.suffix(tuple(shape)))


def _index(shape: Sequence[int], coord: Sequence[int]) -> int:
    return brute.dot(tuple(coord), _row_major_strides(shape))


def _gather(flat: Flat, shape: tuple[int, ...], fixed: dict[int, int],
            free: Sequence[int]) -> Flat:
    """The sub-tensor of ``flat`` with dims ``fixed`` pinned, read along ``free`` in that order."""
    out = []
    for x in brute.coords([shape[i] for i in free]):
        full = dict(fixed)
        full.update(zip(free, x))
        out.append(flat[_index(shape, [full[i] for i in range(len(shape))])])
    return tuple(out)


def _nest(flat: Flat, shape: Sequence[int]) -> Any:
    if len(shape) == 1:
        return tuple(flat)
    step = len(flat) // shape[0]
    return tuple(_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0]))


class Model:
    """A family of explicit rank tensors of one shape, with dim names."""

    def __init__(self, shape: Sequence[int], names: Sequence[str], instances: Sequence[Flat]):
        self.shape = tuple(shape)
        self.names = tuple(names)
        self.instances = tuple(instances)
        assert all(len(t) == math.prod(self.shape) for t in self.instances)
        self.where: dict[int, tuple[int, tuple[int, ...]]] = {}
        for j, t in enumerate(self.instances):
            for r, c in zip(t, brute.coords(self.shape)):  # row-major: flat order = coord order
                assert r not in self.where, "the model lost its partition property"
                self.where[r] = (j, c)
        # lines[k][r]: the ranks of r's instance read along dim k, the other coordinates fixed
        strides = _row_major_strides(self.shape)
        self.lines: list[dict[int, Flat]] = []
        for k, size in enumerate(self.shape):
            by_rank: dict[int, Flat] = {}
            starts = [range(1) if i == k else range(s) for i, s in enumerate(self.shape)]
            for t in self.instances:
                for c in itertools.product(*starts):
                    first = sum(a * d for a, d in zip(c, strides))
                    line = tuple(t[first + i * strides[k]] for i in range(size))
                    by_rank.update(dict.fromkeys(line, line))
            self.lines.append(by_rank)

    def select(self, dims: Sequence[int]) -> Model:
        """Keep ``dims`` in that order; each instance splits along the other dims."""
        rest = [i for i in range(len(self.shape)) if i not in dims]
        out = [_gather(t, self.shape, dict(zip(rest, u)), dims)
               for t in self.instances for u in brute.coords([self.shape[i] for i in rest])]
        return Model([self.shape[i] for i in dims], [self.names[i] for i in dims], out)

    def flatten(self, dims: Sequence[int], name: str) -> Model:
        """Move ``dims`` (in listed order) to where the first one was, then merge them."""
        order: list[int] = []
        for i in range(len(self.shape)):
            if i == dims[0]:
                order.extend(dims)
            elif i not in dims:
                order.append(i)
        permuted = self.select(order)
        pos = order.index(dims[0])
        shape = list(permuted.shape)
        shape[pos:pos + len(dims)] = [math.prod(shape[pos:pos + len(dims)])]
        names = list(permuted.names)
        names[pos:pos + len(dims)] = [name]
        return Model(shape, names, permuted.instances)

    def unflatten(self, k: int, sizes: Sequence[int], names: Sequence[str]) -> Model:
        """Reshape dim ``k`` row-major into ``sizes``: the flat tensors do not change."""
        return Model((*self.shape[:k], *sizes, *self.shape[k + 1:]),
                     (*self.names[:k], *names, *self.names[k + 1:]), self.instances)

    def rename(self, mapping: dict[int, str]) -> Model:
        return Model(self.shape, [mapping.get(i, n) for i, n in enumerate(self.names)],
                     self.instances)

    # queries
    def coordinate(self, r: int) -> tuple[int, ...]:
        return self.where[r][1]

    def group(self, r: int, k: int) -> Flat:
        return self.lines[k][r]

    def instance(self, r: int) -> Any:
        return _nest(self.instances[self.where[r][0]], self.shape)

    def family(self) -> tuple[object, ...]:
        """What determines the view up to its names: the shape and the set of instances."""
        return self.shape, frozenset(self.instances)


# ---- is a split expressible as layouts? ----------------------------------------------------
def _ordered_factorizations(n: int) -> Iterator[tuple[int, ...]]:
    if n == 1:
        yield ()
        return
    for f in range(2, n + 1):
        if n % f == 0:
            for rest in _ordered_factorizations(n // f):
                yield (f, *rest)


def _is_layout_function(values: Sequence[int]) -> bool:
    """Whether ``i -> values[i]`` on ``[0, len)`` equals some layout (any flat shape:stride).

    A layout's function is that of its flattened, size-1-free modes: an ordered
    factorization of the size, with the strides fixed by the values at the unit
    coordinates.  Try them all.
    """
    if values[0] != 0:
        return False
    for factors in _ordered_factorizations(len(values)):
        weights = _row_major_strides(factors)
        strides = [values[w] for w in weights]
        if all(values[_index(factors, c)] == sum(a * d for a, d in zip(c, strides))
               for c in brute.coords(factors)):
            return True
    return False


def _split_is_expressible(model: Model, offset_of: dict[int, int], k: int,
                          sizes: Sequence[int]) -> bool:
    """Whether splitting dim ``k`` into ``sizes`` gives dims that are each a layout.

    With the other coordinates fixed at 0 in any instance, let ``g(y)`` be the
    universe offset of the element at new coordinates ``y`` minus that at 0.  The
    split is a view exactly when ``g(y) == sum_i f_i(y_i)`` (each new dim adds
    its own offset) with ``f_i(t) = g(t e_i)`` a layout function of ``t``.
    """
    inst = model.instances[0]
    base = [0] * len(model.shape)

    def g(y: Sequence[int]) -> int:
        c = list(base)
        c[k] = _index(sizes, y)
        return offset_of[inst[_index(model.shape, c)]] - offset_of[inst[0]]

    units = [[g([t if i == m else 0 for i in range(len(sizes))]) for t in range(s)]
             for m, s in enumerate(sizes)]
    additive = all(g(y) == sum(units[m][t] for m, t in enumerate(y))
                   for y in brute.coords(sizes))
    return additive and all(_is_layout_function(u) for u in units)


def _is_arithmetic(values: Sequence[int]) -> bool:
    return all(v == i * (values[1] - values[0]) + values[0] for i, v in enumerate(values)) \
        if len(values) > 1 else True


# ---- strategies ----------------------------------------------------------------------------
def _draw_shape(data: st.DataObject) -> tuple[int, ...]:
    ndim = data.draw(st.integers(1, 4), label="ndim")
    shape: list[int] = []
    for _ in range(ndim):
        budget = MAX_RANKS // math.prod(shape)
        sizes = [s for s in (2, 3, 4, 1, 6, 8, 5) if s <= budget]
        shape.append(data.draw(st.sampled_from(sizes), label="size"))
    return tuple(shape)


def _draw_factorization(data: st.DataObject, n: int, max_parts: int) -> tuple[int, ...]:
    """Random ordered factors of ``n`` (size-1 factors allowed), 1 to ``max_parts`` of them."""
    parts = data.draw(st.integers(1, max_parts), label="parts")
    sizes = [1] * parts
    p, m = 2, n
    while m > 1:
        while m % p == 0:
            sizes[data.draw(st.integers(0, parts - 1), label="slot")] *= p
            m //= p
        p += 1
    return tuple(sizes)


def _draw_dims(data: st.DataObject, ndim: int, min_size: int = 1) -> list[int]:
    """Distinct dims in random order, at least ``min_size`` of them."""
    perm = data.draw(st.permutations(range(ndim)), label="order")
    n = data.draw(st.integers(min_size, ndim), label="count")
    return list(perm[:n])


# ---- the machine ---------------------------------------------------------------------------
class MeshViewMachine(RuleBasedStateMachine):
    """Random transform sequences on a MeshView and on its brute-force model."""

    def __init__(self) -> None:
        super().__init__()
        self.view: MeshView
        self.model: Model
        self.offset_of: dict[int, int] = {}
        self.universe: tuple[int, ...] = ()
        self.fresh = 0
        self.seen_families: dict[tuple[object, ...], MeshView] = {}
        self.seen_views: dict[MeshView, tuple[object, ...]] = {}

    def _fresh(self) -> str:
        self.fresh += 1
        return f"n{self.fresh}"

    def _contiguous(self, k: int) -> bool:
        """Whether dim ``k``'s groups step through the universe offsets with one stride."""
        line = self.model.group(self.model.instances[0][0], k)
        return _is_arithmetic([self.offset_of[r] for r in line])

    def _keys(self, data: st.DataObject, dims: Sequence[int]) -> tuple[str | int, ...]:
        """Refer to each dim by name, by index or by negative index."""
        out: list[str | int] = []
        for i in dims:
            how = data.draw(st.sampled_from(["name", "index", "negative"]), label="key")
            out.append(self.view.names[i] if how == "name"
                       else i if how == "index" else i - self.view.ndim)
        return tuple(out)

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        shape = _draw_shape(data)
        n = math.prod(shape)
        names = data.draw(st.sampled_from([None, ("dp", "cp", "tp", "ep")[:len(shape)]]),
                          label="names")
        if data.draw(st.booleans(), label="explicit ranks"):
            pool = data.draw(st.sampled_from([n, 3 * n]), label="pool")
            universe = tuple(data.draw(st.permutations(range(pool)), label="ranks")[:n])
            self.view = MeshView.from_ranks(_nest(universe, shape), names)
        else:
            universe = tuple(range(n))
            self.view = MeshView.from_shape(shape, names)
        self.universe = universe
        self.offset_of = {r: i for i, r in enumerate(universe)}
        self.model = Model(shape, names or [f"dim{i}" for i in range(len(shape))], [universe])

    # ---- transforms ------------------------------------------------------------------------
    @rule(data=st.data())
    def select(self, data: st.DataObject) -> None:
        dims = _draw_dims(data, self.view.ndim)
        keys = self._keys(data, dims)
        key = keys[0] if len(keys) == 1 and data.draw(st.booleans(), label="bare") else keys
        note(f"view[{key!r}]")
        self.view = self.view[key]
        self.model = self.model.select(dims)

    @rule(data=st.data())
    def flatten(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 3), label="all dims") == 0:
            dims, arg = list(range(self.view.ndim)), None
        else:
            dims = _draw_dims(data, self.view.ndim, min_size=min(2, self.view.ndim))
            keys = self._keys(data, dims)
            bare = len(keys) == 1 and data.draw(st.booleans(), label="bare")
            arg = keys[0] if bare else keys
        name = data.draw(st.sampled_from([None, self._fresh()]), label="name")
        new_name = "_".join(self.view.names[i] for i in dims) if name is None else name
        note(f"flatten({arg!r}, {name!r})")
        others = [n for i, n in enumerate(self.view.names) if i not in dims]
        if new_name in others:  # the default name may clash with a dim that stays
            try:
                self.view.flatten(arg, name)
            except DuplicateNameError as e:
                assert repr(new_name) in str(e)
                return
            raise AssertionError(f"flatten into the taken name {new_name!r} did not raise")
        self.view = self.view.flatten(arg, name)
        self.model = self.model.flatten(dims, new_name)

    @rule(data=st.data())
    def unflatten(self, data: st.DataObject) -> None:
        # Non-contiguous (flattened) dims are the interesting ones: pick one half the time.
        strided = [i for i in range(self.view.ndim) if not self._contiguous(i)]
        if strided and data.draw(st.booleans(), label="pick a non-contiguous dim"):
            k = data.draw(st.sampled_from(strided), label="dim")
        else:
            k = data.draw(st.integers(0, self.view.ndim - 1), label="dim")
        sizes = _draw_factorization(data, self.view.shape[k], MAX_DIMS - self.view.ndim + 1)
        names = [self._fresh() for _ in sizes]
        key = self._keys(data, [k])[0]
        note(f"unflatten({key!r}, {sizes!r}, {names!r})")
        try:
            view = self.view.unflatten(key, sizes, names)
        except NotRepresentableError:
            assert not self._contiguous(k), "unflatten refused a contiguous (arithmetic) dim"

            assert not _split_is_expressible(self.model, self.offset_of, k, sizes), (
                f"unflatten refused sizes {sizes} that layouts can express")
            return
        self.view = view
        self.model = self.model.unflatten(k, sizes, names)

    @rule(data=st.data())
    def transpose(self, data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="reverse"):
            perm = list(reversed(range(self.view.ndim)))
            note("transpose()")
            self.view = self.view.transpose()
        else:
            perm = _draw_dims(data, self.view.ndim, min_size=self.view.ndim)
            keys = self._keys(data, perm)
            note(f"transpose(*{keys!r})")
            self.view = self.view.transpose(*keys)
        self.model = self.model.select(perm)

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        dims = _draw_dims(data, self.view.ndim, min_size=0)
        mapping = {i: self._fresh() for i in dims}
        keys = self._keys(data, dims)
        note(f"rename({dict(zip(keys, mapping.values()))!r})")
        self.view = self.view.rename(dict(zip(keys, mapping.values())))
        self.model = self.model.rename(mapping)

    @rule(data=st.data())
    def concatenate_two_selections(self, data: st.DataObject) -> None:
        if self.view.ndim < 2:
            return
        dims = _draw_dims(data, self.view.ndim, min_size=2)
        cut = data.draw(st.integers(1, len(dims) - 1), label="cut")
        a, b = self._keys(data, dims[:cut]), self._keys(data, dims[cut:])
        note(f"concatenate([view[{a!r}], view[{b!r}]])")
        self.view = concatenate([self.view[a], self.view[b]])
        self.model = self.model.select(dims)

    # ---- the law ---------------------------------------------------------------------------
    @invariant()
    def agrees_with_model(self) -> None:
        view, model = self.view, self.model
        assert view.shape == model.shape
        assert view.names == model.names
        assert view.ndim == len(model.shape)
        assert view.size() == math.prod(model.shape)
        for k, s in enumerate(model.shape):
            assert view.size(k) == s == view.size(model.names[k])
        for r in self.universe:
            c = model.coordinate(r)
            assert view.coordinate(r) == c, r
            for k, name in enumerate(model.names):
                assert view.local_rank(r, name) == c[k], (r, name)
                assert view.group(r, name) == model.group(r, k), (r, name)
            assert view.instance(r) == model.instance(r), r
        for k, name in enumerate(model.names):
            assert sorted(view.groups(name)) == sorted(set(model.lines[k].values())), name
        expected = sorted(_nest(t, model.shape) for t in model.instances)
        assert sorted(view.instances()) == expected

    @invariant()
    def ranks_outside_the_universe_are_refused(self) -> None:
        top = max(self.universe)
        gaps = [r for r in range(top) if r not in self.offset_of][:1]
        for r in [-1, top + 1, *gaps]:
            assert self.view.coordinate(r) is None
            with pytest.raises(RankNotInMeshError):
                self.view.group(r, 0)

    @invariant()
    def equal_exactly_when_the_families_are(self) -> None:
        # Names are compared separately (above); give every view the same names so that
        # e.g. flatten-then-unflatten back to the old sizes meets the earlier view again.
        view = self.view.rename({i: f"_{i}" for i in range(self.view.ndim)})
        family = self.model.family()
        if family in self.seen_families:
            old = self.seen_families[family]
            assert view == old and hash(view) == hash(old), (view, old)
        if view in self.seen_views:
            assert self.seen_views[view] == family, view
        self.seen_families[family] = view
        self.seen_views[view] = family


# Scaled from the profile (conftest.py): about 10 s under "default", about 4 min under "thorough",
# whose run may then outlast the suite's 300 s per-test timeout.
EXAMPLES = 2 * settings().max_examples
MeshViewMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=30)
TestMeshViewStateful = pytest.mark.timeout(max(300, EXAMPLES // 4))(MeshViewMachine.TestCase)
