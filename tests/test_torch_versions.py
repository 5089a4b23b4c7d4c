"""The torch releases the package is tested on: one range, stated in ``pyproject.toml`` and
``backend._core._versions.TESTED_TORCH`` alike, and ``import backend`` on a torch outside it
warns once, naming the range, and making a mesh over torch process groups there is refused with
a typed error naming the installed release and the range."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend._core import TESTED_TORCH, untested_torch

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_states_the_tested_range() -> None:
    (lo, hi) = TESTED_TORCH
    spec = f'"torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}"'
    text = (ROOT / "pyproject.toml").read_text()
    assert len(re.findall(re.escape(spec), text)) == 2, spec  # the torch and test extras


def test_the_tested_releases_pass_and_others_are_named() -> None:
    for tested in ("2.13.0+cpu", "2.14.1+cu128", "2.15.0", "2.15.0+cu132"):
        assert untested_torch(tested) is None, tested
    for other in ("2.12.1", "2.16.0", "3.0.0a0"):
        message = untested_torch(other)
        assert message is not None and ">=2.13,<2.16" in message and other in message


def test_import_backend_on_an_untested_torch_warns_once_naming_the_range() -> None:
    code = ("import importlib.metadata as m, warnings\n"
            "real = m.version\n"
            "m.version = lambda name: '2.16.0' if name == 'torch' else real(name)\n"
            "with warnings.catch_warnings(record=True) as got:\n"
            "    warnings.simplefilter('always')\n"
            "    import backend\n"
            "    import backend as again\n"
            "print(len([w for w in got if 'tested on torch' in str(w.message)]))\n"
            "print([str(w.message) for w in got if 'tested on torch' in str(w.message)][0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    count, message = out.stdout.splitlines()[:2]
    assert count == "1", out.stdout
    assert ">=2.13,<2.16" in message and "torch 2.16.0" in message


_PRETEND_216 = ("import importlib.metadata as m\n"
                "real = m.version\n"
                "m.version = lambda name: '2.16.0' if name == 'torch' else real(name)\n")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-W", "ignore", "-c", _PRETEND_216 + code],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
                          env={**os.environ, **env})


@pytest.mark.parametrize("make", [
    "init_device_mesh('cpu', (2,), backend=backend.TorchFakeBackend(2, 0))",
    "bind(MeshView.from_shape(2, ('w',)), backend.TorchFakeBackend(2, 0))",
    "init_device_mesh('cpu', (1,))",
    "backend.GlooBackend",
])
def test_a_mesh_over_torch_groups_on_an_unsupported_torch_is_refused_naming_it(make: str) -> None:
    """A torch outside the range: one typed error naming the installed release, the range and
    what to install, raised before torch's private names are read (never an AttributeError
    from inside the facade)."""
    out = _run("import backend\n"
               "from backend import bind, init_device_mesh\n"
               "from mesh import MeshView\n"
               "try:\n"
               f"    {make}\n"
               "except backend.UnsupportedTorchError as e:\n"
               "    print(type(e).__mro__[1].__name__, isinstance(e, ImportError), e.version)\n"
               "    print(e)\n", MASTER_ADDR="127.0.0.1", MASTER_PORT="1", RANK="0",
               WORLD_SIZE="1")
    assert out.returncode == 0, out.stderr[-2000:]
    first, message = out.stdout.splitlines()[:2]
    assert first == "BackendError True 2.16.0", out.stdout
    assert "torch 2.16.0" in message and ">=2.13,<2.16" in message
    assert "pip install" in message and "MESHLAYOUT_UNTESTED_TORCH=1" in message


def test_a_fake_backend_mesh_needs_no_supported_torch() -> None:
    out = _run("from backend import FakeBackend, init_device_mesh\n"
               "m = init_device_mesh('cpu', (2, 2), backend=FakeBackend(4, 1))\n"
               "print(m.get_group(0).ranks)\n")
    assert out.returncode == 0 and out.stdout.strip() == "(1, 3)", out.stderr[-2000:]


def test_the_refusal_can_be_lifted_to_try_an_untested_torch() -> None:
    out = _run("from backend import TorchFakeBackend, init_device_mesh\n"
               "m = init_device_mesh('cpu', (2,), backend=TorchFakeBackend(2, 0))\n"
               "print(m.size())\n", MESHLAYOUT_UNTESTED_TORCH="1")
    assert out.returncode == 0 and out.stdout.strip() == "2", out.stderr[-2000:]


def test_the_installed_torch_is_a_tested_one() -> None:
    import torch

    assert untested_torch(torch.__version__) is None, torch.__version__


def test_the_refusal_is_an_import_error_of_the_package_hierarchy() -> None:
    import pickle

    from backend import BackendError, UnsupportedTorchError

    error = UnsupportedTorchError("torch 2.16.0 is not supported", "2.16.0")
    assert isinstance(error, ImportError) and isinstance(error, BackendError)
    again = pickle.loads(pickle.dumps(error))
    assert again.version == error.version == "2.16.0" and str(again) == str(error)
