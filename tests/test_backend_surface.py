"""The backend's public types in use: the protocol every backend meets, the records a backend
keeps of what it created, and the error hierarchy a caller catches."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

from backend import (
    Backend,
    BackendConfigError,
    BackendError,
    Binding,
    C10dBackend,
    CreationRecord,
    FakeBackend,
    GlooBackend,
    GroupCreationError,
    GroupKey,
    GroupOptions,
    MembersMissingError,
    NcclBackend,
    PeerLostError,
    ReentrantCreationError,
    SpmdReport,
    TorchMissingError,
    check_spmd,
    init_device_mesh,
)
from mesh import MeshView


def test_a_fake_backend_meets_the_backend_protocol() -> None:
    assert isinstance(FakeBackend(4, rank=1), Backend)
    assert not isinstance(object(), Backend)


def test_created_lists_one_record_per_family_with_its_key() -> None:
    fb = FakeBackend(8, rank=5)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=fb)
    tp = mesh.get_group("tp")
    mesh.get_group("tp")
    (record,) = fb.created
    assert isinstance(record, CreationRecord) and isinstance(record.key, GroupKey)
    assert record.dim == "tp" and record.group is tp
    assert record.key == GroupKey(mesh.view.family("tp"), GroupOptions())
    assert record.key != GroupKey(mesh.view.family("dp"), GroupOptions())


@pytest.mark.parametrize("error", [MembersMissingError, ReentrantCreationError])
def test_creation_failures_are_caught_as_group_creation_errors(error: type[Exception]) -> None:
    assert issubclass(error, GroupCreationError) and issubclass(GroupCreationError, BackendError)
    with pytest.raises(GroupCreationError):
        raise error("it failed")


def test_every_torch_backend_is_a_c10d_backend_meeting_the_protocol() -> None:
    code = textwrap.dedent("""
        from backend import Backend, C10dBackend, GlooBackend, NcclBackend, TorchFakeBackend
        tb = TorchFakeBackend(4, rank=2)
        print(isinstance(tb, C10dBackend), isinstance(tb, Backend),
              issubclass(GlooBackend, C10dBackend), issubclass(NcclBackend, C10dBackend),
              type(C10dBackend()).__name__, C10dBackend().world_size)
        tb.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["True", "True", "True", "True", "C10dBackend", "4"]


def test_a_c10d_backend_over_torchs_fake_world_creates_groups_without_a_barrier() -> None:
    """Over torch's fake world (one process pretending to be rank 2 of 4; its store's
    methods are pure virtual) there are no peers to meet: a C10dBackend creates its groups
    without the store barrier, as TorchFakeBackend does."""
    code = textwrap.dedent("""
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore
        from mesh import MeshView
        from backend import C10dBackend
        dist.init_process_group("fake", store=FakeStore(), rank=2, world_size=4)
        b = C10dBackend()
        g = b.get_group(MeshView.from_shape((2, 2), ("dp", "tp")), "tp")
        print(dist.get_process_group_ranks(g), g.rank())
        b.shutdown(); dist.destroy_process_group()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[2,", "3]", "0"]


def test_the_torch_backends_are_c10d_backends() -> None:
    assert issubclass(GlooBackend, C10dBackend) and issubclass(NcclBackend, C10dBackend)


def test_a_binding_is_valid_by_construction_and_does_not_pickle() -> None:
    """A view bound to a backend: it fits the backend's world, has one options value per
    dim, and holds a live backend, so it refuses pickling (a mesh pickles instead)."""
    fb = FakeBackend(4, rank=0)
    view = MeshView.from_shape((2, 2), ("dp", "tp"))
    bound = Binding(view, fb, (GroupOptions(), GroupOptions()), "cpu")
    assert bound == Binding(view, fb, (GroupOptions(),) * 2, "cpu") and bound.view == view
    with pytest.raises(BackendConfigError, match="world size 4"):
        Binding(MeshView.from_shape(8), fb, (GroupOptions(),), "cpu")
    with pytest.raises(BackendConfigError, match="1 options for the 2 dims"):
        Binding(view, fb, (GroupOptions(),), "cpu")
    with pytest.raises(BackendConfigError, match="does not pickle"):
        pickle.dumps(bound)


def test_check_spmd_answers_an_spmd_report() -> None:
    def setup(backend: Backend[object]) -> None:
        init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend
                         ).materialize()

    report = check_spmd(4, setup)
    assert isinstance(report, SpmdReport) and report.ok


def test_a_lost_peer_is_a_backend_error_listing_the_lost_ranks() -> None:
    lost = PeerLostError("ranks 3 and 5 stopped answering", lost=(3, 5))
    assert isinstance(lost, BackendError) and isinstance(lost, RuntimeError)
    assert lost.lost == (3, 5)


def test_a_missing_torch_is_a_module_not_found_for_torch() -> None:
    """What ``import backend`` raises without PyTorch: ``except ImportError`` catches it, and
    it names the module (``torch``), as Python's own would."""
    missing = TorchMissingError("pip install 'meshlayout[torch]'")
    assert isinstance(missing, ModuleNotFoundError) and isinstance(missing, BackendError)
    assert missing.name == "torch"

