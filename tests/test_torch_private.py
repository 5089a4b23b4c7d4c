"""Torch's private names (ARCHITECTURE §8): each sub-package of ``backend`` that uses one reads it
in its ``_torch_private`` module only, which lists it in its ``REGISTRY`` with what it is for.

- every registry entry is still in the installed torch (a failure names the name, the
  sub-package and what it is for): a dotted name resolves, ``DeviceMesh(_k=)`` is a keyword of
  its constructor, ``DeviceMesh()._a`` an attribute of its instances;
- the facade's ``TORCH_READS`` (torch's protocol: attributes ``TorchFacadeMesh`` defines because
  torch's ``DeviceMesh`` code reads them) are still torch's, and are all the members of torch's
  it defines;
- no module under ``src/backend`` but the ``_torch_private`` ones reads a torch private name
  (an AST walk: see :func:`private_reads`), and each of those modules registers what it reads.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
BACKEND = SRC / "backend"
SUBPACKAGES = ("_c10d", "_facade", "_spmd", "_tensor")
PRIVATE = "_torch_private.py"


# ---- the AST rule --------------------------------------------------------------------------------

def _private(segment: str) -> bool:
    return segment.startswith("_") and not segment.startswith("__")


def _root(node: ast.expr) -> ast.expr:
    """The expression an attribute chain (through calls and subscripts) starts from."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for a chain through a call or a subscript."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_reads(source: str) -> list[tuple[int, str, str | None]]:
    """Every read of a torch private name in ``source``: (line, the code, torch's dotted name
    where known).

    Names imported from torch (``import torch``, ``import torch.distributed as dist``, ``from
    torch.x import Y``, at any depth of the module), and names assigned from an expression
    rooted at one of those (``_c = torch.ops.c10d``), are torch's.  A read is: an import of a
    torch module with a private segment (``import torch._dynamo``, ``from torch.a._b import
    x``) or of a private name (``from torch.x import _y``); an attribute with a private name
    (``_x``, not a dunder) on an expression rooted at a torch name (``dist.distributed_c10d.
    _foo``, ``torch.ops._ns``, ``Mesh._hash_key(m)``, ``f()._x``); ``getattr``, ``setattr`` or
    ``hasattr`` of such an expression with a private name as a string constant.  Not seen:
    private attributes of a torch object reached through a parameter or a call's result held
    in an unrelated name (``converted._dim_group_names``), and names built at run time.
    """
    tree = ast.parse(source)
    torch: dict[str, str | None] = {}  # local name -> torch's dotted name (None: derived)
    reads: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "torch":
                    continue
                if any(map(_private, parts)):
                    reads.append((node.lineno, ast.unparse(node), alias.name))
                if alias.asname:
                    torch[alias.asname] = alias.name
                else:
                    torch[parts[0]] = parts[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                node.module.split(".")[0] == "torch":
            module_private = any(map(_private, node.module.split(".")))
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if module_private or _private(alias.name):
                    reads.append((node.lineno, ast.unparse(node), full))
                torch[alias.asname or alias.name] = full
    changed = True
    while changed:  # names derived from torch's
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                root = _root(node.value)
                if isinstance(root, ast.Name) and root.id in torch:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id not in torch:
                            torch[t.id] = None
                            changed = True

    def dotted(node: ast.expr) -> str | None:
        chain = _chain(node)
        if chain is None or torch.get(chain[0]) is None:
            return None
        return ".".join([str(torch[chain[0]]), *chain[1:]])

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in torch:
                reads.append((node.lineno, ast.unparse(node), dotted(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2:
            root, key = _root(node.args[0]), node.args[1]
            if isinstance(root, ast.Name) and root.id in torch and \
                    isinstance(key, ast.Constant) and isinstance(key.value, str) and \
                    _private(key.value):
                base = dotted(node.args[0])
                reads.append((node.lineno, ast.unparse(node),
                              None if base is None else f"{base}.{key.value}"))
    return sorted(set(reads), key=lambda r: (r[0], r[1]))


_CAUGHT = {
    "import torch.distributed as dist\ndist.distributed_c10d._foo()": "_foo",
    "import torch.distributed.distributed_c10d as c10d\nx = c10d._world": "_world",
    "from torch.distributed import distributed_c10d\ndistributed_c10d._bar": "_bar",
    "def f():\n    import torch\n    return torch.ops._ns.op": "_ns",
    "import torch\n_c = torch.ops.c10d\n_c._allgather_base_.default": "_allgather_base_",
    "from torch.distributed.device_mesh import DeviceMesh as M\nM._hash_key(m)": "_hash_key",
    "import torch.distributed as dist\ndist.new_group()._x": "_x",
    "import torch.distributed as dist\ngetattr(dist, '_y')": "_y",
    "from torch.utils._python_dispatch import TorchDispatchMode": "_python_dispatch",
    "from torch.distributed.tensor.placement_types import _StridedShard": "_StridedShard",
    "import torch._dynamo": "_dynamo",
    "from torch._library import opaque_object": "_library",
}
_NOT_CAUGHT = (
    "import torch\ntorch.__version__, torch.ops.c10d.send",
    "import torch.distributed as dist\nself._x, mesh._y, record._digest()",
    "from . import _torch_private\n_torch_private.world",
    "import sys\nsys._getframe(1)",
)


@pytest.mark.parametrize("source", sorted(_CAUGHT))
def test_the_rule_catches_a_private_read(source: str) -> None:
    found = private_reads(source)
    assert found and _CAUGHT[source] in found[0][1], (source, found)


@pytest.mark.parametrize("source", _NOT_CAUGHT)
def test_the_rule_lets_public_and_own_names_be(source: str) -> None:
    assert private_reads(source) == []


def test_no_module_but_the_torch_private_ones_reads_a_torch_private_name() -> None:
    bad = [f"{path.relative_to(SRC)}:{line}: {code}"
           for path in sorted(BACKEND.rglob("*.py")) if path.name != PRIVATE
           for line, code, _ in private_reads(path.read_text(encoding="utf-8"))]
    assert bad == [], ("torch private names read outside the sub-packages' _torch_private "
                       "modules (ARCHITECTURE §8: import each there once, with what it is "
                       "for, and list it in the REGISTRY):\n" + "\n".join(bad))


def test_the_torch_private_modules_are_the_listed_ones() -> None:
    found = sorted(p.parent.name for p in BACKEND.rglob(PRIVATE))
    assert found == sorted(SUBPACKAGES)
    assert not (BACKEND / "_core" / PRIVATE).exists()  # the core stays torch-free


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_each_torch_private_module_registers_every_private_name_it_reads(sub: str) -> None:
    path = BACKEND / sub / PRIVATE
    registry = _module(sub).REGISTRY
    names = [name for name, _ in registry]
    optional = [name for name, _ in getattr(_module(sub), "OPTIONAL", ())]
    assert registry and all(what for _, what in registry), sub
    assert len(set(names)) == len(names), f"backend.{sub}: a name registered twice"
    text = path.read_text(encoding="utf-8")
    said = re.sub(r"\s*\n\s*(# )?", " ", text)  # comments and docstrings as one line
    checked = re.findall(r"checked on torch ([\d., and]+\d)", said)
    assert checked and set(checked) == {"2.13.0, 2.14.1 and 2.15.0"}, (sub, set(checked))
    unlisted = [f"{line}: {code} ({full})" for line, code, full in private_reads(text)
                if full is not None and not any(n == full or n.startswith(full + ".")
                                                or n.startswith(full + "(")
                                                for n in names + optional)]
    assert unlisted == [], f"backend.{sub}.{PRIVATE} reads names its REGISTRY lacks: {unlisted}"


# ---- torch still has them ------------------------------------------------------------------------

def _module(sub: str) -> Any:
    pytest.importorskip("torch")
    return importlib.import_module(f"backend.{sub}._torch_private")


def _resolve(dotted: str) -> Any:
    """Import the longest importable module prefix of ``dotted``, then get the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ImportError(dotted)


def _instance_has(cls: type, attr: str) -> bool:
    """Whether ``cls``'s instances have ``attr``: on the class, on an instance torch builds
    without groups (``DeviceMesh``), or set or read as ``self.<attr>`` in its source."""
    if hasattr(cls, attr):
        return True
    try:
        import torch
        from torch.distributed._mesh_layout import _FlatLayout, _MeshLayout

        mesh = cls("cpu", _layout=_MeshLayout([_FlatLayout(2, 1)]),
                   _rank_map=torch.arange(2, dtype=torch.int), _init_backend=False, _rank=0)
        if hasattr(mesh, attr):
            return True
    except Exception:
        pass
    return re.search(rf"\bself\.{re.escape(attr)}\b", inspect.getsource(cls)) is not None


def torch_lacks(name: str) -> str | None:
    """Why the installed torch lacks the registry name ``name`` (None: it has it)."""
    keyword = re.fullmatch(r"(.+)\((\w+)=\)", name)
    attribute = re.fullmatch(r"(.+)\(\)\.(\w+)", name)
    try:
        if keyword:
            cls, key = _resolve(keyword[1]), keyword[2]
            params = inspect.signature(cls).parameters
            return None if key in params else f"its constructor takes no {key}= ({list(params)})"
        if attribute:
            cls, attr = _resolve(attribute[1]), attribute[2]
            return None if _instance_has(cls, attr) else f"its instances have no {attr}"
        _resolve(name)
        return None
    except (ImportError, AttributeError, RuntimeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_torch_still_has_every_registered_private_name(sub: str) -> None:
    torch = pytest.importorskip("torch")
    missing = [f"torch {torch.__version__} lacks {name} ({why}), which backend.{sub} uses "
               f"for: {what}"
               for name, what in _module(sub).REGISTRY
               for why in [torch_lacks(name)] if why is not None]
    assert missing == [], "\n".join(missing)


def test_the_optional_names_are_registered_exactly_where_torch_has_them() -> None:
    """``_c10d``'s reconfigure names (torch 2.14 on) are in its REGISTRY where torch has them,
    and torch 2.14 on has them: a release that renamed one fails here, not silently falls
    back to creating every group anew."""
    torch = pytest.importorskip("torch")
    private = _module("_c10d")
    names = {name for name, _ in private.REGISTRY}
    optional = [name for name, _ in private.OPTIONAL]
    has = [torch_lacks(name) is None for name in optional]
    assert private.RECONFIGURES == all(has)
    assert all(name in names for name in optional) == private.RECONFIGURES
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert private.RECONFIGURES == ((major, minor) >= (2, 14)), torch.__version__


def test_torch_lacks_names_an_absent_name() -> None:
    pytest.importorskip("torch")
    mesh = "torch.distributed.device_mesh.DeviceMesh"
    assert torch_lacks("torch.distributed.distributed_c10d._no_such_name") is not None
    assert torch_lacks("torch.ops._c10d_functional.no_such_op.default") is not None
    assert torch_lacks(f"{mesh}(_no_such_keyword=)") is not None
    assert torch_lacks(f"{mesh}()._no_such_attribute") is not None
    assert torch_lacks(f"{mesh}(_layout=)") is None
    assert torch_lacks(f"{mesh}()._layout") is None


def test_torch_still_reads_what_the_facade_mesh_defines_for_it() -> None:
    torch = pytest.importorskip("torch")
    from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

    from backend._facade._torch_facade import TorchFacadeMesh

    reads = _module("_facade").TORCH_READS
    names = [name for name, _ in reads]
    missing = [f"torch {torch.__version__}'s DeviceMesh has no {name}, which "
               f"backend._facade's TorchFacadeMesh defines for it: {what}"
               for name, what in reads if not _instance_has(TorchDeviceMesh, name)]
    assert missing == [], "\n".join(missing)
    defined = {n for n in vars(TorchFacadeMesh) if _private(n)}
    assert set(names) <= defined, set(names) - defined
    unlisted = sorted(n for n in defined - set(names) if _instance_has(TorchDeviceMesh, n))
    assert unlisted == [], ("TorchFacadeMesh defines members of torch's DeviceMesh that "
                            f"_facade._torch_private.TORCH_READS does not list: {unlisted}")
