"""Every Python block of README.md runs on its own, as a reader pastes it: its own imports,
its own setup, and the outputs shown exactly as printed (each block is a doctest run in a
fresh namespace, in a fresh process, so no block leans on another's names or state)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
RUN = """
import doctest, sys
text = sys.stdin.read()
test = doctest.DocTestParser().get_doctest(text, {}, "README block", "README.md", 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
runner.run(test)
sys.exit(1 if runner.failures else 0)
"""


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_block_runs_alone(index: int) -> None:
    out = subprocess.run([sys.executable, "-c", RUN], input=BLOCKS[index], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.timeout(180)
def test_the_torchrun_example_prints_what_the_readme_shows() -> None:
    """``torchrun --nproc-per-node 4 examples/plan_2d.py``'s output, as README shows it."""
    import gloo_launch

    text = README.read_text()
    shown = text.split("torchrun --nproc-per-node 4 examples/plan_2d.py\n```\n\n```text\n", 1)[1]
    shown = shown.split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
         "--master-addr", "127.0.0.1", "--master-port", str(gloo_launch.free_port()),
         str(README.parent / "examples" / "plan_2d.py")],
        capture_output=True, text=True, timeout=150, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == shown
