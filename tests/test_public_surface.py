"""Every public name is shown in use: each name in a package's ``__all__`` appears in a test,
a benchmark, an example or the README (an export nobody uses is a private name not yet made
private)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USERS = ("tests", "property_tests", "bench", "examples")


def _used_text() -> str:
    files = [p for d in USERS for p in (ROOT / d).rglob("*.py")] + [ROOT / "README.md"]
    return "\n".join(p.read_text() for p in files)


@pytest.mark.parametrize("package", ["layout", "mesh", "backend"])
def test_every_exported_name_is_used_outside_the_package(package: str) -> None:
    text = _used_text()
    exported = importlib.import_module(package).__all__
    unused = [n for n in exported if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert unused == []
