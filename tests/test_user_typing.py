"""A user's script is type-checked through the facade: groups by the backend's group type,
``to_torch()`` as torch's DeviceMesh, ``.mesh`` as a tensor; mypy --strict catches misuse."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GOOD = """\
    import torch
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

    from backend import DeviceMesh, FakeBackend, FakeGroup, init_device_mesh

    fb = FakeBackend(8, rank=3)
    mesh: DeviceMesh[FakeGroup] = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"),
                                                   backend=fb)
    group: FakeGroup = mesh.get_group("tp")
    ranks: tuple[int, ...] = group.ranks
    tensor: torch.Tensor = mesh.mesh
    converted: TorchDeviceMesh = mesh["tp"].to_torch()
    coordinate: tuple[int, ...] | None = mesh.get_coordinate()
    """

BAD = """\
    from backend import FakeBackend, init_device_mesh

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=FakeBackend(8, 3))
    size: int = mesh.get_group("tp")
    mesh.to_torch().no_such_method()
    """


@pytest.mark.timeout(300)
def test_mypy_strict_accepts_correct_use_and_names_each_planted_misuse(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                          "good.py", "bad.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=280, check=False)
    report = out.stdout + out.stderr
    assert "good.py" not in report, report
    assert 'bad.py:4: error: Incompatible types in assignment (expression has type "FakeGroup", ' \
        'variable has type "int")' in report, report
    assert 'bad.py:5: error: "DeviceMesh" has no attribute "no_such_method"' in report, report
    assert "Found 2 errors in 1 file" in report, report
