"""The backend's public types in use: the protocol every backend meets, the records a backend
keeps of what it created, and the error hierarchy a caller catches."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from backend import (
    Backend,
    BackendError,
    CreationRecord,
    FakeBackend,
    GroupCreationError,
    GroupKey,
    GroupOptions,
    MembersMissingError,
    ReentrantCreationError,
    init_device_mesh,
)


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
