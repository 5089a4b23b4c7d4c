"""The torch releases the package is tested on: one range, stated in ``pyproject.toml`` and
``backend._core._versions.TESTED_TORCH`` alike, and ``import backend`` on a torch outside it
warns once, naming the range (issue 35)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from backend._core import TESTED_TORCH, untested_torch

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_states_the_tested_range() -> None:
    (lo, hi) = TESTED_TORCH
    spec = f'"torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}"'
    text = (ROOT / "pyproject.toml").read_text()
    assert len(re.findall(re.escape(spec), text)) == 2, spec  # the torch and test extras


def test_the_tested_releases_pass_and_others_are_named() -> None:
    assert untested_torch("2.13.0+cpu") is None and untested_torch("2.14.1+cu128") is None
    for other in ("2.12.1", "2.15.0", "3.0.0a0"):
        message = untested_torch(other)
        assert message is not None and ">=2.13,<2.15" in message and other in message


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
    assert ">=2.13,<2.15" in message and "torch 2.16.0" in message


def test_the_installed_torch_is_a_tested_one() -> None:
    import torch

    assert untested_torch(torch.__version__) is None, torch.__version__
