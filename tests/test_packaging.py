"""The package as a real package: one version (pyproject.toml's) shown by ``meshlayout
--version``; a source distribution and a wheel that carry the three packages with their
``py.typed`` markers, the README, and (in the sdist) the docs pages and the example plans, and
no test files (the suite runs from a checkout)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from test_install_light import (
    _OFFLINE,
    _pip_has_python_option,
    _run,
    _setuptools_builds,
    copy_checkout,
)

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]


def test_meshlayout_version_is_pyprojects() -> None:
    out = subprocess.run([sys.executable, "-m", "mesh", "--version"], capture_output=True,
                         text=True, timeout=60, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"meshlayout {VERSION}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist and a wheel of a copy of this checkout, built by setuptools' PEP 517 hooks."""
    if not _setuptools_builds():
        pytest.skip("this interpreter's setuptools is older than 77 (SPDX license strings)")
    work = tmp_path_factory.mktemp("dist")
    source = copy_checkout(work, ("pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in",
                                  "conftest.py"),
                           ("src", "examples", "docs", "tests", "property_tests", "bench"))
    for hook in ("build_sdist", "build_wheel"):
        code = f"import setuptools.build_meta as b, sys\nprint(b.{hook}(sys.argv[1]))\n"
        out = subprocess.run([sys.executable, "-c", code, str(work / "dist")],
                             capture_output=True, text=True, timeout=300, check=False,
                             cwd=source)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert (work / "dist" / out.stdout.split()[-1]).exists(), out.stdout[-2000:]
    return work / "dist"


def test_the_sdist_carries_the_packages_the_readme_and_the_examples(built: Path) -> None:
    sdist = built / f"meshlayout-{VERSION}.tar.gz"
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for package in ("layout", "mesh", "backend"):
        assert f"src/{package}/py.typed" in names, sorted(names)[:20]
    assert {"README.md", "pyproject.toml", "examples/trainer.py", "examples/demo.py",
            "docs/tensors.md", "docs/cli.md"} <= names  # the README's links resolve


def test_the_sdist_ships_no_test_it_could_not_run(built: Path) -> None:
    """The suite needs the checkout (helpers, ``conftest.py``, ``property_tests/``,
    ``bench/``, ``.ci/run``): the sdist, built from a copy holding them, ships none of it
    (setuptools alone added the ``tests/test*.py`` files without their helpers)."""
    sdist = built / f"meshlayout-{VERSION}.tar.gz"
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    shipped = sorted(n for n in names if n.split("/")[0] in ("tests", "property_tests", "bench")
                     or n == "conftest.py")
    assert shipped == []


def test_the_wheel_carries_the_typed_packages_and_the_command(built: Path) -> None:
    wheel = next(built.glob(f"meshlayout-{VERSION}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read(f"meshlayout-{VERSION}.dist-info/entry_points.txt").decode()
    assert {"layout/py.typed", "mesh/py.typed", "backend/py.typed"} <= names
    assert "meshlayout = mesh._cli:main" in entry


def test_the_sdist_installs_in_a_fresh_venv_and_runs_the_command(built: Path,
                                                                 tmp_path: Path) -> None:
    """The sdist built into a wheel and installed (with attrs from the index) into a venv of
    its own:
    ``meshlayout --version`` and ``meshlayout reshard`` of the sdist's own example plans run
    there, with nothing of this environment on the path."""
    if not _pip_has_python_option():
        pytest.skip("pip < 22.3 has no --python to install into a venv without pip")
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                tmp_path)
    if made.returncode != 0:
        pytest.skip(f"python -m venv cannot make a venv here: {made.stderr[-300:]}")
    bindir = tmp_path / "venv" / "bin"
    sdist = built / f"meshlayout-{VERSION}.tar.gz"
    wheel = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "--disable-pip-version-check", "-w", str(tmp_path / "from_sdist"), str(sdist)],
                 tmp_path, timeout=300)  # the sdist builds (with this setuptools, offline)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    done = _run([sys.executable, "-m", "pip", "--python", str(bindir / "python"), "install", "-q",
                 "--disable-pip-version-check",
                 str(next((tmp_path / "from_sdist").glob("meshlayout-*.whl")))], tmp_path,
                timeout=300)
    if done.returncode != 0 and any(s in done.stderr for s in _OFFLINE):
        pytest.skip(f"the package index cannot be reached for attrs: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    version = _run([str(bindir / "meshlayout"), "--version"], tmp_path)
    assert version.stdout.strip() == f"meshlayout {VERSION}", version.stderr
    with tarfile.open(sdist) as t:
        t.extractall(tmp_path / "unpacked", filter="data")
    examples = tmp_path / "unpacked" / f"meshlayout-{VERSION}" / "examples"
    out = _run([str(bindir / "meshlayout"), "reshard", str(examples / "trainer.py"),
                str(examples / "server.py"), "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"schema": "meshlayout.reshard/2"' in out.stdout


def test_the_changelog_has_an_unreleased_section_above_the_released_version() -> None:
    """A reader sees what is not released yet, then each release under its version; and no
    tracker number (``issue 36``, ``#36``) that a reader of the package cannot look up."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headers = re.findall(r"^## (.*)$", text, re.M)
    assert headers[:2] == ["Unreleased", VERSION]
    assert re.findall(r"\bissues? \d+|(?<![\w&])#\d+\b", text) == []
