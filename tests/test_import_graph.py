"""The layering rule: ``layout`` <- ``mesh`` <- ``backend``; neither layout nor mesh needs torch.

Checked twice: at run time (importing and using ``mesh`` and ``layout`` in a
fresh interpreter loads no torch, NumPy or backend module) and statically (no
file under ``src/layout`` or ``src/mesh`` imports ``torch.distributed`` or
``backend``, and ``layout`` does not import ``mesh``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
FORBIDDEN_AT_RUNTIME = ("torch", "numpy", "backend")

_USE = """
import json, pickle, sys
import layout, mesh
view = mesh.MeshView.from_ranks([[3, 1], [0, 2]], ("dp", "tp"))
view = mesh.MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp")).flatten(("dp", "tp"))
view.group(5, "dp_tp"), view.coordinate(5), view.instances(), mesh.render(view, 5)
pickle.loads(pickle.dumps(view)), mesh.MeshView.from_dict(view.to_dict())
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_and_using_mesh_loads_no_torch_numpy_or_backend() -> None:
    out = subprocess.run([sys.executable, "-c", _USE], capture_output=True, text=True,
                         check=True)
    loaded = json.loads(out.stdout)
    assert "mesh" in loaded and "layout" in loaded
    bad = [m for m in loaded if m.split(".")[0].startswith(FORBIDDEN_AT_RUNTIME)]
    assert bad == []


def _imports(source: str, package: str) -> set[str]:
    """Every module ``source`` (a file of ``package``) imports, by absolute dotted name.

    ``from a import b`` counts as both ``a`` and ``a.b``; relative imports are resolved.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}".lstrip(".") for alias in node.names)
    return names


def _sources(package: str) -> list[tuple[Path, set[str]]]:
    files = sorted((SRC / package).rglob("*.py"))
    assert files, f"no sources under {SRC / package}"
    out = []
    for path in files:
        sub = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
        out.append((path, _imports(path.read_text(), sub)))
    return out


def _matching(names: set[str], *roots: str) -> list[str]:
    return sorted(m for m in names if any(m == r or m.startswith(r + ".") for r in roots))


@pytest.mark.parametrize("package", ["layout", "mesh"])
def test_no_source_imports_torch_distributed_or_backend(package: str) -> None:
    for path, names in _sources(package):
        bad = _matching(names, "torch.distributed", "backend")
        assert bad == [], f"{path.relative_to(SRC)} imports {bad}"


def test_layout_does_not_import_mesh() -> None:
    for path, names in _sources("layout"):
        bad = _matching(names, "mesh")
        assert bad == [], f"{path.relative_to(SRC)} imports {bad}"


def test_the_static_check_sees_from_and_relative_imports() -> None:
    source = ("import torch.distributed.fsdp\n"
              "from torch import distributed\n"
              "from .. import backend\n")
    names = _imports(source, "mesh")
    assert set(_matching(names, "torch.distributed", "backend")) == {
        "backend", "torch.distributed", "torch.distributed.fsdp"}
    assert _imports("from ._view import MeshView\n", "mesh") == {"mesh._view",
                                                                 "mesh._view.MeshView"}
