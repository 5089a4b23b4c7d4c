"""CI runs exactly the steps of the README's test command, and the torch pin comes first (then,
each in a venv of its own, the torch-facing tests on torch 2.14.1 and 2.15.0); the README opens
with its two commands for a fresh machine, what must happen before them is written before them,
and the test command holds every step (PyTorch's CPU wheel where there is no NVIDIA GPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_pages import PAGES, name

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DEMO = "pip install -e . && python examples/demo.py"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
TORCH = f"pip install torch==2.13.0 $(nvidia-smi -L >/dev/null 2>&1 || echo {CPU_INDEX})"
"""The test command's first step: the pinned torch, its CPU wheel where there is no NVIDIA GPU."""
VENV = "python3 -m venv .venv && . .venv/bin/activate"


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", README, re.S)


def _readme_test_command() -> list[str]:
    command = next(b for b in _bash_blocks() if "pytest" in b)
    return [step.strip() for step in command.split("&&")]


def _ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "set ",
                                                                                      "cd "))]


def test_ci_runs_each_step_of_the_readme_test_command_in_order() -> None:
    ci = [re.sub(r"^python -m pip install (--quiet |--upgrade )*", "pip install ", c)
          for c in _ci_commands()]
    steps = _readme_test_command()
    positions = [ci.index(step) for step in steps]  # ValueError if a step is missing
    assert positions == sorted(positions)
    assert steps[-1] == "python -m pytest"
    # After the README's run, only the runs on the newer torch releases, in venvs of their own.
    assert all(c.startswith(("python -m venv .ci-venv21", ".ci-venv21",
                             "PIP_CONFIG_FILE=/dev/null .ci-venv215/"))
               for c in ci[positions[-1] + 1:])


TORCH_FACING = ROOT / ".ci" / "torch-facing"


@pytest.mark.parametrize(("venv", "version", "lift", "files"), [
    (".ci-venv214", "2.14.1", "", "torch-api"),
    (".ci-venv215", "2.15.0", "PIP_CONFIG_FILE=/dev/null ", "torch-facing")])
def test_ci_then_runs_the_torch_facing_tests_on_each_newer_torch(venv: str, version: str,
                                                                 lift: str, files: str) -> None:
    """Each supported release above the README's 2.13.0 gets its tests in a venv of its own,
    torch pinned before the project is installed: 2.14.1 the files that run torch's own APIs,
    2.15.0 every torch-facing file."""
    ci = _ci_commands()
    start = ci.index(f"python -m venv {venv}")
    assert ci[start + 1:start + 5] == [
        f"{lift}{venv}/bin/pip install --quiet torch=={version}",
        f'{lift}{venv}/bin/pip install --quiet -e ".[test]"',
        f"{lift}{venv}/bin/pip install --quiet --no-deps nvidia-cutlass==4.2.0.0",
        f"{venv}/bin/python -m pytest -rs $(cat .ci/{files})"]
    assert f"{venv}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_torch_facing_lists_name_test_files_that_exist() -> None:
    patterns = TORCH_FACING.read_text().split()
    api = (ROOT / ".ci" / "torch-api").read_text().split()
    for listed in (patterns, api):
        assert listed and len(set(listed)) == len(listed)
        for pattern in listed:
            assert sorted(ROOT.glob(pattern)), pattern
        assert "tests/test_torch_versions.py" in listed and "tests/test_facade*.py" in listed
    every = {f for pattern in patterns for f in ROOT.glob(pattern)}
    assert {f for pattern in api for f in ROOT.glob(pattern)} <= every  # 2.15 runs all 2.14's


def test_the_supported_range_is_what_ci_runs() -> None:
    """pyproject's range, the constant and CI name the same releases: the oldest in the
    README's run, each newer one in a venv of its own."""
    from backend._core import TESTED_TORCH

    (lo, hi) = TESTED_TORCH
    run = (ROOT / ".ci" / "run").read_text()
    pins = re.findall(r"torch==(\d+)\.(\d+)\.\d+", run)
    minors = sorted({(int(a), int(b)) for a, b in pins})
    assert minors == [(lo[0], m) for m in range(lo[1], hi[1])], minors


def test_torch_is_pinned_before_the_project_is_installed() -> None:
    steps = _readme_test_command()
    assert steps.index(TORCH) < steps.index('pip install -e ".[test]"')


def test_the_readme_opens_with_the_demo_and_the_test_command() -> None:
    first, second = _bash_blocks()[:2]
    assert first == DEMO
    assert "pytest" in second and second.startswith(f"{TORCH} && ")


def test_the_venv_is_written_before_the_commands_and_ignored_by_git() -> None:
    """A reader follows the page top down: a step to take before a command comes before it,
    with what stock Debian and Ubuntu need for it (``python3``, ``python3-venv``)."""
    demo = README.index(f"```bash\n{DEMO}")
    assert README.index(VENV) < demo and README.index("apt-get install python3-venv") < demo
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_cpu_wheel_is_a_step_of_the_copyable_test_command() -> None:
    """Copying the test command is enough on a machine without an NVIDIA GPU too."""
    (command,) = [b for b in _bash_blocks() if "pytest" in b]
    assert "\n" not in command and CPU_INDEX in command.split(" && ")[0]


def test_no_page_installs_meshlayout_from_a_package_index() -> None:
    """meshlayout is on no index: ``pip install meshlayout`` (with or without extras) fails;
    the pages install the checkout (``pip install -e``)."""
    for page in PAGES:
        found = re.findall(r"pip install [\"']?meshlayout", page.read_text(encoding="utf-8"))
        assert found == [], name(page)
