"""The facade mesh under ``torch.compile``, as torch's opaque-type contract asks: every
member torch registers for ``DeviceMesh`` exists on every facade mesh, reading them is cheap,
has no side effect beyond what torch's eager mesh already did (creating this mesh's groups),
and returns the same value each time; a compiled function neither rebuilds a mesh nor asks
the backend again per call, guards in constant size at any world, and recompiles no more
often than torch's when a new but equal mesh is passed.

One process with ``TorchFakeBackend`` (torch's fake process group), backend ``eager`` unless
said.  (``tests/test_compile_port.py`` ports torch's own compile tests onto both meshes.)
"""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.distributed._functional_collectives as funcol
from torch._dynamo.testing import CompileCounter
from torch._library.fake_class_registry import maybe_to_fake_obj
from torch._library.opaque_object import get_opaque_obj_info
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from backend import DeviceMesh, RankLostError, TorchFakeBackend, init_device_mesh

MEMBERS = sorted(get_opaque_obj_info(TorchDeviceMesh).members)  # type: ignore[union-attr]


@pytest.fixture
def world() -> Iterator[TorchFakeBackend]:
    backend = TorchFakeBackend(world_size=8, rank=3)
    torch._dynamo.reset()
    yield backend
    torch._dynamo.reset()
    backend.shutdown()


def _meshes(mesh: Any) -> dict[str, Any]:
    """A root and what derives from it, every way torch code meets one."""
    return {"root": mesh, "slice": mesh["tp"], "pair": mesh["dp", "tp"],
            "flatten": mesh["dp", "cp"]._flatten("dp_cp"),
            "unflatten": mesh["tp"]._unflatten(0, (1, 2), ("a", "b")),
            "from_group": DeviceMesh.from_group(mesh.get_group("tp"), "cpu",
                                                mesh_dim_names=("tp",))}


def test_every_registered_member_exists_on_every_facade_mesh(world: TorchFakeBackend) -> None:
    """Torch's registration (read from the installed torch, not a list of ours) names members
    that tracing reads on the real object; a missing one is a hard error under compile."""
    assert "_hash" in MEMBERS and "get_group" in MEMBERS and "_pg_registry" in MEMBERS
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    for name, m in _meshes(mesh).items():
        missing = [member for member in MEMBERS if not hasattr(m, member)]
        assert missing == [], name


def test_reading_every_member_creates_only_the_meshs_groups_and_gives_the_same_values(
        world: TorchFakeBackend) -> None:
    """What ``maybe_to_fake_obj`` (every trace) reads: the slice's one group is created, on
    the first read only; a second read returns the very same objects."""
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    tp = mesh["tp"]
    assert [r.dim for r in world.created] == []
    first = maybe_to_fake_obj(FakeTensorMode(), tp)
    assert [r.dim for r in world.created] == ["tp"]
    values = {m: getattr(tp, m) for m in MEMBERS if not callable(getattr(tp, m))}
    maybe_to_fake_obj(FakeTensorMode(), tp)
    assert [r.dim for r in world.created] == ["tp"]
    again = {m: getattr(tp, m) for m in values}
    assert all(again[m] is values[m] for m in values), [m for m in values
                                                        if again[m] is not values[m]]
    assert first.real_obj is tp


def test_torchs_private_reads_are_torchs_values(world: TorchFakeBackend) -> None:
    """Against torch's own mesh for the same program (its values, not ours)."""
    ours = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    theirs = torch_init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    a, b = ours["dp", "tp"], theirs["dp", "tp"]
    assert a._layout == b._layout and a._flatten_rank_map == b._flatten_rank_map
    assert torch.equal(a._rank_map, b._rank_map) and a._rank_map.dtype == b._rank_map.dtype
    assert (a._device_type, a._mesh_dim_names, a._thread_id, a._coordinate_on_dim) == \
        (b._device_type, b._mesh_dim_names, b._thread_id, b._coordinate_on_dim)
    assert a._hash == hash(b) and hash(a) == hash(b) and a == b
    assert a._get_root_mesh() is ours and b._get_root_mesh() is theirs
    assert a._root_mesh is ours and ours._root_mesh is None
    assert [a._get_root_mesh_dim() for a in (ours["cp"], ours["tp"])] == [1, 2]
    flat = ours["dp", "cp"]._flatten("dp_cp")
    torch_flat = theirs["dp", "cp"]._flatten("dp_cp")
    assert list(ours._flatten_mapping) == list(theirs._flatten_mapping) == ["dp_cp"]
    assert ours._flatten_mapping["dp_cp"] is flat and flat._layout == torch_flat._layout
    assert ours["tp"]._flatten_mapping == {} == theirs["tp"]._flatten_mapping
    names = ours._dim_group_names
    assert set(names) <= set(ours._pg_registry) and ours["tp"]._pg_registry == {}
    assert all(ours._pg_registry[n].group_name == n for n in names)


def test_the_flat_rank_map_is_constant_size_and_compares_like_torchs_tuple(
        world: TorchFakeBackend) -> None:
    """``_flatten_rank_map`` is what torch's guard compares at every call: here one shared
    object per universe, equal to torch's tuple, hashing as it does."""
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    again = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    flat = mesh._flatten_rank_map
    assert flat is again._flatten_rank_map is mesh["tp"]._flatten_rank_map
    assert flat == tuple(range(8)) and tuple(range(8)) == flat
    assert hash(flat) == hash(tuple(range(8)))
    assert flat != tuple(range(7)) and list(flat) == list(range(8)) and flat[-1] == 7
    assert copy.deepcopy(flat) is flat and pickle.loads(pickle.dumps(flat)) == flat
    assert sys.getsizeof(flat) < 100


def _compiled(fn: Callable[..., Any], backend: Any = "eager") -> Any:
    return torch.compile(fn, backend=backend, fullgraph=True)


def test_a_compiled_step_neither_rebuilds_a_mesh_nor_asks_the_backend_again(
        world: TorchFakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """``m["tp"]`` runs at every call of an ``eager``-backend graph (as with torch's mesh):
    it is a memo hit; ``_dim_group_names`` is read once, then it is a plain attribute."""
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    made, asked = [], []
    real_made, real_get = DeviceMesh._trusted, type(world).get_group
    monkeypatch.setattr(DeviceMesh, "_trusted",
                        classmethod(lambda cls, *a: made.append(a) or real_made(*a)))
    monkeypatch.setattr(type(world), "get_group",
                        lambda self, *a, **k: asked.append(a) or real_get(self, *a, **k))
    step = _compiled(lambda x, m: funcol.all_reduce(x * m["tp"].size(), "sum", (m, 1)))
    x = torch.ones(4)
    step(x, mesh)
    made.clear()
    asked.clear()
    for _ in range(20):
        step(x, mesh)
    assert made == [] and asked == []


def _graphs(fn: Callable[..., Any], *calls: tuple[Any, ...]) -> int:
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    for args in calls:
        compiled(*args)
    return counter.frame_count


@pytest.mark.parametrize("case", ["size", "coordinate", "funcol", "group"])
def test_a_new_but_equal_mesh_recompiles_no_more_often_than_torchs(
        world: TorchFakeBackend, case: str) -> None:
    fns = {"size": lambda x, m: x * m.size(0) + m.get_local_rank("tp"),
           "coordinate": lambda x, m: x * m.get_coordinate()[1],
           "funcol": lambda x, m: funcol.all_reduce(x, "sum", (m, 1)),
           "group": lambda x, m: funcol.all_reduce(x, "sum", m.get_group("tp"))}
    x = torch.ones(4)
    counts = {}
    for name, init in (("torch", torch_init_device_mesh), ("ours", init_device_mesh)):
        first = init("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        second = init("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        torch._dynamo.reset()
        counts[name] = _graphs(fns[case], (x, first), (x, second), (x, first))
    assert counts["ours"] <= counts["torch"], counts
    assert counts["ours"] == 1


def test_a_dtensor_redistribute_compiles_into_one_graph_on_every_backend(
        world: TorchFakeBackend) -> None:
    """The six probes of the issue, condensed to the hardest: DTensor over a 2-D facade mesh,
    under ``eager``, ``aot_eager`` and ``inductor``, with the graph and break counts of
    torch's mesh."""
    def step(x: torch.Tensor, m: Any) -> torch.Tensor:
        d = DTensor.from_local(x, m, [Shard(0), Shard(0)])
        return d.redistribute(m, [Replicate(), Replicate()]).to_local() * m.size(1)

    x = torch.ones(4)
    for init in (torch_init_device_mesh, init_device_mesh):
        m = init("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        explained = torch._dynamo.explain(step)(x, m)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), init
        for backend in ("eager", "aot_eager", "inductor"):
            torch._dynamo.reset()
            assert _compiled(step, backend)(x, m).shape == (32,)  # 4 rows x 8 ranks


def test_get_group_and_flatten_under_compile_run_torchs_bodies_over_our_state(
        world: TorchFakeBackend) -> None:
    """``get_group`` (a flattened name too) and ``_flatten`` are inlined by the trace: they
    find groups through the root's ``_pg_registry`` and list the flatten on the root."""
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    mesh["dp", "cp"]._flatten("dp_cp")

    def step(x: torch.Tensor, m: Any) -> torch.Tensor:
        y = funcol.all_reduce(x, "sum", m.get_group("dp_cp"))
        return funcol.all_reduce(y, "sum", m["tp"].get_group())

    assert _graphs(step, (torch.ones(2), mesh)) == 1
    flat_in_graph = _compiled(lambda x, m: x * m["cp", "tp"]._flatten("cp_tp").size())
    assert flat_in_graph(torch.ones(2), mesh).tolist() == [4.0, 4.0]
    assert mesh._flatten_mapping["cp_tp"].get_group() is mesh.get_group("cp_tp")


def test_eager_get_group_and_flatten_run_our_code_with_nothing_added_for_the_compiler(
        world: TorchFakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34, item 10: what compile needs costs nothing eager.  A facade mesh's
    ``get_group`` and ``_flatten`` are the plain facade's code (no wrapper frame, no "are we
    tracing" check: an eager call never asks ``torch.compiler.is_compiling``), and name
    torch's bodies as what the trace inlines; the torch-free mesh's own methods name none."""
    from backend._facade import TorchFacadeMesh

    assert TorchFacadeMesh.get_group.__code__ is DeviceMesh.get_group.__code__
    assert TorchFacadeMesh._flatten.__code__ is DeviceMesh.flatten.__code__
    assert TorchFacadeMesh.get_group._torchdynamo_inline is TorchDeviceMesh.get_group
    assert TorchFacadeMesh._flatten._torchdynamo_inline is TorchDeviceMesh._flatten
    assert not hasattr(DeviceMesh.get_group, "_torchdynamo_inline")
    assert not hasattr(DeviceMesh.flatten, "_torchdynamo_inline")
    asked: list[int] = []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: asked.append(1) or False)
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    flat = mesh["dp", "cp"]._flatten("dp_cp")
    assert mesh.get_group("dp_cp") is flat.get_group() and asked == []


def test_torchs_tracer_still_follows_a_functions_torchdynamo_inline() -> None:
    """The attribute the facade's ``traced_as`` sets is read where torch's tracer takes a
    function to inline (a function found on an object's class, and any function it calls)."""
    import inspect

    from torch._dynamo.variables import functions, user_defined

    assert "_torchdynamo_inline" in inspect.getsource(functions.UserFunctionVariable.__init__)
    assert "_torchdynamo_inline" in inspect.getsource(user_defined.UserDefinedObjectVariable)


def test_after_a_loss_torchs_reads_forget_the_ended_groups(world: TorchFakeBackend) -> None:
    """``rebind`` ends the groups holding a lost rank: the old mesh's names and its root's
    registry forget them (a compiled function cannot find an ended group), the new root
    lists its own, and the kept tp group keeps its name."""
    from mesh import drop

    mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
    dp_name, tp_name = mesh._dim_group_names
    after = mesh.rebind(drop(mesh.view, [5], "dp"))
    assert mesh._pg_registry == {}
    with pytest.raises(RankLostError):
        _ = mesh._dim_group_names
    new_dp, kept_tp = after._dim_group_names
    assert kept_tp == tp_name and new_dp != dp_name
    assert after._get_root_mesh() is after and set(after._pg_registry) == {new_dp, kept_tp}


def test_a_pickled_mesh_keeps_its_root_and_the_roots_flattens(world: TorchFakeBackend) -> None:
    """As torch's pickles keep ``_root_mesh`` and the root's ``_flatten_mapping``."""
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    flat = mesh["dp", "cp"]._flatten("dp_cp")
    tp = pickle.loads(pickle.dumps(mesh["tp"]))
    root = tp._get_root_mesh()
    assert tp == mesh["tp"] and root == mesh and root is not tp and root._root_mesh is None
    assert list(root._flatten_mapping) == ["dp_cp"] and root["dp_cp"] == flat
    assert root._flatten_mapping["dp_cp"]._get_root_mesh() is root
    assert tp.get_group() is mesh.get_group("tp")  # the same backend's groups
