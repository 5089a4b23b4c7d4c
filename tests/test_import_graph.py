"""The layering rule: ``layout`` <- ``mesh`` <- ``backend``; neither layout nor mesh needs torch;
inside each package, a core below its wings and no import cycle.

Checked twice: at run time (importing and using ``mesh`` and ``layout`` in a
fresh interpreter loads no torch, NumPy or backend module) and statically (no
file under ``src/layout`` or ``src/mesh`` imports ``torch.distributed`` or
``backend``, and ``layout`` does not import ``mesh``).  Inside a package, every
import counts, function-local and type-only ones too: the modules' import graph has
no cycle, the sub-packages' graph has none, and a ``_core`` sub-package imports
nothing of its package outside itself (no wing, not the package's ``__init__``); another
sub-package is reached through its face only, and a name imported from a module with an
``__all__`` is listed there.
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

    ``from a import b`` counts as both ``a`` and ``a.b`` (``from . import b`` as ``b`` only:
    the parent package is being imported already); relative imports are resolved.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if node.module or not node.level:  # ``from . import x`` imports x, not its parent
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


# ---- inside a package: no cycle, the core below its wings ---------------------------------------

PACKAGES = ("layout", "mesh", "backend")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (anywhere in the file)."""
    modules = {_module_name(p): p for p in (SRC / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_init = path.name == "__init__.py"
        own = name if is_init else name.rpartition(".")[0]
        targets = {m for m in _imports(path.read_text(), own) if m in modules}
        graph[name] = targets - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path (first node repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def _subpackage(module: str, package: str) -> str:
    """The sub-package ``module`` lies in (``mesh._core``), or the package for its top files."""
    parts = module.split(".")
    sub = ".".join(parts[:2])
    return sub if len(parts) > 1 and (SRC / sub.replace(".", "/")).is_dir() else package


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_modules_of_a_package(package: str) -> None:
    assert _cycle(_graph(package)) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_between_the_sub_packages_of_a_package(package: str) -> None:
    graph: dict[str, set[str]] = {}
    for module, targets in _graph(package).items():
        if module == package:
            continue  # the package's __init__ sits above everything it gathers
        here = _subpackage(module, package)
        graph.setdefault(here, set()).update(
            t for t in map(lambda m: _subpackage(m, package), targets) if t != here)
    assert _cycle(graph) == []


@pytest.mark.parametrize("package", ["mesh", "backend"])
def test_a_core_imports_nothing_of_its_package_outside_itself(package: str) -> None:
    core = f"{package}._core"
    graph = _graph(package)
    assert any(m.startswith(core + ".") for m in graph), f"{package} has no {core} sub-package"
    for module, targets in graph.items():
        if module == core or module.startswith(core + "."):
            outside = sorted(t for t in targets if not (t == core or t.startswith(core + ".")))
            assert outside == [], f"{module} imports {outside}"


@pytest.mark.parametrize("package", ["mesh", "backend"])
def test_another_sub_package_only_through_its_init(package: str) -> None:
    """A module reaches a sub-package it is not in through that sub-package's ``__init__``
    (its face: the names it lists in ``__all__``), never into one of its modules."""
    graph = _graph(package)
    subs = {_subpackage(m, package) for m in graph} - {package}
    assert subs, f"{package} has no sub-packages"
    for module, targets in graph.items():
        here = _subpackage(module, package)
        deep = sorted(t for t in targets
                      if (there := _subpackage(t, package)) in subs and there != here
                      and t != there)
        assert deep == [], f"{module} reaches into {deep}"
    for sub in subs:  # every face says what it offers
        face = SRC / sub.replace(".", "/") / "__init__.py"
        assert "__all__" in face.read_text(), f"{sub} has no __all__"


def test_the_face_check_sees_a_deep_import() -> None:
    names = _imports("from .._core._errors import BackendError\nfrom .._core import Backend\n",
                     "backend._facade")
    assert "backend._core._errors" in names and "backend._core" in names


def test_the_cycle_check_sees_function_local_imports_and_reports_the_path() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": set()}
    assert _cycle(graph) == ["p.a", "p.b", "p.c", "p.a"]
    assert _cycle({"p.a": {"p.b"}, "p.b": set()}) == []
    local = "def f():\n    from ._view import MeshView\n"
    assert "mesh._view" in _imports(local, "mesh")


def _all_of(source: Path) -> list[str] | None:
    """The names of ``source``'s ``__all__`` (a list of strings, and ``*NAME`` of a tuple of
    strings assigned earlier in the module), or None without one."""
    values: dict[str, ast.expr] = {}
    for n in ast.parse(source.read_text()).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                isinstance(n.targets[0], ast.Name):
            values[n.targets[0].id] = n.value
    found = values.get("__all__")
    if not isinstance(found, (ast.List, ast.Tuple)):
        return None
    names: list[str] = []
    for e in found.elts:
        if isinstance(e, ast.Starred) and isinstance(e.value, ast.Name):
            names += ast.literal_eval(values[e.value.id])
        else:
            names.append(ast.literal_eval(e))
    return names


def _missing_from_all(path: Path, text: str) -> list[str]:
    """The names ``text`` (the file at ``path``) imports, relatively, from a module of the
    package whose ``__all__`` does not list them."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.ImportFrom) and node.level and node.module):
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        target = base.joinpath(*node.module.split("."))
        source = target.with_suffix(".py") if target.with_suffix(".py").exists() \
            else target / "__init__.py"
        if not source.exists():
            continue
        listed = _all_of(source)
        if listed is not None:
            out += [f"{a.name} from {source.relative_to(SRC)}" for a in node.names
                    if a.name not in listed]
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_what_a_module_imports_from_a_sibling_is_in_the_siblings_all(package: str) -> None:
    """``__all__`` is a module's whole offer to its package: a name a sibling imports from
    a module with an ``__all__`` is listed there."""
    missing = {str(p.relative_to(SRC)): found for p in (SRC / package).rglob("*.py")
               if (found := _missing_from_all(p, p.read_text()))}
    assert missing == {}


def test_the_all_check_sees_an_unlisted_name() -> None:
    path = SRC / "backend" / "_core" / "_base.py"
    assert _missing_from_all(path, "from ._loss import Loss, Hidden\n") == [
        "Hidden from backend/_core/_loss.py"]


# ---- mesh: the machine model below the wings -----------------------------------------------

MACHINE = "mesh._topology"
WINGS = ("mesh._draw", "mesh._hang", "mesh._tensor", "mesh._plan", "mesh._recover",
         "mesh._decide", "mesh._cli")
OLD_MACHINE = ("_topology", "_kinds", "_runs", "_topofile", "_blocks")  # once in mesh._plan


def test_the_machine_model_imports_only_the_core_and_layout() -> None:
    """``mesh._topology`` (Topology and its kinds) sits below every wing: it imports
    ``mesh._core`` and ``layout``, no wing and not the package's ``__init__``."""
    for path, names in _sources("mesh/_topology"):
        ours = _matching(names, "mesh")
        bad = [m for m in ours if not m.startswith(("mesh._core", MACHINE))]
        assert bad == [], f"{path.relative_to(SRC)} imports {bad}"


def test_no_wing_imports_the_plan_wings_machine_model() -> None:
    """A wing that asks a machine imports ``mesh._topology``'s face; nothing imports the old
    modules of ``mesh._plan`` (``_plan/_topology.py`` is left only for old pickles)."""
    old = [f"mesh._plan.{m}" for m in OLD_MACHINE]
    for module, targets in _graph("mesh").items():
        bad = _matching(targets, *old)
        assert bad == [], f"{module} imports {bad}"
    assert not any((SRC / "mesh" / "_plan" / f"{m}.py").exists() for m in OLD_MACHINE[1:])


def test_every_wing_that_asks_a_machine_takes_the_topology_from_its_face() -> None:
    users = {_subpackage(m, "mesh") for m, targets in _graph("mesh").items()
             if MACHINE in targets and not m.startswith(MACHINE)}
    assert users >= {"mesh._draw", "mesh._hang", "mesh._tensor", "mesh._plan"}
    assert users <= {*WINGS, "mesh"}


def test_no_wing_imports_the_command() -> None:
    """The command (``mesh._cli``) sits on top: only ``python -m mesh`` (``mesh.__main__``)
    imports it, and ``import mesh`` does not load it."""
    for module, targets in _graph("mesh").items():
        if module.startswith("mesh._cli") or module == "mesh.__main__":
            continue
        assert _matching(targets, "mesh._cli") == [], f"{module} imports the command"
    out = subprocess.run([sys.executable, "-c", "import json, sys, mesh; print(json.dumps("
                          "sorted(sys.modules)))"], capture_output=True, text=True, check=True)
    assert [m for m in json.loads(out.stdout) if m.startswith("mesh._cli")] == []
