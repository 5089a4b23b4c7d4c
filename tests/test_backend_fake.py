"""FakeBackend and the DeviceMesh facade: groups, laziness, sharing, options, threads, errors.

Expected groups come from :class:`backend_oracle.BruteMesh` (every rank written out in a
NumPy array) or are written out by hand; the view's own answers are checked too, so a
test fails if the backend disagrees with either.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from backend_oracle import BruteMesh, Op, build

from backend import (
    BackendConfigError,
    BackendError,
    DeviceMesh,
    FakeBackend,
    FakeGroup,
    GroupOptions,
    NotAMemberError,
    ReentrantCreationError,
    bind,
    current_mesh,
    init_device_mesh,
)
from mesh import MeshError, MeshView

T30 = GroupOptions(timeout=timedelta(seconds=30))
T60 = GroupOptions(timeout=timedelta(seconds=60))
DEFAULT = GroupOptions()


# ---- random meshes and transforms ---------------------------------------------------------

def _factorizations(n: int) -> list[tuple[int, ...]]:
    """Ordered factorizations of ``n`` into 2 or 3 factors > 1."""
    out: list[tuple[int, ...]] = [(a, n // a) for a in range(2, n) if n % a == 0]
    out += [(a, b, n // (a * b)) for a in range(2, n) for b in range(2, n)
            if n % (a * b) == 0 and n // (a * b) > 1]
    return out


def random_case(seed: int) -> tuple[int, tuple[Any, ...], list[Op]]:
    """``(world_size, start, ops)``: a random mesh of <= 4 dims and <= 64 ranks, maybe over an
    explicit universe (a shuffled subset of a larger world), then 0-3 random transforms."""
    rng = random.Random(seed)
    ndim = rng.randint(1, 4)
    shape: list[int] = []
    for _ in range(ndim):
        choices = [s for s in (1, 2, 2, 3, 4, 4, 5, 6, 8) if math.prod(shape) * s <= 64]
        shape.append(rng.choice(choices))
    names = [f"d{i}" for i in range(ndim)]
    n = math.prod(shape)
    if rng.random() < 0.5:
        world, start = n, ("shape", shape, names)
    else:
        world = n + rng.randint(0, 4)
        ranks = rng.sample(range(world), n)
        start = ("ranks", np.array(ranks).reshape(shape).tolist(), names)
    ops: list[Op] = []
    view, _ = build(start, [])
    for step in range(rng.randint(0, 3)):
        cur = list(view.names)
        kind = rng.choice(["select", "transpose", "flatten", "unflatten"])
        if kind == "select":
            op: Op = ("select", rng.sample(cur, rng.randint(1, len(cur))))
        elif kind == "transpose":
            op = ("transpose", rng.sample(cur, len(cur)))
        elif kind == "flatten":
            op = ("flatten", rng.sample(cur, rng.randint(1, len(cur))), f"f{step}")
        else:
            splittable = [d for d in cur if _factorizations(view.size(d))]
            if not splittable:
                continue
            d = rng.choice(splittable)
            sizes = rng.choice(_factorizations(view.size(d)))
            op = ("unflatten", d, sizes, [f"u{step}_{j}" for j in range(len(sizes))])
        try:
            view, _ = build(start, [*ops, op])
        except MeshError:  # e.g. unflattening a non-contiguous dim across its parts
            continue
        ops.append(op)
    return world, start, ops


@pytest.mark.parametrize("seed", range(60))
def test_every_rank_gets_the_brute_force_group_of_every_dim(seed: int) -> None:
    world, start, ops = random_case(seed)
    view, brute = build(start, ops)
    assert view.names == brute.names and view.shape == brute.shape, (start, ops)
    universe = (list(range(world)) if start[0] == "shape"
                else np.array(start[1]).flatten().tolist())  # offset -> global rank
    for rank in range(world):
        fb = FakeBackend(world_size=world, rank=rank)
        mesh = bind(view, fb)
        if rank not in brute.ranks:
            assert mesh.get_coordinate() is None
            for dim in view.names:
                with pytest.raises(NotAMemberError):
                    mesh.get_group(dim)
            assert fb.created == ()
            continue
        coord = brute.coord(rank)
        assert mesh.get_coordinate() == tuple(coord), (rank, start, ops)
        for k, dim in enumerate(view.names):
            g = mesh.get_group(dim)
            expected = brute.group(rank, dim)
            assert g.ranks == expected == view.group(rank, dim), (rank, dim, start, ops)
            assert g.size() == len(expected) == view.size(dim)
            assert g.rank() == coord[k] == expected.index(rank) == view.local_rank(rank, dim)
            assert mesh.get_local_rank(dim) == coord[k]
            assert mesh.get_group(k) is g  # by index: the same cached group
            # The group is stored as (layout, offset), not as a rank list.
            assert tuple(universe[g.offset + g.layout(i)] for i in range(g.size())) == expected
        assert [r.dim for r in fb.created] == list(view.names)


def test_random_cases_exercise_every_transform_and_explicit_universes() -> None:
    """Guards the generator above: the 60 seeds must cover what they claim to."""
    cases = [random_case(s) for s in range(60)]
    kinds = {op[0] for _, _, ops in cases for op in ops}
    assert kinds == {"select", "transpose", "flatten", "unflatten"}
    assert any(start[0] == "ranks" and world > math.prod(build(start, [])[0].shape)
               for world, start, _ in cases)
    assert any(len(build(start, ops)[0].names) == 4 for _, start, ops in cases)


@pytest.mark.timeout(30)
def test_groups_of_a_trillion_rank_world_need_no_enumeration() -> None:
    """Getting a group, its size, this rank's index and its (offset, layout) is arithmetic:
    on a world of 2**40 ranks it returns at once (listing any group would take minutes)."""
    n = 2**40
    rank = n - 3  # coordinate (1023, 2**20 - 1, 1021) in (pp, dp, tp) = (2**10, 2**20, 2**10)
    fb = FakeBackend(world_size=n, rank=rank)
    mesh = bind(MeshView.from_shape((2**10, 2**20, 2**10), ("pp", "dp", "tp")), fb)
    assert mesh.get_coordinate() == (1023, 2**20 - 1, 1021)
    pp, dp, tp = (mesh.get_group(d) for d in ("pp", "dp", "tp"))
    assert (pp.size(), pp.rank(), pp.offset, pp.layout(1)) == (2**10, 1023, rank - 1023 * 2**30,
                                                               2**30)
    assert (dp.size(), dp.rank(), dp.offset, dp.layout(1)) == (2**20, 2**20 - 1,
                                                               rank - (2**20 - 1) * 2**10, 2**10)
    assert (tp.size(), tp.rank(), tp.offset, tp.layout(1)) == (2**10, 1021, rank - 1021, 1)
    x = mesh.flatten("x", dims=("tp", "pp")).get_group("x")  # tp outer, pp inner
    assert (x.size(), x.rank(), x.offset) == (2**20, 1021 * 2**10 + 1023,
                                              rank - 1021 - 1023 * 2**30)
    assert len(fb.created) == 4


def test_hand_written_groups_of_a_2x2x2_mesh() -> None:
    mesh = bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")),
                FakeBackend(world_size=8, rank=5))
    assert mesh.get_group("dp").ranks == (1, 5)
    assert mesh.get_group("cp").ranks == (5, 7)
    assert mesh.get_group("tp").ranks == (4, 5)
    flat = mesh.flatten("tp_dp", dims=("tp", "dp"))  # tp outer: not ascending
    assert flat.get_group("tp_dp").ranks == (0, 4, 1, 5)
    assert flat.get_group("tp_dp").rank() == 3


# ---- laziness -----------------------------------------------------------------------------

def test_binding_and_transforming_create_no_group() -> None:
    fb = FakeBackend(world_size=16, rank=3)
    mesh = init_device_mesh("cpu", (2, 2, 4), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
    mesh["tp"]
    mesh[("tp", "dp")].flatten("x")
    mesh.unflatten("tp", (2, 2), ("a", "b"))
    bind(MeshView.from_shape(16, ("world",)), fb)
    mesh.get_coordinate(), mesh.get_local_rank("cp"), mesh.size(), mesh.shape
    assert fb.created == ()


def test_asking_for_tp_creates_only_tp() -> None:
    fb = FakeBackend(world_size=8, rank=6)
    mesh = bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")), fb)
    g = mesh.get_group("tp")
    assert len(fb.created) == 1
    (record,) = fb.created
    assert record.dim == "tp" and record.group is g and g.ranks == (6, 7)
    mesh.get_group("tp")
    mesh["tp"].get_group()
    assert len(fb.created) == 1


# ---- sharing ------------------------------------------------------------------------------
#
# Creation counts after asking every dim of both meshes, per rank (the same on every rank):
#   world 8  = (dp, cp, tp) (2, 2, 2)  vs (dp, ep, ep_tp) (2, 2, 2): dp=dp (stride 4),
#              cp=ep (stride 2), tp=ep_tp (stride 1)                       -> 3 groups, not 6
#   world 16 = (dp, cp, tp) (2, 2, 4)  vs (dp, ep, ep_tp) (2, 4, 2): only dp (stride 8) is
#              shared; cp (2 @ 4), tp (4 @ 1), ep (4 @ 2), ep_tp (2 @ 1) differ -> 5 groups
#   world 16 = (dp, cp, tp) (2, 4, 2)  vs (dp, ep, ep_tp) (4, 2, 2): only tp=ep_tp (2 @ 1) is
#              shared; dp (2 @ 8) vs (4 @ 4), cp (4 @ 2) vs ep (2 @ 2)      -> 5 groups
SHARING = [
    # world, (dp, cp, tp) sizes, (dp, ep, ep_tp) sizes, pairs of the same family, total
    (8, (2, 2, 2), (2, 2, 2), [("dp", "dp"), ("cp", "ep"), ("tp", "ep_tp")], 3),
    (16, (2, 2, 4), (2, 4, 2), [("dp", "dp")], 5),
    (16, (2, 4, 2), (4, 2, 2), [("tp", "ep_tp")], 5),
]


@pytest.mark.parametrize(("world", "a_sizes", "b_sizes", "shared", "total"), SHARING)
def test_two_unflattens_of_one_world_share_the_groups_they_both_reach(
        world: int, a_sizes: tuple[int, ...], b_sizes: tuple[int, ...],
        shared: list[tuple[str, str]], total: int) -> None:
    whole = MeshView.from_shape(world, ("world",))
    for rank in range(world):
        fb = FakeBackend(world_size=world, rank=rank)
        a = bind(whole.unflatten("world", a_sizes, ("dp", "cp", "tp")), fb)
        b = bind(whole.unflatten("world", b_sizes, ("dp", "ep", "ep_tp")), fb)
        ga = {d: a.get_group(d) for d in a.mesh_dim_names}
        assert len(fb.created) == 3
        gb = {d: b.get_group(d) for d in b.mesh_dim_names}
        assert len(fb.created) == total, (rank, [r.dim for r in fb.created])
        for da, db in shared:
            assert ga[da] is gb[db]
        for da in ga:
            for db in gb:
                if (da, db) not in shared:
                    assert ga[da] is not gb[db]
                    assert ga[da].ranks != gb[db].ranks  # a different family: other ranks


def test_an_explicit_universe_shares_the_groups_of_an_identity_one() -> None:
    """A mesh over a permuted rank tensor (torch's DeviceMesh("cpu", [[0, 2], [1, 3]])) reaches
    the identity mesh's groups along swapped dims: one group each, not two."""
    for rank in range(4):
        fb = FakeBackend(world_size=4, rank=rank)
        plain = bind(MeshView.from_shape((2, 2), ("dp", "tp")), fb)
        swapped = bind(MeshView.from_ranks([[0, 2], [1, 3]], ("tp", "dp")), fb)
        assert swapped.get_group("tp") is plain.get_group("tp")
        assert swapped.get_group("dp") is plain.get_group("dp")
        assert len(fb.created) == 2
        other = bind(MeshView.from_ranks([[0, 3], [1, 2]], ("a", "b")), fb)
        assert other.get_group("a").ranks != plain.get_group("dp").ranks
        assert len(fb.created) == 3


def test_shared_groups_hold_the_same_ranks_by_hand() -> None:
    # world 16, rank 5: (dp, cp, tp) = (2, 2, 4) puts 5 at (0, 1, 1); (dp, ep, ep_tp) = (2, 4, 2)
    # puts it at (0, 2, 1).  dp is {5, 13} in both.
    whole = MeshView.from_shape(16, ("world",))
    fb = FakeBackend(world_size=16, rank=5)
    a = bind(whole.unflatten("world", (2, 2, 4), ("dp", "cp", "tp")), fb)
    b = bind(whole.unflatten("world", (2, 4, 2), ("dp", "ep", "ep_tp")), fb)
    assert a.get_group("dp").ranks == b.get_group("dp").ranks == (5, 13)
    assert a.get_group("cp").ranks == (1, 5)
    assert a.get_group("tp").ranks == (4, 5, 6, 7)
    assert b.get_group("ep").ranks == (1, 3, 5, 7)
    assert b.get_group("ep_tp").ranks == (4, 5)
    assert len(fb.created) == 5
    assert fb.created[0].dim == "dp"  # the record names the dim that first asked


def test_flattening_every_dim_reaches_the_world_group() -> None:
    fb = FakeBackend(world_size=8, rank=2)
    world = bind(MeshView.from_shape(8, ("world",)), fb)
    mesh = world.unflatten("world", (2, 4), ("dp", "tp"))
    assert mesh.flatten("all").get_group() is world.get_group()
    assert mesh[("dp", "tp")].flatten("again").get_group() is world.get_group()
    assert len(fb.created) == 1


def test_same_ranks_in_another_order_are_a_different_group() -> None:
    fb = FakeBackend(world_size=8, rank=5)
    mesh = bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")), fb)
    cp_tp = mesh.flatten("x", dims=("cp", "tp")).get_group("x")
    tp_cp = mesh.flatten("y", dims=("tp", "cp")).get_group("y")
    assert cp_tp.ranks == (4, 5, 6, 7) and tp_cp.ranks == (4, 6, 5, 7)
    assert cp_tp is not tp_cp and len(fb.created) == 2


def test_a_tag_asks_for_a_separate_group_of_the_same_ranks() -> None:
    fb = FakeBackend(world_size=8, rank=1)
    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    plain = bind(view, fb).get_group("tp")
    tagged = bind(view, fb, backend_override={"tp": GroupOptions(tag="moe")}).get_group("tp")
    again = bind(view, fb, backend_override={"tp": GroupOptions(tag="moe")}).get_group("tp")
    assert plain.ranks == tagged.ranks == (0, 1, 2, 3)
    assert plain is not tagged and tagged is again
    assert len(fb.created) == 2


def test_different_options_are_different_groups() -> None:
    fb = FakeBackend(world_size=4, rank=0)
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    a = bind(view, fb).get_group("dp")
    b = bind(view, fb, backend_override={"dp": T30}).get_group("dp")
    c = bind(view, fb, backend_override={"dp": GroupOptions(timeout=timedelta(seconds=30))}
                ).get_group("dp")
    assert a is not b and b is c and len(fb.created) == 2


def test_group_desc_names_the_fake_group() -> None:
    fb = FakeBackend(world_size=4, rank=0)
    mesh = bind(MeshView.from_shape((2, 2), ("dp", "tp")), fb,
                   backend_override={"dp": GroupOptions(group_desc="data-parallel")})
    assert mesh.get_group("dp").name == "data-parallel"
    assert mesh.get_group("tp").name == "tp"


# ---- options through slicing, flatten and unflatten ---------------------------------------

def _mesh_with_dp_timeout(**kw: Any) -> DeviceMesh:
    return init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"),
                            backend=FakeBackend(8, rank=0), backend_override={"dp": T30}, **kw)


def test_backend_override_sets_the_options_of_its_dim_only() -> None:
    assert _mesh_with_dp_timeout().options == {"dp": T30, "tp": DEFAULT}
    by_index = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"),
                                backend=FakeBackend(8, rank=0), backend_override={1: T30})
    assert by_index.options == {"dp": DEFAULT, "tp": T30}


def test_backend_override_naming_a_dim_twice_is_refused_like_torch() -> None:
    with pytest.raises(RuntimeError, match="redundant dim index 0 and name dp"):
        init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"),
                         backend=FakeBackend(8, rank=0), backend_override={"dp": T30, 0: T60})


def test_override_forms_follow_torch() -> None:
    fb = FakeBackend(4, rank=0)
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    sentinel = object()
    mesh = bind(view, fb, backend_override={"dp": "gloo", "tp": ("nccl", sentinel)})
    assert mesh.options == {"dp": GroupOptions(backend="gloo"),
                            "tp": GroupOptions(backend="nccl", pg_options=sentinel)}
    assert bind(view, fb, backend_override={0: sentinel}).options["dp"] == GroupOptions(
        pg_options=sentinel)


def test_slicing_keeps_each_dims_options() -> None:
    mesh = _mesh_with_dp_timeout()
    assert mesh["dp"].options == {"dp": T30}
    assert mesh["tp"].options == {"tp": DEFAULT}
    assert mesh[("tp", "dp")].options == {"tp": DEFAULT, "dp": T30}


def test_unflatten_new_dims_inherit_the_options() -> None:
    mesh = _mesh_with_dp_timeout()
    split = mesh.unflatten("dp", (2, 2), ("outer", "inner"))
    assert split.mesh_dim_names == ("outer", "inner", "tp")
    assert split.options == {"outer": T30, "inner": T30, "tp": DEFAULT}
    assert mesh["dp"].unflatten("dp", (2, 2), ("a", "b")).options == {"a": T30, "b": T30}


def test_unflatten_override_replaces_the_inherited_options() -> None:
    split = _mesh_with_dp_timeout().unflatten("dp", (2, 2), ("outer", "inner"),
                                              backend_override={"inner": T60})
    assert split.options == {"outer": T30, "inner": T60, "tp": DEFAULT}
    by_index = _mesh_with_dp_timeout().unflatten("dp", (2, 2), ("outer", "inner"),
                                                 backend_override={1: T60})
    assert by_index.options == split.options


def test_unflatten_override_of_an_unknown_dim_raises() -> None:
    with pytest.raises(BackendConfigError, match="tp"):
        _mesh_with_dp_timeout().unflatten("dp", (2, 2), ("outer", "inner"),
                                          backend_override={"tp": T60})


def test_flatten_of_dims_with_equal_options_inherits_them() -> None:
    split = _mesh_with_dp_timeout().unflatten("dp", (2, 2), ("outer", "inner"))
    merged = split.flatten("dp2", dims=("outer", "inner"))
    assert merged.mesh_dim_names == ("dp2", "tp")
    assert merged.options == {"dp2": T30, "tp": DEFAULT}
    fb = FakeBackend(8, rank=0)
    plain = bind(MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")), fb)
    assert plain.flatten("x", dims=("tp", "dp")).options == {"x": DEFAULT, "cp": DEFAULT}


def test_flatten_of_dims_with_different_options_gets_defaults_and_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="backend._facade._device_mesh"):
        merged = _mesh_with_dp_timeout().flatten("all")
    assert merged.options == {"all": DEFAULT}
    assert "flattening dims ['dp', 'tp'] with different options" in caplog.text
    assert _mesh_with_dp_timeout().flatten("x", dims=("tp", "dp")).options == {"x": DEFAULT}


def test_flatten_of_dims_with_different_options_takes_backend_override() -> None:
    merged = _mesh_with_dp_timeout().flatten("all", backend_override=T60)
    assert merged.options == {"all": T60}
    assert _mesh_with_dp_timeout().flatten("all2", backend_override="gloo").options == {
        "all2": GroupOptions(backend="gloo")}
    positional = _mesh_with_dp_timeout().flatten("all3", "gloo")  # torch's _flatten(name, bo)
    assert positional.options == {"all3": GroupOptions(backend="gloo")}


def test_inherited_options_reach_the_created_group() -> None:
    """An unflattened dim that inherits a timeout shares the group of the same family asked
    for with that timeout, and not the default-options one."""
    mesh = _mesh_with_dp_timeout()
    fb = mesh.backend
    assert isinstance(fb, FakeBackend)
    inner = mesh.unflatten("dp", (2, 2), ("outer", "inner")).get_group("inner")
    direct = bind(MeshView.from_shape((2, 2, 2), ("outer", "inner", "tp")), fb,
                     backend_override={"inner": T30}).get_group("inner")
    default = bind(MeshView.from_shape((2, 2, 2), ("outer", "inner", "tp")), fb).get_group("inner")
    assert inner is direct and inner is not default
    assert [r.key.options for r in fb.created] == [T30, DEFAULT]


# ---- threads and failures -----------------------------------------------------------------

class SlowCountingBackend(FakeBackend):
    """Creation takes a while and is counted; optionally fails the first ``fail`` times."""

    def __init__(self, world_size: int, rank: int, *, fail: int = 0,
                 delay: float = 0.05) -> None:
        super().__init__(world_size, rank)
        self.calls = 0
        self.fail = fail
        self.delay = delay
        self._count_lock = threading.Lock()

    def _create(self, view: MeshView, dim: Any, options: GroupOptions) -> FakeGroup:
        with self._count_lock:
            self.calls += 1
            failing = self.calls <= self.fail
        time.sleep(self.delay)
        if failing:
            raise RuntimeError("injected creation failure")
        return super()._create(view, dim, options)


def _ask_from_threads(mesh: DeviceMesh, dim: str, n: int) -> list[Any]:
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def ask(i: int) -> None:
        barrier.wait()
        try:
            results[i] = mesh.get_group(dim)
        except BaseException as e:
            results[i] = e

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck in get_group"
    return results


@pytest.mark.timeout(60)
def test_sixteen_threads_asking_for_one_group_create_it_once() -> None:
    fb = SlowCountingBackend(world_size=8, rank=3)
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    results = _ask_from_threads(mesh, "tp", 16)
    assert fb.calls == 1
    assert all(r is results[0] for r in results)
    assert isinstance(results[0], FakeGroup) and results[0].ranks == (0, 1, 2, 3)
    assert len(fb.created) == 1


def test_a_failed_creation_leaves_no_entry_and_a_retry_works() -> None:
    fb = SlowCountingBackend(world_size=8, rank=3, fail=1, delay=0)
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    with pytest.raises(RuntimeError, match="injected"):
        mesh.get_group("tp")
    assert fb.created == ()
    g = mesh.get_group("tp")
    assert g.ranks == (0, 1, 2, 3) and fb.calls == 2 and len(fb.created) == 1
    assert mesh.get_group("tp") is g and fb.calls == 2


@pytest.mark.timeout(60)
def test_threads_waiting_on_a_failed_creation_see_the_failure_then_retry_works() -> None:
    fb = SlowCountingBackend(world_size=8, rank=3, fail=1, delay=0.2)
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    results = _ask_from_threads(mesh, "dp", 8)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert failed, "the injected failure reached no caller"
    assert all(isinstance(r, RuntimeError) and "injected" in str(r) for r in failed)
    # each waiter got an exception object of its own, chained to the creator's
    assert len({id(r) for r in failed}) == len(failed)
    originals = {id(r.__cause__ or r) for r in failed}
    assert len(originals) == 1
    # Threads that arrived after the failure may have created the group (the one retry).
    assert fb.calls <= 2 and len(fb.created) == fb.calls - 1
    g = mesh.get_group("dp")
    assert g.ranks == (3, 7) and fb.calls == 2 and len(fb.created) == 1


class ReentrantBackend(FakeBackend):
    """A creation that asks for its own group (a backend bug the cache must not hang on)."""

    def _create(self, view: MeshView, dim: Any, options: GroupOptions) -> FakeGroup:
        return self.get_group(view, dim, options)


@pytest.mark.timeout(30)
def test_a_creation_asking_for_its_own_group_raises_instead_of_deadlocking() -> None:
    fb = ReentrantBackend(8, rank=3)
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    with pytest.raises(ReentrantCreationError, match="'tp' asked for that same group again"):
        mesh.get_group("tp")
    assert fb.created == ()


# ---- the DeviceMesh surface ---------------------------------------------------------------

SURFACE_CASES = [
    (("shape", (2, 2, 2), ("dp", "cp", "tp")), [], 8),
    (("shape", (2, 2, 2), ("dp", "cp", "tp")), [("transpose", ("tp", "dp", "cp"))], 8),
    (("shape", (2, 3, 2), ("dp", "cp", "tp")), [("flatten", ("tp", "dp"), "tp_dp")], 12),
    (("shape", (2, 3, 2), ("dp", "cp", "tp")), [("select", ("cp", "dp"))], 12),
    (("shape", (12,), ("world",)), [("unflatten", "world", (3, 4), ("dp", "tp"))], 12),
    (("ranks", [[7, 2], [4, 0], [1, 6]], ("dp", "tp")), [("transpose", ("tp", "dp"))], 9),
]


@pytest.mark.parametrize(("start", "ops", "world"), SURFACE_CASES)
def test_device_mesh_surface_matches_the_brute_force_mesh(
        start: tuple[Any, ...], ops: list[Op], world: int) -> None:
    import torch

    view, brute = build(start, ops)
    for rank in sorted(brute.ranks):
        fb = FakeBackend(world, rank)
        mesh = bind(view, fb)
        assert mesh.get_rank() == rank
        assert mesh.mesh_dim_names == brute.names
        assert mesh.ndim == len(brute.names)
        assert mesh.shape == brute.shape
        assert mesh.size() == math.prod(brute.shape)
        assert [mesh.size(d) for d in brute.names] == list(brute.shape)
        assert [mesh.size(i) for i in range(mesh.ndim)] == list(brute.shape)
        assert mesh.get_coordinate() == brute.coord(rank)
        assert [mesh.get_local_rank(d) for d in brute.names] == list(brute.coord(rank))
        assert mesh.mesh.dtype == torch.int
        assert mesh.mesh.tolist() == brute.instance(rank)
        assert torch.equal(mesh.mesh, torch.tensor(view.instance(rank), dtype=torch.int))
        assert mesh.device_type == "cpu"
        groups = mesh.get_all_groups()
        assert [g.ranks for g in groups] == [brute.group(rank, d) for d in brute.names]
        assert all(g is mesh.get_group(d) for g, d in zip(groups, brute.names))


def test_materialize_creates_every_dim_in_dim_order() -> None:
    fb = FakeBackend(12, rank=7)
    mesh = bind(MeshView.from_shape((2, 3, 2), ("dp", "cp", "tp")).transpose("tp", "dp", "cp"), fb)
    assert mesh.materialize() is mesh
    assert [r.dim for r in fb.created] == ["tp", "dp", "cp"]
    assert [r.group for r in fb.created] == mesh.get_all_groups()
    mesh.materialize()
    assert len(fb.created) == 3


def test_one_dim_queries_need_a_dim_on_a_multi_dim_mesh() -> None:
    mesh = bind(MeshView.from_shape((2, 4), ("dp", "tp")), FakeBackend(8, rank=0))
    with pytest.raises(BackendConfigError, match="dp"):
        mesh.get_group()
    with pytest.raises(BackendConfigError):
        mesh.get_local_rank()
    assert mesh["tp"].get_group().ranks == (0, 1, 2, 3)
    assert mesh["tp"].get_local_rank() == 0


def test_init_device_mesh_keeps_the_device_type_and_builds_a_row_major_mesh() -> None:
    fb = FakeBackend(8, rank=6)
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
    assert mesh.device_type == "cuda" and mesh.backend is fb
    assert mesh.get_coordinate() == (1, 2)
    assert mesh.get_group("dp").ranks == (2, 6)
    unnamed = init_device_mesh("cpu", (2, 4), backend=FakeBackend(8, rank=6))
    assert unnamed.mesh_dim_names is None  # as torch
    assert unnamed.get_group(1).ranks == (4, 5, 6, 7)
    with pytest.raises(RuntimeError, match="without mesh_dim_names"):
        unnamed["dim0"]
    assert mesh["tp"].device_type == "cuda"
    assert mesh.flatten("all").device_type == "cuda"


# ---- the current mesh (context manager) ---------------------------------------------------

def test_with_mesh_sets_the_current_mesh_and_nests() -> None:
    fb = FakeBackend(8, rank=0)
    outer = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    inner = outer["tp"]
    assert current_mesh() is None
    with outer as entered:
        assert entered is outer and current_mesh() is outer
        with inner:
            assert current_mesh() is inner
        assert current_mesh() is outer
    assert current_mesh() is None


def test_the_current_mesh_is_restored_after_an_exception() -> None:
    mesh = bind(MeshView.from_shape((4,), ("world",)), FakeBackend(4, rank=0))
    with pytest.raises(KeyError), mesh:
        raise KeyError("boom")
    assert current_mesh() is None


@pytest.mark.timeout(60)
def test_the_current_mesh_is_per_thread() -> None:
    fb = FakeBackend(8, rank=0)
    a = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb)
    b = a["dp"]
    entered = threading.Barrier(2)
    seen: dict[str, Any] = {}

    def other() -> None:
        seen["before"] = current_mesh()
        with b:
            entered.wait(timeout=10)  # main thread is inside `with a` now
            seen["inside"] = current_mesh()
            entered.wait(timeout=10)

    t = threading.Thread(target=other)
    with a:
        t.start()
        entered.wait(timeout=10)
        assert current_mesh() is a
        entered.wait(timeout=10)
        t.join(timeout=10)
        assert current_mesh() is a
    assert seen == {"before": None, "inside": b}


# ---- errors -------------------------------------------------------------------------------

def test_a_rank_outside_an_explicit_universe_has_no_group() -> None:
    view = MeshView.from_ranks([[0, 2], [4, 6]], ("dp", "tp"))
    fb = FakeBackend(8, rank=1)
    mesh = bind(view, fb)  # binding is fine
    assert mesh.get_coordinate() is None
    with pytest.raises(NotAMemberError, match="rank 1"):
        mesh.get_group("dp")
    with pytest.raises(NotAMemberError):
        mesh.materialize()
    assert issubclass(NotAMemberError, BackendError) and issubclass(NotAMemberError, ValueError)
    assert fb.created == ()
    assert bind(view, FakeBackend(8, rank=4)).get_group("tp").ranks == (4, 6)


def test_a_view_reaching_past_the_world_is_rejected() -> None:
    with pytest.raises(BackendConfigError, match=r"bigger than default world size 8.*rank 9"):
        bind(MeshView.from_ranks([0, 9], ("x",)), FakeBackend(8, rank=0))


@pytest.mark.parametrize("key", ["ep", 2, -3, True, 1.0])
def test_a_bad_backend_override_key_raises(key: Any) -> None:
    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    with pytest.raises(BackendConfigError):
        bind(view, FakeBackend(8, rank=0), backend_override={key: T30})
    with pytest.raises(BackendConfigError):
        init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"),
                         backend=FakeBackend(8, rank=0), backend_override={key: T30})


def test_init_device_mesh_takes_the_first_ranks_of_a_larger_world() -> None:
    inside = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"),
                              backend=FakeBackend(8, rank=1))
    assert inside.get_coordinate() == (0, 1) and inside.get_group("x").ranks == (1, 3)
    outside = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"),
                               backend=FakeBackend(8, rank=5))
    assert outside.get_coordinate() is None
    assert outside.mesh.tolist() == [[0, 1], [2, 3]]  # one instance: the whole mesh, as torch
    with pytest.raises(IndexError):  # torch raises IndexError there too
        outside.get_group("x")


def test_init_device_mesh_rejects_a_mesh_bigger_than_the_world() -> None:
    with pytest.raises(RuntimeError, match="bigger than default world size 8"):
        init_device_mesh("cpu", (4, 4), backend=FakeBackend(8, rank=0))


def test_init_device_mesh_rejects_a_device_with_an_index() -> None:
    with pytest.raises(BackendConfigError, match="cuda:0"):
        init_device_mesh("cuda:0", (8,), backend=FakeBackend(8, rank=0))


@pytest.mark.parametrize(("world", "rank"), [(0, 0), (4, 4), (4, -1), (4.0, 0), (4, True)])
def test_fake_backend_rejects_bad_world_and_rank(world: Any, rank: Any) -> None:
    with pytest.raises(BackendConfigError):
        FakeBackend(world_size=world, rank=rank)


@pytest.mark.parametrize("bad", [dict(timeout=timedelta(0)), dict(timeout=30),
                                 dict(backend=""), dict(tag="")])
def test_group_options_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(BackendConfigError):
        GroupOptions(**bad)


def test_bind_takes_a_view() -> None:
    with pytest.raises(BackendConfigError):
        bind((2, 2), FakeBackend(4, rank=0))  # type: ignore[arg-type]


# ---- torch interop and imports (in subprocesses) ------------------------------------------

def _run_python(code: str, timeout: float = 120) -> Any:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the subprocess did not finish in {timeout} s: {e.stderr!r}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(120)
def test_fake_backend_and_group_queries_do_not_import_torch_distributed() -> None:
    out = _run_python("""
        import json, sys
        from backend import FakeBackend, bind, init_device_mesh
        from mesh import MeshView
        fb = FakeBackend(world_size=8, rank=5)
        mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
        groups = [g.ranks for g in mesh.materialize().get_all_groups()]
        flat = mesh.flatten("x", dims=("tp", "dp")).get_group("x")
        print(json.dumps({"groups": groups, "flat": flat.ranks, "coord": mesh.get_coordinate(),
                          "dist": "torch.distributed" in sys.modules,
                          "torch": "torch" in sys.modules}))
    """)
    assert out["groups"] == [[1, 5], [5, 7], [4, 5]] and out["flat"] == [0, 4, 1, 5]
    assert out["coord"] == [1, 0, 1]
    assert out["dist"] is False and out["torch"] is False


TO_TORCH_SCRIPT = """
    import json
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from backend import FakeBackend, bind, init_device_mesh

    RANK = {rank}
    fb = FakeBackend(world_size=8, rank=RANK)
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
    variants = {{
        "mesh": mesh,
        "transposed": bind(mesh.view.transpose("tp", "dp", "cp"), fb),
        "flat_tp_dp": mesh.flatten("tp_dp", dims=("tp", "dp")),
        "world": mesh.flatten("world"),
    }}
    out = {{}}
    for label, m in variants.items():
        tm = m.to_torch()
        x = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
        placements = [Shard(0)] + [Replicate()] * (m.ndim - 2) + ([Shard(1)] if m.ndim > 1 else [])
        dt = distribute_tensor(x, tm, placements)
        out[label] = {{
            "pg": [dist.get_process_group_ranks(tm.get_group(n)) for n in m.mesh_dim_names],
            "names": list(tm.mesh_dim_names), "shape": list(tm.shape),
            "mesh": tm.mesh.tolist(), "coord": tm.get_coordinate(),
            "local": [tm.get_local_rank(n) for n in m.mesh_dim_names],
            "dt_is_dtensor": isinstance(dt, DTensor), "dt_shape": list(dt.shape),
            "dt_local": list(dt.to_local().shape),
            "dt_placements_kept": tuple(dt.placements) == tuple(placements),
            "dt_mesh_is_tm": dt.device_mesh is tm,
        }}
    fb.shutdown()
    out["initialized_after_shutdown"] = dist.is_initialized()
    print(json.dumps(out))
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("rank", [0, 5])
def test_to_torch_with_fake_groups_matches_our_groups_and_runs_dtensor(rank: int) -> None:
    out = _run_python(TO_TORCH_SCRIPT.format(rank=rank))
    base = BruteMesh.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    brutes = {"mesh": base, "transposed": base.select(("tp", "dp", "cp")),
              "flat_tp_dp": base.flatten(("tp", "dp"), "tp_dp"),
              "world": base.flatten(("dp", "cp", "tp"), "world")}
    for label, brute in brutes.items():
        got = out[label]
        assert got["names"] == list(brute.names), label
        assert got["shape"] == list(brute.shape), label
        assert got["pg"] == [list(brute.group(rank, n)) for n in brute.names], label
        assert got["mesh"] == brute.instance(rank), label
        assert got["coord"] == list(brute.coord(rank)), label
        assert got["local"] == list(brute.coord(rank)), label
        assert got["dt_is_dtensor"] and got["dt_mesh_is_tm"] and got["dt_placements_kept"], label
        assert got["dt_shape"] == [8, 12], label
        # dim 0 sharded over the first mesh dim, dim 1 over the last (if any).
        shards = brute.shape[0], (brute.shape[-1] if len(brute.shape) > 1 else 1)
        assert got["dt_local"] == [8 // shards[0], 12 // shards[1]], label
    assert out["initialized_after_shutdown"] is False


OUTSIDE_SCRIPT = """
    import json
    import torch.distributed as dist
    from backend import FakeBackend, bind
    from mesh import MeshView

    fb = FakeBackend(world_size=8, rank=6)
    tm = bind(MeshView.from_shape((2, 2), ("dp", "tp")), fb).to_torch()
    out = {"shape": list(tm.shape), "coord": tm.get_coordinate(), "mesh": tm.mesh.tolist()}
    fb.shutdown()
    print(json.dumps(out))
"""


@pytest.mark.timeout(180)
def test_to_torch_of_a_mesh_without_this_rank_is_a_torch_mesh_without_groups() -> None:
    """Rank 6 of 8 converting a 4-rank mesh gets torch's view of it (rank 6 has no
    coordinate), as TorchFakeBackend does, not the mesh package's RankNotInMeshError."""
    out = _run_python(OUTSIDE_SCRIPT)
    assert out == {"shape": [2, 2], "coord": None, "mesh": [[0, 1], [2, 3]]}


def test_expectations_are_checked_against_a_machine_of_the_jobs_size() -> None:
    """bind checks a plan against ``topology=``; a machine of another size than the job's
    world (a saved file of another job) is refused naming both sizes, not checked on the
    ranks the two happen to share."""
    from backend import ExpectationError
    from mesh import Topology

    view = MeshView.from_shape((2, 8), ("dp", "tp"))
    for machine in (Topology(32, 8), Topology(8, 8)):
        with pytest.raises(BackendConfigError, match=f"{machine.world_size} ranks.*16"):
            bind(view, FakeBackend(16, rank=0), topology=machine, expect_intra_host=("tp",))
    with pytest.raises(ExpectationError):  # the job's own size: checked
        bind(view, FakeBackend(16, rank=0), topology=Topology(16, 4),
             expect_intra_host=("tp",))
