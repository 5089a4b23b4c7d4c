"""Every Python block of README.md and of every ``docs/*.md`` page runs on its own, as a reader
pastes it: its own imports, its own setup, and the outputs shown exactly as printed (each
block is a doctest run in a fresh namespace, in a fresh process, so no block leans on
another's names or state).  This is the one run of the pages' doctests in the suite (pytest's
``--doctest-glob`` collects them only when named: ``pytest README.md docs``)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from doc_pages import PAGES, PYTHON_BLOCK, ROOT, name, python_blocks, text

BLOCKS = python_blocks()
RUN = """
import doctest, sys
text = sys.stdin.read()
test = doctest.DocTestParser().get_doctest(text, {}, sys.argv[1], sys.argv[1], 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
runner.run(test)
sys.exit(1 if runner.failures else 0)
"""
TORCHRUN = "torchrun --nproc-per-node 4 examples/plan_2d.py"


def test_the_pages_have_python_blocks() -> None:
    """The README shows a few, and every docs page but the command reference some."""
    assert len(BLOCKS) >= 30
    have = {page for page, _, _ in BLOCKS}
    assert have == {name(p) for p in PAGES if p.name != "cli.md"}, have


def test_every_doctest_line_is_inside_a_python_block() -> None:
    """No ``>>>`` example escapes the run below (a ``py`` block or prose is shown, not run)."""
    for page in PAGES:
        outside = PYTHON_BLOCK.sub("", text(page))
        assert not re.search(r"^>>> ", outside, re.M), name(page)


@pytest.mark.parametrize(("page", "index", "block"), BLOCKS,
                         ids=[f"{page}#{index}" for page, index, _ in BLOCKS])
def test_each_block_runs_alone(page: str, index: int, block: str) -> None:
    out = subprocess.run([sys.executable, "-c", RUN, f"{page} block {index}"], input=block,
                         capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.timeout(180)
def test_the_torchrun_example_prints_what_the_page_shows() -> None:
    """``torchrun --nproc-per-node 4 examples/plan_2d.py``'s output, as its page shows it."""
    import gloo_launch

    pages = [text(p) for p in PAGES if f"```bash\n{TORCHRUN}\n```" in text(p)]
    assert len(pages) == 1, "the torchrun example is shown on one page"
    shown = pages[0].split(f"{TORCHRUN}\n```\n\n```text\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
         "--master-addr", "127.0.0.1", "--master-port", str(gloo_launch.free_port()),
         str(ROOT / "examples" / "plan_2d.py")],
        capture_output=True, text=True, timeout=150, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == shown
