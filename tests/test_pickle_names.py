"""Pickles name the public packages, never a private file.

Each public face (``layout``, ``mesh``, ``backend``) pins its exported classes' ``__module__``
to the package, as torch pins ``Placement.__module__``: a pickle then says ``mesh.Topology``,
not the file ``Topology`` is written in, so moving a private module breaks no saved value.
Pickles written before, naming the private paths, keep loading for one release.
"""

from __future__ import annotations

import pickle
import pickletools
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

import backend
import layout
import mesh
from layout import Layout
from mesh import MeshView, Topology

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PACKAGES = (layout, mesh, backend)
OURS = ("layout", "mesh", "backend")


def _classes(package: Any) -> dict[str, type]:
    return {n: v for n in package.__all__ if isinstance(v := getattr(package, n), type)}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_exported_class_is_named_by_its_package(package: Any) -> None:
    named = {n: c.__module__ for n, c in _classes(package).items()}
    assert named and named == dict.fromkeys(named, package.__name__)


# ---- one value of every exported class ----------------------------------------------------

def _mesh_values() -> list[object]:
    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    topo = Topology(8, 4)
    src = mesh.Sharding(view, [mesh.Shard(0), mesh.Replicate()], (8, 8))
    dst = mesh.Sharding(view, [mesh.Replicate(), mesh.Shard(1)], (8, 8))
    moves = mesh.reshard(src, dst, topo)
    state = mesh.reshard_state({"w": src}, {"w": dst}, topo, cap=1 << 20)
    hang = mesh.read_flight_records(sorted(map(str, (EXAMPLES / "hang").glob("fr_json_*.json"))),
                                    MeshView.from_shape((2, 2), ("dp", "tp")))
    blast = mesh.blast({"m": view}, [5])

    def plan(world: MeshView) -> dict[str, MeshView]:
        return {"m": world, "t": world["tp"]}

    errors = [cls("a message") for n, cls in _classes(mesh).items() if n.endswith("Error")]
    decided = mesh.recover(plan, view, [5], state={"w": src}, spares=[8])
    return [decided, decided.ways[0], decided.refused[0], decided.costs,
            view, view.ranks, view.family("tp"), topo, Topology.from_hosts(list("aabbb")),
            mesh.explain({"m": view}, topo), mesh.CommMemory(), mesh.Links(),
            mesh.compare({"a": view, "b": view["tp", "dp"]}, topo),
            mesh.Placement.find((2, 4), ("dp", "tp"), topo, traffic={"tp": 1 << 30}),
            blast, blast.views[0], blast.views[0].dims[0],
            mesh.survive(plan, view, [5], drop="dp"),
            src, mesh.Shard(0), mesh.StridedShard(0, 2), mesh.Replicate(), mesh.Partial("max"),
            moves, moves.receives(1)[0], state, state.messages(1)[0], hang, hang.findings[0],
            mesh.StuckRank(2, ("dp", (0, 2)), (0,)), *errors]


def _backend_values() -> list[object]:
    fake = backend.FakeBackend(8, 5)
    bound = backend.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fake)
    bound.get_group("tp")
    options = backend.GroupOptions(timeout=timedelta(seconds=5), tag="t")
    family = bound.view.family("tp")
    report = backend.check_spmd(4, _unguarded)
    errors = [backend.ExpectationError("m", level="host", dim="tp", group=(0, 1)),
              backend.MembersMissingError("m", rank=1, dim="tp", ranks=(0, 1), missing=(1,)),
              backend.StoreRecordError("k", "junk", writer=3),
              backend.PeerLostError("m", lost=(2,)),
              *[cls("a message") for n, cls in _classes(backend).items()
                if n.endswith("Error") and n not in _ERRORS_WITH_FIELDS]]
    recovered = backend.Recovered(bound, {"w": None}, {"total": 0.5}, 3)
    return [options, backend.GroupKey(family, options), fake.created[0], bound, recovered,
            backend.GroupSpec(family, options, "tp", 5, 8, backend.Plan.SPLIT),
            backend.Plan.SPLIT,
            backend.DiscoveryRecord("h", "h", 0, None, None, None),
            report, backend.Finding("desync", "text", "pattern", (1,)), *errors,
            backend.Reformed("dp", (0, 2, 4), (0, 4), backend.How.RECONFIGURED, ""),
            backend.How.ENDED,
            backend.Onward(bound.view, (options, options))]


_ERRORS_WITH_FIELDS = ("ExpectationError", "MembersMissingError", "StoreRecordError",
                       "PeerLostError")
NOT_VALUES = {  # exported classes that are not values: nothing to pickle
    "Backend": "a Protocol",
    "Binding": "holds a live backend; refuses to pickle (the DeviceMesh pickles instead)",
    "FakeBackend": "a backend: the state of one process (its group cache, a lock)",
    "C10dBackend": "a backend", "GlooBackend": "a backend", "NcclBackend": "a backend",
    "TorchFakeBackend": "a backend", "SpmdBackend": "a backend (check_spmd's recorder)",
    "FakeGroup": "a group a backend made (a communicator stand-in), not a saved value",
    "StateWork": "a move in progress (its thread, a lock), as torch's Work is",
}
NOT_PICKLED = {  # values that hold a function, so do not pickle (before this test either)
    "mesh.HangReport": "holds its rank -> host name function (a closure over the topology) "
                       "and the hang wing's private records (GroupState, PlanGroup)",
}


def _unguarded(rank_backend: Any) -> None:  # check_spmd's program: ranks 2, 3 raise
    backend.bind(MeshView.from_ranks([0, 1], ("pair",)), rank_backend).get_group("pair")


def _values() -> list[tuple[str, object]]:
    """``(package.Class, value)``: every value built, each under its class's public name."""
    layouts = [Layout((2, 4)), *[cls("a message") for n, cls in _classes(layout).items()
                                 if n.endswith("Error")]]
    return [(f"{type(v).__module__}.{type(v).__qualname__}", v)
            for v in [*layouts, *_mesh_values(), *_backend_values()]]


def _globals_named(data: bytes) -> list[str]:
    """The ``module.name`` of every GLOBAL and STACK_GLOBAL opcode of a pickle (the latter's
    two strings are the last two pushed before it, memo fetches followed)."""
    found: list[str] = []
    strings: list[str | None] = []
    memo: dict[int, str | None] = {}
    last: str | None = None
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.append(str(arg).replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            found.append(f"{strings[-2]}.{strings[-1]}")
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            last = str(arg)
            strings.append(last)
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            last = memo.get(int(arg))
            strings.append(last)
        elif op.name == "MEMOIZE":
            memo[len(memo)] = last
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = last
        else:
            last = None
    return found


def _same(a: object, b: object) -> bool:
    if isinstance(a, BaseException):
        return type(a) is type(b) and str(a) == str(b) and vars(a) == vars(b)
    if isinstance(a, backend.DeviceMesh):
        return a == b and a.get_coordinate() == b.get_coordinate()
    if a == b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):  # values compared by identity inside
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    # compared by identity (a Reshard, a FakeGroup, a record holding one): field by field
    return attrs.has(type(a)) and type(a) is type(b) and all(
        _same(x, y) for x, y in zip(attrs.astuple(a, recurse=False),
                                    attrs.astuple(b, recurse=False)))


def test_one_value_of_every_exported_class_is_built() -> None:
    """The pickling test below covers every exported class but the listed non-values."""
    built = {type(v) for _, v in _values()}
    missing = [f"{p.__name__}.{n}" for p in PACKAGES for n, c in _classes(p).items()
               if c not in built and n not in NOT_VALUES]
    assert missing == []


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_every_exported_value_pickles_by_public_names_and_round_trips(protocol: int) -> None:
    private: dict[str, list[str]] = {}
    for name, value in _values():
        if name in NOT_PICKLED:
            continue
        data = pickle.dumps(value, protocol=protocol)
        named = _globals_named(data)
        assert named, name
        if bad := [g for g in named if g.split(".")[0] in OURS and "._" in g]:
            private[name] = bad
        assert _same(pickle.loads(data), value), name
    assert private == {}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_opcode_reader_sees_a_private_module(protocol: int) -> None:
    """A function keeps its file's name (only classes are pinned): the reader must see it."""
    data = pickle.dumps([layout.as_int, layout.as_int], protocol=protocol)
    assert _globals_named(data) == ["layout._door.as_int"]


# ---- pickles naming the old private paths --------------------------------------------------

OLD_PATHS: list[tuple[str, str, Callable[[], object]]] = [
    ("mesh._plan._topology", "Topology", lambda: Topology(8, 4)),
    ("mesh._core._view", "MeshView", lambda: MeshView.from_shape((2, 4), ("dp", "tp"))),
    ("layout._layout", "Layout", lambda: Layout((2, 4))),
    ("mesh._tensor._sharding", "Sharding",
     lambda: mesh.Sharding(MeshView.from_shape((2,), ("dp",)), [mesh.Shard(0)], (4,))),
]


@pytest.mark.parametrize(("module", "name", "make"), OLD_PATHS, ids=[m for m, _, _ in OLD_PATHS])
def test_a_pickle_naming_the_old_private_path_still_loads(
        module: str, name: str, make: Callable[[], object]) -> None:
    value = make()
    public = f"{type(value).__module__}\n{name}\n".encode()
    data = pickle.dumps(value, protocol=0)
    assert public in data
    old = data.replace(public, f"{module}\n{name}\n".encode())
    assert old != data and pickle.loads(old) == value


def test_a_pickle_of_the_release_before_naming_the_plan_wings_rebuild_still_loads() -> None:
    """That release pickled a topology's fields for ``mesh._plan._topology._rebuild``."""
    old = b"cmesh._plan._topology\n_rebuild\n(I8\nI4\nI2\nN(Va\nVb\nttR."
    assert pickle.loads(old) == Topology.from_hosts(list("aaaabbbb"), hosts_per_domain=2)
    assert pickle.loads(old.replace(b"(Va\nVb\nt", b"N")) == Topology(8, 4, hosts_per_domain=2)
