"""Running a snippet in a fresh interpreter and checking which packages it imported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["run_without"]


def run_without(code: str, forbidden: Sequence[str], *, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter (cwd: the repo root); assert it ran and imported
    no module of the ``forbidden`` top-level packages; return its stdout."""
    check = ("\nimport sys as _sys\n"
             f"_bad = [m for m in _sys.modules if m.split('.')[0] in {tuple(forbidden)!r}]\n"
             "assert not _bad, sorted(_bad)\n")
    out = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
