"""Laws of surviving failed ranks (``mesh.blast``, ``drop``, ``substitute``, ``survive``),
each checked against NumPy rank tensors (``brute.lines``, ``without_slices``, ``replaced``).

A world is ``MeshView.from_ranks(T0)`` over random distinct ranks, its dims transposed at
random; its rank tensor ``T`` (``T0`` transposed) and each rank's offset (its flat index in
``T0``) are known without the code under test.  A *spec* derives a view from a world by
names only: dims that are single world dims or several flattened (first listed outer), in
any order; the oracle reads the same view's groups off any world tensor with
``brute.lines(T, axes)``.  Expected values are never computed by the code under test.
"""

from __future__ import annotations

import math
import re
from typing import Any

import brute
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mesh import MeshView, SurvivalError, blast, drop, substitute, survive

Spec = tuple[tuple[str, ...], ...]  # a view's dims, each a tuple of world dims (flattened)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[MeshView, Any, tuple[str, ...], dict[int, int]]:
    """(world view, its rank tensor, its dim names, rank -> offset in its universe)."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)
                 .filter(lambda s: math.prod(s) <= 48))
    n, names = math.prod(shape), tuple("abcd"[:len(shape)])
    ranks = draw(st.one_of(st.permutations(range(n)),
                           st.lists(st.integers(0, 200), min_size=n, max_size=n, unique=True)))
    t0 = np.array(ranks, dtype=np.int64).reshape(shape)
    perm = draw(st.permutations(range(len(shape))))
    world = MeshView.from_ranks(t0.tolist(), names)[tuple(names[i] for i in perm)]
    return world, t0.transpose(perm), tuple(names[i] for i in perm), {
        int(r): i for i, r in enumerate(t0.flat)}


@st.composite
def specs(draw: st.DrawFn, names: tuple[str, ...]) -> Spec:
    """A view of the world by names: some world dims, in any order, cut into flattened dims."""
    chosen = draw(st.permutations(names))[:draw(st.integers(1, len(names)))]
    cuts = sorted(draw(st.sets(st.integers(1, len(chosen) - 1))) if len(chosen) > 1 else ())
    return tuple(tuple(chosen[lo:hi]) for lo, hi in zip([0, *cuts], [*cuts, len(chosen)]))


def build(world: MeshView, spec: Spec) -> MeshView:
    """The spec's view of ``world`` (flatten, then select: the code under test's transforms)."""
    view = world
    for dims in spec:
        if len(dims) > 1:
            view = view.flatten(dims, "_".join(dims))
    return view[tuple("_".join(d) for d in spec)]


def axes(names: tuple[str, ...], dims: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(names.index(d) for d in dims)


def failures(draw: st.DrawFn, tensor: Any) -> list[int]:
    pool = sorted(int(r) for r in tensor.flat)
    return draw(st.lists(st.sampled_from(pool), min_size=1, max_size=min(4, len(pool)),
                         unique=True))


@given(data=st.data())
def test_blast_equals_a_scan_of_the_rank_tensor(data: st.DataObject) -> None:
    """LAW: for every view (a spec of the world) and dim made of world dims ``A``, the broken
    groups are the lines of ``T`` along ``A`` holding a failed rank (leaders and the first
    ``limit // size`` listed, in offset order), the stranded ranks their healthy members
    (count, first ``limit``), and the broken instances those holding a failed rank."""
    world, t, names, position = data.draw(worlds())
    views = {f"v{i}": s for i, s in enumerate(data.draw(st.lists(specs(names), min_size=1,
                                                                 max_size=3)))}
    failed, limit = failures(data.draw, t), data.draw(st.integers(0, 20))
    got = blast({n: build(world, s) for n, s in views.items()}, failed, limit=limit)
    assert got.failed == tuple(sorted(failed))
    dead = set(failed)
    for n, spec in views.items():
        for dims, d in zip(spec, got[n].dims):
            broken = [g for g in brute.lines(t, axes(names, dims), position) if set(g) & dead]
            healthy = [r for g in broken for r in g if r not in dead]
            size = math.prod(t.shape[a] for a in axes(names, dims))
            assert d.broken_leaders == tuple(g[0] for g in broken)
            assert d.first_broken_groups == tuple(broken[:limit // size])
            assert (d.stranded_ranks, d.first_stranded_ranks) == (len(healthy),
                                                                  tuple(healthy[:limit]))
            assert d.groups == t.size // size and d.group_size == size
        held = [g for g in brute.lines(t, axes(names, sum(spec, ())), position) if set(g) & dead]
        assert got[n].broken_instance_leaders == tuple(g[0] for g in held)


@given(data=st.data())
def test_drop_removes_exactly_the_failed_slices(data: st.DataObject) -> None:
    """LAW: ``drop(world, failed, dim)``'s rank tensor is ``T`` without the slices along
    ``dim`` that hold a failed rank, and its groups along every dim are that tensor's lines;
    when every slice holds one, it raises ``SurvivalError`` naming the dims that would do."""
    world, t, names, _ = data.draw(worlds())
    failed, k = failures(data.draw, t), data.draw(st.integers(0, t.ndim - 1))
    expected = brute.without_slices(t, k, failed)
    if expected.shape[k] == 0:
        fine = [n for i, n in enumerate(names) if brute.without_slices(t, i, failed).size]
        with pytest.raises(SurvivalError, match=re.escape(f"leaves survivors: {fine!r}")):
            drop(world, failed, names[k])
        return
    new = drop(world, failed, names[k])
    assert new.names == names and np.array(new.instance(int(expected.flat[0]))).tolist() == \
        expected.tolist()
    position = {int(r): i for i, r in enumerate(expected.flat)}
    for i, n in enumerate(names):
        assert set(new.groups(n)) == set(brute.lines(expected, (i,), position))


@given(data=st.data())
def test_substitute_puts_spares_in_the_failed_ranks_places(data: st.DataObject) -> None:
    """LAW: for any view of the world, ``substitute(view, failed, spares)``'s groups along each
    dim are the lines of ``T`` with the i-th lowest failed rank replaced by the i-th spare."""
    world, t, names, _ = data.draw(worlds())
    spec, failed = data.draw(specs(names)), failures(data.draw, t)
    spares = data.draw(st.lists(st.integers(1000, 1020), min_size=len(failed),
                                max_size=len(failed) + 2, unique=True))
    new = substitute(build(world, spec), failed, spares)
    expected = brute.replaced(t, failed, spares)
    position = {int(r): i for i, r in enumerate(expected.flat)}
    for dims, n in zip(spec, new.names):
        assert set(new.groups(n)) == set(brute.lines(expected, axes(names, dims), position))


@given(data=st.data())
def test_survive_keeps_exactly_the_groups_that_did_not_change(data: st.DataObject) -> None:
    """LAW: ``survive(plan, world, failed, drop=|spares=)``'s views have the lines of the
    surviving tensor as groups; a new group is intact exactly when it is a line of ``T`` along
    the same world dims (``intact_groups``, ``new_groups``, and ``is_intact`` of every
    surviving rank agree with that)."""
    world, t, names, _ = data.draw(worlds())
    plan_specs = {f"v{i}": s for i, s in enumerate(data.draw(st.lists(specs(names), min_size=1,
                                                                      max_size=3)))}
    failed = failures(data.draw, t)
    way = data.draw(st.one_of(st.sampled_from(names), st.just(None)))
    spares = list(range(500, 500 + len(failed)))
    after_t = (brute.replaced(t, failed, spares) if way is None
               else brute.without_slices(t, names.index(way), failed))
    assume(after_t.size > 0)

    def plan(w: MeshView) -> dict[str, MeshView]:
        return {n: build(w, s) for n, s in plan_specs.items()}

    got = (survive(plan, world, failed, spares=spares) if way is None
           else survive(plan, world, failed, drop=way))
    position = {int(r): i for i, r in enumerate(after_t.flat)}
    old_position = {int(r): i for i, r in enumerate(t.flat)}
    for n, spec in plan_specs.items():
        for dims, d in zip(spec, got.views[n].names):
            new = brute.lines(after_t, axes(names, dims), position)
            old = set(brute.lines(t, axes(names, dims), old_position))
            assert set(got.views[n].groups(d)) == set(new)
            assert set(got.intact_groups(n, d)) == {g for g in new if g in old}
            assert set(got.new_groups(n, d)) == {g for g in new if g not in old}
            for g in new:
                assert got.is_intact(n, d, g[-1]) == (g in old)
