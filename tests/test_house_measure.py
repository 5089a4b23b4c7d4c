"""``tools/house_measure.py`` (issue 36's measures) on small sources whose answers are counted
by hand: code lines of a function with a nested one, docstrings and comments left out; the
functions over 30 lines and whether they say why; ``type: ignore`` with and without a
reason; bare asserts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "house_measure.py"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_measure", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["house_measure"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _measure(tool: ModuleType, tmp_path: Path, source: str) -> object:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    return tool.measure(path, "m.py")


def test_a_nested_function_counts_in_its_enclosing_one_without_docstrings_or_comments(
        tool: ModuleType, tmp_path: Path) -> None:
    source = '''
@decorator
def outer(x):
    """Two
    docstring lines."""
    # a comment
    y = (x +
         1)

    def inner():
        """Inner's docstring."""
        return y
    return inner


def short():
    return 1
'''
    # code lines of outer: def, y = (x +, 1), def inner, return y, return inner
    r = _measure(tool, tmp_path, source)
    assert (r.longest, r.longest_name, r.over) == (6, "outer", [])


def test_functions_over_30_lines_are_named_with_whether_they_say_why(
        tool: ModuleType, tmp_path: Path) -> None:
    def body(indent: str, n: int = 30) -> str:
        return "".join(f"{indent}a{i} = {i}\n" for i in range(n))

    source = (f"class C:\n    def m(self):\n{body(' ' * 8)}\n"
              f"def f():\n    'Long because it lists thirty names.'\n{body(' ' * 4)}\n"
              f"def g():\n{body(' ' * 4, 29)}")
    r = _measure(tool, tmp_path, source)  # each: its def line and its assignments
    assert r.over == ["C.m 31 (no reason)", "f 31"] and r.longest == 31


def test_type_ignores_and_bare_asserts_are_counted(tool: ModuleType, tmp_path: Path) -> None:
    source = '''
x = f()  # type: ignore[attr-defined]
y = g()  # type: ignore[arg-type]  # g's stub is wrong
s = "# type: ignore in a string is no comment"
assert x
assert y, "y is set"
'''
    r = _measure(tool, tmp_path, source)
    assert (r.ignores, r.ignores_unexplained, r.bare_asserts) == (2, 1, 1)
