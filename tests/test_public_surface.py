"""Every public name is shown in use: each name in a package's ``__all__`` is used in the code
of a test, a benchmark, an example or a Python block of the guide (README.md and every
``docs/*.md`` page; an export nobody uses is a private name not yet made private).

A use is a name in code, read from the syntax tree: a name, an attribute or an imported name
(``from mesh import blast``, ``mesh.blast``).  A mention in a docstring, a comment, a string
or a page's prose is no use; a page counts only inside its ``python`` (and ``py``) blocks,
whose doctest examples are parsed as the code they are.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.metadata
import re
from functools import cache
from pathlib import Path

import pytest
from doc_pages import PAGES

ROOT = Path(__file__).resolve().parents[1]
USERS = ("tests", "property_tests", "bench", "examples")
_BLOCK = re.compile(r"^```(?:python|py)\n(.*?)^```", re.S | re.M)


def names_in(tree: ast.AST) -> set[str]:
    """The names a syntax tree uses: names, attributes, and imported names (each dotted
    part of ``import a.b``)."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.update(node.name.split("."))
    return used


def readme_code(text: str) -> list[str]:
    """The code of a page's Python blocks: each doctest example's source, or a block
    without ``>>>`` whole."""
    code = []
    for block in _BLOCK.findall(text):
        if ">>>" in block:
            code += [ex.source for ex in doctest.DocTestParser().get_examples(block)]
        else:
            code.append(block)
    return code


@cache
def _used() -> frozenset[str]:
    sources = [p.read_text() for d in USERS for p in sorted((ROOT / d).rglob("*.py"))]
    sources += [code for page in PAGES for code in readme_code(page.read_text(encoding="utf-8"))]
    return frozenset().union(*(names_in(ast.parse(s)) for s in sources))


def test_uses_are_read_from_code_not_prose() -> None:
    """The reader itself: a docstring, a comment, a string or prose is no use."""
    tree = ast.parse('"""blast is mentioned"""\n# so is drop\nx = "survive"\nmesh.render(v)\n'
                     "from mesh import concatenate as join\nimport mesh.svg\n")
    assert names_in(tree) == {"x", "mesh", "render", "v", "concatenate", "svg"}
    readme = ("Use `blast` in prose.\n\n```python\n>>> from mesh import drop\n>>> drop\n"
              "'survive'\n\n```\n\n```text\nexplain\n```\n\n```py\nsubstitute(1)\n```\n")
    code = readme_code(readme)
    assert code == ["from mesh import drop\n", "drop\n", "substitute(1)\n"]


@pytest.mark.parametrize("package", ["layout", "mesh", "backend"])
def test_every_exported_name_is_used_outside_the_package(package: str) -> None:
    exported = importlib.import_module(package).__all__
    unused = [n for n in exported if n not in _used()]
    assert unused == []


@pytest.mark.parametrize("package", ["layout", "mesh", "backend"])
def test_dir_shows_the_public_names_and_no_stray_import(package: str) -> None:
    """``dir(package)`` lists ``__all__``, dunders and private names only: a module the
    package imports for itself (``warnings``, ``sys``) is imported under a private name."""
    module = importlib.import_module(package)
    stray = [n for n in dir(module) if not n.startswith("_") and n not in module.__all__]
    assert stray == []


@pytest.mark.parametrize("package", ["layout", "mesh", "backend"])
def test_the_version_is_pyproject_s(package: str) -> None:
    try:
        installed = importlib.metadata.version("meshlayout")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("meshlayout is not installed: __version__ is 'unknown' in a source tree")
    found = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    assert importlib.import_module(package).__version__ == installed == found.group(1)
