"""Setup for the property tests: the pycute oracle's import path and a pair count.

``tests/cute_oracle.py`` (the mirror to NVIDIA's pycute) lives next to the unit
tests; its folder is put on ``sys.path`` so the property tests share it.  At the
end of a run, the number of pairs each raise-or-correct law checked is printed
(the issue asks for >= 10,000 under ``MESHLAYOUT_HYPOTHESIS_PROFILE=thorough``).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

_TESTS = str(pathlib.Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from brute import CHECKED  # noqa: E402  (after the path setup above)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not CHECKED:
        return
    terminalreporter.section("raise-or-correct: pairs checked")
    laws = sorted({k.split(":")[0] for k in CHECKED})
    for law in laws:
        admissible = CHECKED.get(law + ":admissible")
        terminalreporter.write_line(
            f"{law}: {CHECKED[law + ':checked']} checked, {CHECKED[law + ':returned']} returned "
            f"and verified, {CHECKED[law + ':raised']} raised"
            + ("" if admissible is None else f" ({admissible} admissible: none may raise)"))
    total = sum(v for k, v in CHECKED.items() if k.endswith(":checked"))
    terminalreporter.write_line(f"total: {total} pairs")
