"""The import rule: ``layout`` needs only the standard library and attrs."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("torch", "numpy", "mesh", "backend", "pycute")


def test_layout_imports_only_stdlib_and_attrs() -> None:
    """Importing ``layout`` in a fresh interpreter loads no torch, numpy, mesh or backend."""
    code = (
        "import json, sys, layout; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_layout_modules_import_nothing_but_stdlib_attrs_and_themselves() -> None:
    """Every top-level module ``layout`` pulls in is stdlib, attrs, or ``layout`` itself."""
    code = (
        "import json, sys; before = set(sys.modules); import layout; "
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    new = set(json.loads(out.stdout))
    third_party = {m for m in new - {"layout", "attr", "attrs"}
                   if m not in sys.stdlib_module_names and not m.startswith("_")}
    assert third_party == set(), third_party
