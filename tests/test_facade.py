"""The DeviceMesh facade's own semantics: flattened names per universe, pickling and
rebinding, the current mesh per context, from_group, TorchFakeBackend, options by name.

Expected groups are written out by hand for (dp, cp, tp) = (2, 2, 2) over 8 ranks: dp
groups are {r, r+4}, cp groups {r, r+2}, tp groups {r, r+1} (row-major).
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from backend import (
    BackendConfigError,
    BackendError,
    DeviceMesh,
    FakeBackend,
    GroupOptions,
    bind,
    current_mesh,
    init_device_mesh,
)
from mesh import MeshView, OverlapError


def mesh3(rank: int = 5, **kw: Any) -> DeviceMesh[Any]:
    return init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"),
                            backend=FakeBackend(8, rank), **kw)


# ---- flattened names are remembered per universe ---------------------------------------------

def test_a_flattened_name_works_on_the_root_and_its_slices() -> None:
    mesh = mesh3()
    flat = mesh["dp", "cp"]._flatten("dp_cp")
    assert flat.get_group().ranks == (1, 3, 5, 7)
    assert mesh["dp_cp"] is flat and mesh["tp"]["dp_cp"] is flat
    assert mesh["dp_cp", "tp"].mesh_dim_names == ("dp_cp", "tp")
    assert mesh["dp_cp", "tp"].get_group("tp").ranks == (4, 5)
    assert mesh.get_group("dp_cp") is flat.get_group()
    assert mesh["tp"].get_group("dp_cp") is flat.get_group()
    assert mesh.get_local_rank("dp_cp") == 2


def test_flattening_the_same_dims_into_the_same_name_returns_the_same_mesh() -> None:
    mesh = mesh3()
    first = mesh["dp", "cp"]._flatten("dp_cp")
    fb_groups = len(mesh.backend.created)  # type: ignore[attr-defined]
    assert mesh["dp", "cp"]._flatten("dp_cp") is first
    assert len(mesh.backend.created) == fb_groups  # type: ignore[attr-defined]


@pytest.mark.parametrize(("make", "message"), [
    (lambda m: m._flatten("dp"), r"dp already exists"),
    (lambda m: m["cp", "tp"]._flatten("dp"), r"dp already exists"),
    (lambda m: (m["dp", "cp"]._flatten("x"), m["cp", "tp"]._flatten("x")),
     r"Flatten mesh with mesh_dim_name x has been created before"),
])
def test_a_taken_flatten_name_is_refused_with_a_value_error(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(mesh3())


def test_a_one_dim_mesh_flattened_into_its_own_name_is_itself() -> None:
    mesh = mesh3()
    assert mesh["tp"]._flatten() is mesh["tp"]
    assert mesh["tp"]._flatten("tp") is mesh["tp"]


def test_slicing_an_original_and_a_flattened_dim_that_overlap_is_refused() -> None:
    mesh = mesh3()
    mesh["dp", "cp"]._flatten("dp_cp")
    with pytest.raises(OverlapError) as info:
        mesh["dp_cp", "dp"]
    assert isinstance(info.value, RuntimeError)  # torch raises RuntimeError for overlaps


# ---- pickling: the view, options and device type; rebinding on load ---------------------------

def test_pickle_and_deepcopy_round_trip_to_an_equal_mesh_sharing_the_groups() -> None:
    mesh = mesh3(backend_override={"dp": GroupOptions(tag="t")})
    tp = mesh.get_group("tp")
    for copied in (pickle.loads(pickle.dumps(mesh)), copy.deepcopy(mesh)):
        assert copied == mesh and hash(copied) == hash(mesh)
        assert copied.get_group("tp") is tp
        assert copied.options == mesh.options and copied.backend is mesh.backend
    flat = mesh["dp", "tp"]._flatten("dp_tp")
    assert pickle.loads(pickle.dumps(flat)) == flat


def test_a_pickle_holds_no_backend_or_group() -> None:
    data = pickle.dumps(mesh3())
    assert b"FakeBackend" not in data and b"FakeGroup" not in data


def test_unpickling_rebinds_to_the_loading_process_backend() -> None:
    data = pickle.dumps(mesh3(rank=5))
    code = textwrap.dedent(f"""
        import pickle
        from backend import FakeBackend, bind
        from mesh import MeshView
        bind(MeshView.from_shape(8, ("w",)), FakeBackend(8, rank=2))  # this process's backend
        mesh = pickle.loads({data!r})
        print(mesh.get_rank(), mesh.get_coordinate(), mesh.get_group("tp").ranks)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split("\n")[0] == "2 (0, 1, 0) (2, 3)"


# ---- the current mesh, per context ------------------------------------------------------------

def test_the_current_mesh_is_per_asyncio_task() -> None:
    a, b = mesh3(), mesh3()["tp"]
    seen: dict[str, Any] = {}

    async def task(name: str, mesh: DeviceMesh[Any], other_entered: asyncio.Event,
                   entered: asyncio.Event) -> None:
        with mesh:
            entered.set()
            await other_entered.wait()  # both tasks are inside their `with` now
            seen[name] = current_mesh()

    async def main() -> None:
        ea, eb = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task("a", a, eb, ea), task("b", b, ea, eb))

    asyncio.run(main())
    assert seen == {"a": a, "b": b}
    assert current_mesh() is None


# ---- from_group ------------------------------------------------------------------------------

def test_from_group_adopts_the_group_for_its_family() -> None:
    fb = FakeBackend(8, rank=5)
    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
    tp = mesh.get_group("tp")
    one = DeviceMesh.from_group(tp, "cpu", backend=fb)
    assert one.mesh_dim_names is None and one.mesh.tolist() == [4, 5]
    assert one.get_group() is tp
    with pytest.raises(ValueError, match=r"Invalid mesh \[4, 6\] for ProcessGroup with ranks"):
        DeviceMesh.from_group(tp, "cpu", [4, 6], backend=fb)


def test_from_group_of_several_groups_needs_a_mesh_and_names() -> None:
    fb = FakeBackend(8, rank=5)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
    groups = mesh.get_all_groups()
    with pytest.raises(ValueError, match="Must pass mesh"):
        DeviceMesh.from_group(groups, "cpu", backend=fb)
    with pytest.raises(ValueError, match="Must pass mesh_dim_names"):
        DeviceMesh.from_group(groups, "cpu", [[0, 1, 2, 3], [4, 5, 6, 7]], backend=fb)
    with pytest.raises(ValueError, match="ndim equal to number of ProcessGroups"):
        DeviceMesh.from_group(groups, "cpu", list(range(8)), mesh_dim_names=("a",), backend=fb)
    again = DeviceMesh.from_group(groups, "cpu", [[0, 1, 2, 3], [4, 5, 6, 7]],
                                  mesh_dim_names=("dp", "tp"), backend=fb)
    assert again == mesh and again.get_all_groups() == groups


# ---- the torch-style constructor and smaller meshes --------------------------------------------

def test_the_explicit_tensor_constructor_equals_init_device_mesh() -> None:
    torch = pytest.importorskip("torch")
    fb = FakeBackend(8, rank=5)
    ref = init_device_mesh("cpu", (2, 4), mesh_dim_names=("DP", "TP"), backend=fb)
    made = DeviceMesh("cpu", torch.arange(8).view(2, 4), mesh_dim_names=("DP", "TP"), backend=fb)
    assert made == ref and made.get_group("TP") is ref.get_group("TP")
    assert DeviceMesh("cpu", [0, 1, 2, 3], backend=FakeBackend(8, rank=1)).mesh.tolist() == \
        [0, 1, 2, 3]


def test_a_device_type_with_an_index_is_refused_like_torch() -> None:
    with pytest.raises(RuntimeError, match="Device type with index is not supported"):
        init_device_mesh("cpu:0", (8,), backend=FakeBackend(8, rank=0))


def test_duplicate_names_and_a_length_mismatch_are_runtime_errors_as_in_torch() -> None:
    with pytest.raises(RuntimeError, match="'dp' appears twice"):
        init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "dp"), backend=FakeBackend(8, 0))
    with pytest.raises(RuntimeError, match="mesh_shape and mesh_dim_names should have same"):
        init_device_mesh("cpu", (8,), mesh_dim_names=("dp", "tp"), backend=FakeBackend(8, 0))


def test_list_keys_slice_like_tuples() -> None:
    mesh = mesh3()
    assert mesh[["cp", "tp"]] == mesh["cp", "tp"]
    assert mesh["dp", "cp", "tp"] is mesh


def test_concatenate_keeps_each_dims_options() -> None:
    t = GroupOptions(tag="x")
    mesh = mesh3(backend_override={"tp": t})
    joined = DeviceMesh._concatenate([mesh["dp"], mesh["tp"]])
    assert joined == mesh["dp", "tp"] and joined.options == {"dp": GroupOptions(), "tp": t}
    with pytest.raises(RuntimeError):
        DeviceMesh._concatenate([mesh["dp"], mesh["dp", "cp"]])


def test_binding_a_view_over_another_world_is_refused() -> None:
    with pytest.raises(BackendConfigError, match="bigger than default world size 4"):
        bind(MeshView.from_shape(8, ("w",)), FakeBackend(4, rank=0))


# ---- TorchFakeBackend ------------------------------------------------------------------------

def test_torch_fake_backend_gives_real_process_groups_in_one_process() -> None:
    code = textwrap.dedent("""
        import torch, torch.distributed as dist
        from backend import TorchFakeBackend, init_device_mesh
        tb = TorchFakeBackend(8, rank=5)
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))  # binds to it
        g = mesh.get_group("tp")
        t = torch.ones(2)
        dist.all_reduce(t, group=g)  # returns at once: the fake backend moves no data
        print(isinstance(g, dist.ProcessGroup), dist.get_process_group_ranks(g), g.rank(),
              mesh.backend is tb, mesh.get_group("dp").size())
        tb.shutdown()
        print(dist.is_initialized())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["True [4, 5, 6, 7] 1 True 2", "False"]


def test_shutdown_ends_created_groups_but_leaves_adopted_ones_to_their_maker() -> None:
    """``from_group``'s groups are the caller's (torch's DeviceMesh never owns them): the
    backend's ``shutdown()`` forgets them without destroying them, and does not list them
    as created."""
    code = textwrap.dedent("""
        import torch.distributed as dist
        from backend import DeviceMesh, TorchFakeBackend, init_device_mesh
        tb = TorchFakeBackend(8, rank=5)
        mine = dist.new_group([4, 5, 6, 7])
        adopted = DeviceMesh.from_group(mine, "cpu", backend=tb)
        made = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=tb)
        dp = made.get_group("dp")
        created = [r.group for r in tb.created]
        print(adopted.get_group() is mine, made.get_group("tp") is not mine,
              mine in created, dp in created)
        tb._owns_default = False  # keep the world up to look at the groups after shutdown
        tb.shutdown()
        print(dist.get_process_group_ranks(mine))
        try:
            dist.get_process_group_ranks(dp)
            print("dp alive")
        except Exception:
            print("dp destroyed")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split("\n")[:3] == ["True True False True", "[4, 5, 6, 7]", "dp destroyed"]


def test_a_fake_backend_gets_torch_groups_from_a_torch_fake_backend_and_stays_bound() -> None:
    code = textwrap.dedent("""
        import torch.distributed as dist
        from backend import FakeBackend, init_device_mesh
        from backend._core import _registry
        fb = FakeBackend(8, rank=5)
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
        g = fb.torch_group(mesh.view, "tp")
        print(isinstance(g, dist.ProcessGroup), dist.get_process_group_ranks(g),
              fb.torch_group(mesh.view, "tp") is g, len(fb.created),
              _registry.process_backend("cpu") is fb)
        fb.shutdown()
        print(dist.is_initialized())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["True [4, 5, 6, 7] True 0 True", "False"]


def test_a_mesh_is_its_binding_value() -> None:
    """Equality, hash and pickling come from the binding: a mesh compares its binding's
    mesh_key (view, backend by identity, device type, naming), not the options (as torch
    ignores backend_override); bindings themselves compare every field."""
    fb = FakeBackend(8, rank=5)
    a = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
    b = bind(MeshView.from_shape((2, 4), ("dp", "tp")), fb,
             backend_override={"tp": GroupOptions(tag="x")})
    assert a.binding.options != b.binding.options
    assert a == b and hash(a) == hash(b) and a.binding.mesh_key == b.binding.mesh_key
    assert a.binding != b.binding
    again = pickle.loads(pickle.dumps(b))  # rebinds to the process's backend: fb
    assert again == b and again.options == {"dp": GroupOptions(), "tp": GroupOptions(tag="x")}
    assert a != init_device_mesh("cpu", (2, 4), backend=fb)  # unnamed
    assert a != init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"),
                                 backend=FakeBackend(8, rank=5))  # another backend


def test_every_dim_argument_resolves_the_same_way_flattened_names_included() -> None:
    mesh = mesh3()
    mesh["dp", "cp"]._flatten("dp_cp")
    for dim in ("dp_cp",):
        assert mesh.size(dim) == 4 and mesh.get_local_rank(dim) == 2
        assert mesh.get_group(dim).ranks == (1, 3, 5, 7) and mesh[dim].size() == 4
    for call in (mesh.size, mesh.get_group, mesh.get_local_rank, mesh.__getitem__):
        with pytest.raises(KeyError, match="nope"):
            call("nope")


def test_the_mesh_tensor_is_a_copy_the_caller_may_write() -> None:
    torch = pytest.importorskip("torch")
    fb = FakeBackend(8, rank=5)
    for mesh in (DeviceMesh("cpu", torch.tensor([[7, 6, 5, 4], [3, 2, 1, 0]]), backend=fb),
                 init_device_mesh("cpu", (2, 4), backend=fb)):
        before = mesh.mesh.tolist()
        mesh.mesh.fill_(-1)
        assert mesh.mesh.tolist() == before and mesh.mesh.dtype == torch.int32


@pytest.mark.parametrize("bad", [2.0, 1.0, True, False, "x"])
def test_a_dim_that_is_not_a_name_or_an_int_is_refused_even_after_its_int_was_used(
        bad: object) -> None:
    """``2.0 == 2`` and ``True == 1`` hash alike: the per-mesh caches must not answer them
    (they did: np.float64(2.0) was dim 2, True was dim 1)."""
    import numpy as np

    from mesh import MeshError

    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("a", "b", "c"),
                            backend=FakeBackend(8, 5))
    for k in range(3):  # fill the caches with the int keys first
        mesh.get_group(k), mesh.get_local_rank(k), mesh.size(k)
    for key in (bad, np.float64(bad) if not isinstance(bad, str) else bad):
        for call in (mesh.get_group, mesh.get_local_rank, mesh.size, mesh.__getitem__):
            with pytest.raises((MeshError, BackendError)):
                call(key)


def test_negative_and_numpy_integer_dims_count_from_the_end_as_torchs_list_does() -> None:
    import numpy as np

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=FakeBackend(8, 5))
    assert mesh.get_group(np.int32(-1)) is mesh.get_group("tp")
    assert mesh.size(-1) == 4 and mesh.get_local_rank(np.int64(-2)) == 1


def test_every_value_pickles_as_a_call_of_its_constructor() -> None:
    """The choice for pickles: ours re-validate (no BUILD opcode setting fields directly);
    a pickle forged by hand is trusted input, as in all of Python (docs/views.md)."""
    import pickletools
    from datetime import timedelta

    from layout import Layout
    from mesh import Family, RankMap, Topology

    values = [Layout((2, 4)), RankMap(2, [1, 0]), MeshView.from_shape((2, 2), ("a", "b")),
              Topology(8, 4), GroupOptions(timeout=timedelta(seconds=5), tag="t"),
              Family(RankMap(4), Layout(2, 2))]
    for value in values:
        data = pickle.dumps(value)
        ops = {op.name for op, _, _ in pickletools.genops(data)}
        assert "BUILD" not in ops and "REDUCE" in ops, type(value)
        assert pickle.loads(data) == value
    with pytest.raises(BackendConfigError):  # a corrupted field is checked on load
        pickle.loads(pickle.dumps(GroupOptions(tag="t"), protocol=0).replace(b"Vt\n", b"V\n"))


@pytest.mark.parametrize("call", [
    "init_device_mesh('cpu', (2, 4), mesh_dim_names={'dp', 'tp'}, backend=fb)",
    "init_device_mesh('cpu', {2, 4}, backend=fb)",
    "init_device_mesh('cpu', (2, 4), mesh_dim_names=iter(('dp', 'tp')), backend=fb)",
    "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names={'a', 'b'}, backend=fb)",
    "DeviceMesh.from_group([g], 'cpu', mesh_dim_names={'w'}, backend=fb)",
    "m3.flatten('x', dims={'dp', 'cp'})",
    "m8.unflatten('w', {2, 4}, ('a', 'b'))",
    "m8.unflatten('w', (2, 4), {'a', 'b'})",
    "DeviceMesh._concatenate({m3['dp'], m3['tp']})",
])
def test_unordered_input_is_refused_at_every_facade_entry(call: str) -> None:
    """A set's order can differ between processes (under torchrun, rank 0 got tp = (0, 2)
    while ranks 2-3 got (2, 3)): refused with the mesh layer's typed error, before any
    conversion."""
    from mesh import MeshTypeError

    fb = FakeBackend(8, 0)
    m3 = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"), backend=fb)
    m8 = init_device_mesh("cpu", (8,), mesh_dim_names=("w",), backend=fb)
    g = m8.get_group("w")
    ns = {"init_device_mesh": init_device_mesh, "DeviceMesh": DeviceMesh, "fb": fb, "m3": m3,
          "m8": m8, "g": g}
    with pytest.raises(MeshTypeError, match="ordered sequence"):
        eval(call, ns)


def test_unpickling_without_a_backend_says_it_comes_from_unpickling_and_what_to_start() -> None:
    """In a fresh process with no backend and no torchrun environment, loading a pickled mesh
    names unpickling and the backends to start (it said only "RANK is not set")."""
    data = pickle.dumps(mesh3())
    code = textwrap.dedent("""
        import os, pickle, sys
        for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(v, None)
        try:
            pickle.loads(sys.stdin.buffer.read())
        except Exception as e:
            print(type(e).__name__, e)
    """)
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                         timeout=120, check=False)
    text = out.stdout.decode()
    assert text.startswith("BackendConfigError unpickling a DeviceMesh"), text + out.stderr.decode()
    assert "TorchFakeBackend(world_size, rank)" in text and "RANK" in text


def test_a_jobs_meshes_read_their_coordinate_with_nothing_added() -> None:
    """check_spmd's automatic classes record coordinate reads through a class of their own:
    the meshes of a backend that records none (every real job) are plain, and get_coordinate
    is DeviceMesh's one attribute read (bench/hot_path.py holds it at parity with torch)."""
    mesh = mesh3()
    for m in (mesh, mesh["tp"], mesh["dp", "cp"]._flatten("dpcp")):
        assert type(m) is DeviceMesh
        assert type(m).get_coordinate is DeviceMesh.get_coordinate
    assert mesh.get_coordinate() == (1, 0, 1) and mesh.get_local_rank("tp") == 1
