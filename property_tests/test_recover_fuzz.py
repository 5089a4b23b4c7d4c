"""Fuzz of recovery: the values ``blast`` and ``survive`` return, ``survive`` given plans that
misbehave, and ``DeviceMesh.rebind`` (issue 30).

THE LAW (as ``test_mesh_fuzz``'s): a call with junk arguments returns or raises an error of the
package hierarchies (``mesh.MeshError``; for ``rebind`` also ``backend.BackendError``);
arguments that do not fit the signature are Python's ``TypeError``, before library code runs.

For ``survive``, whatever the plan does (raise any exception, one whose message cannot be read
included; return junk, a view, a mapping whose reading raises, whose items are no pairs or
whose keys are hostile ``str`` subclasses, a never-ending or oversized mapping, views over
another universe, other names or views on the survivors' world), ``survive`` returns a
:class:`~mesh.Survival` or raises a ``MeshError``, within a fixed bound on work
(``tests/work_bound.py``); a plan's ``SystemExit`` or ``KeyboardInterrupt`` goes through as it
is (the caller's program asked to stop; the ``meshlayout`` command turns them into exit 2 and
130).

For ``rebind``, over random sequences of losses on a ``FakeBackend`` (a drop along a dim, or
spares put in; the views from ``mesh.drop`` and ``mesh.substitute``): the backend's lost ranks
are exactly the ranks that left the universe; every group it hands out has the members a NumPy
rank tensor (the world's, with the same slices deleted and the same spares put in) gives along
that dim; a group whose members did not change is the same object (kept, not created again);
and no group holds a lost rank.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_mesh_fuzz import Call, Junk, _arg, check_view, junk
from work_bound import bounded

import mesh
from backend import BackendError, DeviceMesh, FakeBackend, init_device_mesh
from mesh import MeshError, MeshView, SurvivalError, drop, substitute, survive

WORLD = MeshView.from_shape((2, 2, 4), ("dp", "cp", "tp"))


# ---- plans that misbehave -----------------------------------------------------------------

class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


class HostileStr(str):
    """A dict key that is a ``str`` but lies about its text and length."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __len__(self) -> int:
        raise RuntimeError("no len")


class Forever(Mapping):  # type: ignore[type-arg]
    """A mapping whose keys never end, each mapped to ``view``."""

    def __init__(self, view: MeshView) -> None:
        self.view = view

    def __getitem__(self, key: object) -> MeshView:
        return self.view

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        i = 0
        while True:
            yield f"v{i}"
            i += 1


class Triples(dict):  # type: ignore[type-arg]
    """A dict whose items are no pairs."""

    def items(self) -> Any:
        return iter([("a", self["a"], 3)])


class RaisingItems(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise Unprintable()


def _raise(e: BaseException) -> Any:
    raise e


def _on_survivors(w: MeshView, value: Any) -> Any:
    """``{"w": w}`` on the world (an identity universe), ``value()`` on the survivors'."""
    return {"w": w} if w.ranks.is_identity else value()


PLANS: dict[str, str] = {
    "fine": "lambda w: {'w': w, 'dp_cp': w.flatten(('dp', 'cp'), 'dp_cp')}",
    "one view": "lambda w: w",
    "raises": "lambda w: 1 / 0",
    "raises unprintable": "lambda w: _raise(Unprintable())",
    "raises a MeshError": "lambda w: w['zz']",
    "takes two": "lambda w, x: {'w': w}",
    "None": "lambda w: None",
    "an int": "lambda w: 3",
    "a list": "lambda w: [w]",
    "a generator": "lambda w: (v for v in [w])",
    "hostile mapping": "lambda w: HostileMapping()",
    "raising items": "lambda w: RaisingItems(a=w)",
    "no pairs": "lambda w: Triples(a=w)",
    "never-ending": "lambda w: Forever(w)",
    "300 views": "lambda w: {f'v{i}': w for i in range(300)}",
    "300 dims": "lambda w: {'w': w, 'ones': MeshView.from_shape((1,) * 300, "
                "tuple(f'd{i}' for i in range(300)))}",
    "hostile str key": "lambda w: {HostileStr('a'): w}",
    "int key": "lambda w: {1: w}",
    "not a view": "lambda w: {'a': 1}",
    "another universe": "lambda w: {'a': MeshView.from_shape(8, ('x',))}",
    "names change": "lambda w: _on_survivors(w, lambda: {'w': w.rename({'dp': 'd'})})",
    "views change": "lambda w: _on_survivors(w, lambda: {'other': w})",
    "raises on survivors": "lambda w: _on_survivors(w, lambda: 1 / 0)",
    "unprintable on survivors": "lambda w: _on_survivors(w, lambda: _raise(Unprintable()))",
    "never-ending on survivors": "lambda w: _on_survivors(w, lambda: Forever(w))",
}
STOPS: dict[str, tuple[str, type[BaseException]]] = {
    "exits": ("lambda w: _on_survivors(w, lambda: sys.exit(3))", SystemExit),
    "interrupted": ("lambda w: _on_survivors(w, lambda: _raise(KeyboardInterrupt()))",
                    KeyboardInterrupt),
}
_NS: dict[str, Any] = {
    "MeshView": MeshView, "Unprintable": Unprintable, "HostileStr": HostileStr,
    "Forever": Forever, "Triples": Triples, "RaisingItems": RaisingItems, "_raise": _raise,
    "_on_survivors": _on_survivors, "sys": sys, "HostileMapping": Junk.NS["HostileMapping"],
}
_FAILED = ("[5]", "[0, 7]", "[5, 5]", "[]", "[15]", "[16]", "np.array([1, 2])", "(3,)")
_WAYS = ("drop='dp'", "drop='tp'", "drop='cp'", "drop=0", "spares=[16]", "spares=[16, 17]",
         "spares=[]", "drop='zz'")


@given(plan=st.sampled_from(sorted(PLANS)), failed=st.sampled_from(_FAILED),
       way=st.sampled_from(_WAYS))
def test_survive_with_a_misbehaving_plan_returns_or_raises_a_mesh_error(
        plan: str, failed: str, way: str) -> None:
    """THE LAW for ``survive``'s plan, within a fixed bound on work."""
    fn = eval(PLANS[plan], _NS)
    where = f"survive(<{plan}>, {WORLD!r}, {failed}, {way})"
    args = eval(f"dict({way})")
    dead = eval(failed, {"np": np})
    with bounded(events=200_000, peak_bytes=16 << 20):
        ok, out = Call(where).run(lambda: survive(fn, WORLD, dead, **args))
    if ok:
        assert isinstance(out, mesh.Survival), where
        check_view(out.world, where)
        for view in out.views.values():
            check_view(view, where)


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_plan_that_stops_the_program_stops_it(stop: str) -> None:
    """A plan's ``SystemExit`` and ``KeyboardInterrupt`` are the caller's program asking to
    stop: ``survive`` lets them through as they are."""
    source, kind = STOPS[stop]
    with pytest.raises(kind):
        survive(eval(source, _NS), WORLD, [5], drop="dp")


# ---- the values blast and survive return -------------------------------------------------

_BLAST = mesh.blast({"w": WORLD, "dp_cp": WORLD.flatten(("dp", "cp"), "dp_cp")}, [5, 14])
_SURVIVAL = survive(eval(PLANS["fine"], _NS), WORLD, [5], drop="tp")
RECEIVERS: dict[str, Any] = {
    "Blast": _BLAST, "ViewBlast": _BLAST["w"], "DimBlast": _BLAST["w"]["tp"],
    "Survival": _SURVIVAL,
}
METHODS: dict[str, tuple[str, ...]] = {
    "Blast": ("__getitem__", "is_broken", "to_dict", "__str__"),
    "ViewBlast": ("__getitem__", "is_broken", "to_dict"),
    "DimBlast": ("to_dict",),
    "Survival": ("is_intact", "intact_groups", "new_groups", "group_counts", "to_dict"),
}
_PLAUSIBLE = {"view": st.sampled_from(("'w'", "'dp_cp'", "'zz'", "0", "np.array([])")),
              "name": st.sampled_from(("'w'", "'dp_cp'", "'zz'", "np.array(['w'])")),
              "dim": st.sampled_from(("'dp'", "'tp'", "'dp_cp'", "0", "-1", "5", "1.0")),
              "rank": st.sampled_from(("5", "6", "0", "15", "16", "-1", "2**70", "True"))}


def _source(param: str) -> st.SearchStrategy[str]:
    plausible = _PLAUSIBLE.get(param)
    if plausible is None:
        return _arg(param)
    return st.tuples(st.integers(0, 3), plausible, junk).map(
        lambda t: t[2] if t[0] == 3 else t[1])


TARGETS = [(owner, name) for owner, names in METHODS.items() for name in names]


@pytest.mark.parametrize(("owner", "name"), TARGETS)
@given(data=st.data())
def test_every_recovery_value_method_returns_or_raises_a_mesh_error(
        owner: str, name: str, data: st.DataObject) -> None:
    """THE LAW for the methods of ``Blast``, ``ViewBlast``, ``DimBlast`` and ``Survival``
    (``blast[key]`` with an array key raised NumPy's ``ValueError`` before issue 30)."""
    recv = RECEIVERS[owner]
    method = getattr(recv, name)
    params = [] if name == "__str__" else ["key"] if name == "__getitem__" else [
        p.name for p in inspect.signature(method).parameters.values()]
    n = data.draw(st.integers(0, len(params) + 1), label="n_args")
    srcs = [data.draw(_source(params[i] if i < len(params) else ""), label=f"arg {i}")
            for i in range(n)]
    args = [Junk(s).build() for s in srcs]
    where = f"{owner}.{name}({', '.join(srcs)})"
    if name == "__getitem__":
        if len(args) != 1:
            return
        Call(where).run(lambda: recv[args[0]])
        return
    try:
        inspect.signature(method).bind(*args)
    except TypeError:
        return  # Python's own binding, outside the law
    Call(where).run(lambda: method(*args))


# ---- rebind ------------------------------------------------------------------------------

def _mesh(rank: int, n: int = 16) -> DeviceMesh[Any]:
    return init_device_mesh("cpu", (2, 2, 4), mesh_dim_names=("dp", "cp", "tp"),
                            backend=FakeBackend(n, rank=rank))


_VIEWS = ("MeshView.from_shape((2, 8), ('dp', 'tp'))", "MeshView.from_shape((1, 8), ('dp', 'tp'))",
          "MeshView.from_shape((2**20,), ('w',))", "MeshView.from_shape((2**40, 2), ('a', 'b'))",
          "MeshView.from_ranks([[15, 1], [7, 3]], ('dp', 'tp'))",
          "MeshView.from_ranks([[8, 9], [10, 11]], ('dp', 'tp'))",
          "MeshView.from_shape(16, ('w',))['w']", "MeshView.from_ranks([2**62, 0], ('w',))")
_OVERRIDES = ("None", "{'tp': GroupOptions(tag='x')}", "{0: GroupOptions()}", "{'zz': 3}", "3",
              "{'tp': 'gloo'}")


@given(view=st.one_of(st.sampled_from(_VIEWS), junk),
       override=st.one_of(st.sampled_from(_OVERRIDES), junk),
       lost_first=st.booleans(), rank=st.sampled_from((0, 5, 9)))
def test_rebind_returns_a_mesh_or_raises_a_typed_error(view: str, override: str,
                                                       lost_first: bool, rank: int) -> None:
    """THE LAW for ``DeviceMesh.rebind(view, backend_override)``: a view that does not fit
    the backend (2**40 ranks on 16) is refused at once, within a fixed bound on work."""
    from backend import GroupOptions

    mesh_ = _mesh(rank)
    mesh_.get_all_groups()
    if lost_first:  # a loss before: views holding ranks 12..15 are refused
        mesh_ = mesh_.rebind(MeshView.from_ranks(list(range(12)), ("w",)))
    ns = {**Junk.NS, "GroupOptions": GroupOptions}
    v, o = eval(view, ns), eval(override, ns)
    where = f"rebind({view}, {override})"
    try:
        with bounded(events=50_000, peak_bytes=8 << 20):
            out = mesh_.rebind(v, o)
    except (BackendError, MeshError):
        return
    except Exception as e:
        e.add_note(f"law broken by: {where}")
        raise
    assert isinstance(out, DeviceMesh) and out.view == v, where


@st.composite
def losses(draw: st.DrawFn) -> tuple[int, list[tuple[str, list[int], Any]]]:
    """A rank of a 16-rank world and up to 3 losses: (way, failed ranks, dim or spares)."""
    rank = draw(st.integers(0, 15))
    steps = []
    for _ in range(draw(st.integers(1, 3))):
        failed = draw(st.lists(st.integers(0, 23).filter(lambda r: r != rank), min_size=1,
                               max_size=3, unique=True))
        if draw(st.booleans()):
            steps.append(("drop", failed, draw(st.sampled_from(("dp", "cp", "tp")))))
        else:
            steps.append(("substitute", failed, draw(st.permutations(range(16, 24)))))
    return rank, steps


def _line(tensor: Any, rank: int, k: int) -> tuple[int, ...]:
    """The ranks along axis ``k`` through ``rank``'s position in ``tensor``."""
    at = [int(i) for i in np.argwhere(tensor == rank)[0]]
    index = tuple(slice(None) if j == k else at[j] for j in range(tensor.ndim))
    return tuple(int(r) for r in tensor[index])


@given(losses())
def test_rebind_keeps_exactly_the_unchanged_groups_over_random_losses(
        case: tuple[int, list[tuple[str, list[int], Any]]]) -> None:
    """LAW over random losses (module docstring): lost ranks, members, kept objects."""
    rank, steps = case
    fb = FakeBackend(24, rank=rank)
    current = init_device_mesh("cpu", (2, 2, 4), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
    tensor = np.arange(16).reshape(2, 2, 4)
    gone: set[int] = set()
    had = {d: current.get_group(d) for d in current.view.names}
    for way, failed, how in steps:
        dead = [r for r in failed if r in tensor]
        if not dead:
            continue
        try:
            if way == "drop":
                k = current.view.index(how)
                view = drop(current.view, dead, how)
                cut = sorted({int(np.argwhere(tensor == r)[0][k]) for r in dead})
                after = np.delete(tensor, cut, axis=k)
            else:
                spares = [s for s in how if s not in gone and s not in tensor][:len(dead)]
                view = substitute(current.view, dead, spares)
                after = tensor.copy()
                for r, s in zip(sorted(dead), spares):
                    after[tensor == r] = s
        except SurvivalError:
            continue
        gone |= set(tensor.ravel().tolist()) - set(after.ravel().tolist())
        current, tensor = current.rebind(view), after
        assert fb.lost == gone - {rank}
        if rank not in tensor:
            assert current.get_coordinate() is None
            return
        for k, d in enumerate(current.view.names):
            group = current.get_group(d)
            assert group.ranks == _line(tensor, rank, k), (d, group.ranks)
            assert not set(group.ranks) & gone
            if had[d].ranks == group.ranks:
                assert group is had[d], f"{d}: an unchanged group was created again"
            had[d] = group
