"""The newcomer's install (issue 30): ``pip install`` without extras pulls no torch, the offline
tools run, and ``import backend`` names the extra it needs.

``layout``, ``mesh`` and the ``meshlayout`` command never import torch, so torch is the
``torch`` extra (``pip install -e '.[torch]'`` from a checkout), not a dependency (a plain
install was an 896 MB venv).  The install test builds this checkout's wheel (with this interpreter's
setuptools when it is recent enough, else in pip's isolated build), installs it into a fresh
venv (``python -m venv --without-pip``, driven by this pip's ``--python``; attrs comes from
the package index), and runs the README's "Try it" demo and ``meshlayout explain`` there, with
nothing of this environment on the path.  It skips, saying why, where no venv can be made or
the index cannot be reached.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_OFFLINE = ("No matching distribution found for attrs", "Could not find a version that satisfies",
            "NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
            "Network is unreachable")


def _env() -> dict[str, str]:
    """This process's environment without anything that would put its packages on the path."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                         "VIRTUAL_ENV")}


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=cwd, env=_env())


def _setuptools_builds() -> bool:
    """Whether this interpreter's setuptools can build the project without isolation (an SPDX
    ``license`` string needs setuptools >= 77)."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 77


def _pip_has_python_option() -> bool:
    """``pip --python`` (pip >= 22.3) installs into an environment without pip."""
    try:
        major, minor = (int(x) for x in importlib.metadata.version("pip").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (22, 3)


def copy_checkout(work: Path, files: tuple[str, ...], folders: tuple[str, ...]) -> Path:
    """``work/checkout``: these files and folders of this checkout (no caches, no egg-info),
    what a build sees."""
    source = work / "checkout"
    source.mkdir()
    for name in files:
        shutil.copy(ROOT / name, source / name)
    for folder in folders:
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return source


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with this checkout installed without extras; its ``bin`` folder."""
    if not _pip_has_python_option():
        pytest.skip("pip < 22.3 has no --python to install into a venv without pip")
    work = tmp_path_factory.mktemp("install")
    source = copy_checkout(work, ("pyproject.toml", "README.md"), ("src",))
    flags = ["--no-build-isolation"] if _setuptools_builds() else []
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                  "--disable-pip-version-check", *flags, "-w", str(work / "wheels"),
                  str(source)], work)
    if built.returncode != 0 and any(s in built.stderr for s in _OFFLINE):
        pytest.skip(f"the package index cannot be reached to build the wheel: "
                    f"{built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr[-3000:]
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], work)
    if made.returncode != 0:
        pytest.skip(f"python -m venv cannot make a venv here: {made.stderr[-300:]}")
    bindir = work / "venv" / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    wheel = next((work / "wheels").glob("meshlayout-*.whl"))
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                 "--disable-pip-version-check", str(wheel)], work, timeout=300)
    if done.returncode != 0 and any(s in done.stderr for s in _OFFLINE):
        pytest.skip(f"the package index cannot be reached for attrs: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return bindir


def test_the_wheel_needs_torch_only_with_an_extra(venv: Path) -> None:
    """The built metadata: attrs is the one dependency; torch comes with ``[torch]`` (and the
    test tools)."""
    wheel = next((venv.parent.parent / "wheels").glob("meshlayout-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
    requires = re.findall(r"^Requires-Dist: (.*)$", meta.decode(), re.M)
    assert [r for r in requires if "extra ==" not in r] == ["attrs>=24.1"]
    assert 'torch<2.16,>=2.13; extra == "torch"' in requires  # the versions the suite runs on
    assert 'numpy>=1.24; extra == "numpy"' in requires  # Sharding.local, Reshard.apply
    classifiers = re.findall(r"^Classifier: (.*)$", meta.decode(), re.M)
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3" in classifiers
    assert not re.search(r"^Project-URL:", meta.decode(), re.M)  # no public home: none invented


def test_a_plain_install_names_the_numpy_extra_where_numpy_is_needed(venv: Path) -> None:
    python = venv / ("python.exe" if os.name == "nt" else "python")
    out = _run([str(python), "-c", "from mesh import MeshView, Shard, Sharding\n"
                "s = Sharding(MeshView.from_shape(2, ('tp',)), (Shard(0),), (4,))\n"
                "print(s.runs(1))\n"  # plain arithmetic: no NumPy needed
                "s.local([0, 1, 2, 3], 1)"], venv)
    assert out.stdout.strip() == "(((2, 2),),)", out.stderr[-2000:]
    assert "mesh.NumpyMissingError: Sharding.local needs NumPy" in out.stderr
    assert "pip install -e '.[numpy]'" in out.stderr


def test_a_plain_install_has_no_torch_and_runs_the_offline_tools(venv: Path) -> None:
    python = venv / ("python.exe" if os.name == "nt" else "python")
    found = _run([str(python), "-c", "import importlib.util as u, mesh\n"
                  "print(u.find_spec('torch'), mesh.__file__)"], venv)
    spec, where = found.stdout.split()
    assert spec == "None", found.stderr  # nothing pulled torch in
    assert Path(where).is_relative_to(venv.parent), where  # the installed copy runs
    explained = _run([str(venv / "meshlayout"), "explain", "--world", "32",
                      "--devices-per-host", "8", "--dims", "dp=4,tp=8", "--fail", "13"], venv)
    assert explained.returncode == 0, explained.stderr
    assert "view mesh: (dp=4, tp=8) over ranks 0..31" in explained.stdout
    assert "drop dp: (dp=3, tp=8) over 24 ranks" in explained.stdout
    demo = _run([str(python), str(ROOT / "examples" / "demo.py")], venv)  # README's "Try it"
    assert demo.returncode == 0, demo.stderr
    assert "rank 5's cp group kept: True" in demo.stdout


def test_a_plain_install_runs_the_torch_free_backend_and_names_the_extra(venv: Path) -> None:
    """Without torch, ``import backend`` works and ``check_spmd`` runs on ``FakeBackend``;
    what needs torch raises ``TorchMissingError`` naming the extra and the CPU wheel."""
    python = venv / ("python.exe" if os.name == "nt" else "python")
    out = _run([str(python), "-c", _NO_TORCH_PROGRAM], venv)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[0] == "True", out.stdout
    assert "pip install -e '.[torch]'" in out.stdout
    assert "pip install torch==2.13.0 --index-url" in out.stdout  # the pinned CPU wheel


_NO_TORCH_PROGRAM = """\
import backend
from backend import TorchMissingError, check_spmd, init_device_mesh
def setup(b):
    init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"), backend=b).materialize()
print(check_spmd(8, setup).ok)
for needs in (lambda: backend.GlooBackend, lambda: init_device_mesh("cpu", (2,)),
              lambda: check_spmd(2, setup, torch=True)):
    try:
        needs()
    except TorchMissingError as e:
        assert e.name == "torch"
        print(e)
    else:
        raise AssertionError("no TorchMissingError")
import sys
assert not [m for m in sys.modules if m.split(".")[0] == "torch" and sys.modules[m]], "torch loaded"
"""


def test_without_torch_the_core_runs_and_what_needs_torch_names_the_extra() -> None:
    """The same without a venv (torch hidden from the import system): FakeBackend and
    check_spmd run; the c10d backends, a mesh with no backend bound and ``torch=True`` raise
    ``backend.TorchMissingError``, a ``ModuleNotFoundError`` for ``torch``."""
    code = "import sys\nsys.modules['torch'] = None  # as if not installed\n" + _NO_TORCH_PROGRAM
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "True" and len(lines) == 4, out.stdout
    assert all("pip install -e '.[torch]'" in line for line in lines[1:]), out.stdout
