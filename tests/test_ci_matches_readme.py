"""CI runs exactly the steps of the README's test command, and the torch pin comes first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    command = next(b for b in blocks if "pytest" in b)
    return [step.strip() for step in command.split("&&")]


def _ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "set ",
                                                                                      "cd "))]


def test_ci_runs_each_step_of_the_readme_test_command_in_order() -> None:
    ci = [re.sub(r"^python -m pip install (--quiet |--upgrade )*", "pip install ", c)
          for c in _ci_commands()]
    steps = _readme_test_command()
    positions = [ci.index(step) for step in steps]  # ValueError if a step is missing
    assert positions == sorted(positions)
    assert ci[-1] == steps[-1] == "python -m pytest"


def test_torch_is_pinned_before_the_project_is_installed() -> None:
    steps = _readme_test_command()
    assert steps.index("pip install torch==2.13.0") < steps.index('pip install -e ".[test]"')
