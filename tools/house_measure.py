"""The house measures of issue 36, per file, from the source alone (AST and tokens; nothing is
imported).

For every ``.py`` file under the given paths (default: ``src``):

- **longest**: the most code lines of one function, its nested functions (and classes)
  counted in it; a code line is a physical line with a token that is not a comment, and not
  part of a docstring (the function's or a nested one's); decorators are not counted;
- **over 30**: the functions (top-level or methods; a nested one counts in its enclosing one)
  with more than 30 code lines, each named with its length and whether its docstring gives a
  reason (it says why it is "long");
- **type: ignore**: the comments holding one, and how many of them give no reason on the line
  (no text after the ignore's bracket);
- **bare assert**: ``assert`` statements without a message.

Run:  python tools/house_measure.py [PATH ...] [--all] [--json]
      (rows for files with something to report, unless --all; then the totals)
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

LIMIT = 30
"""Functions longer than this must say why in their docstring (issue 36); 40 is the cap."""
_IGNORE = re.compile(r"type:\s*ignore(\[[^\]]*\])?(.*)")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class FileMeasure:
    """The measures of one file."""

    path: str
    longest: int = 0
    longest_name: str = ""
    over: list[str] = field(default_factory=list)
    ignores: int = 0
    ignores_unexplained: int = 0
    bare_asserts: int = 0


def _code_lines(source: str) -> set[int]:
    """The physical lines holding a token that is not a comment (strings included)."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def _docstring_lines(node: ast.AST) -> set[int]:
    """The lines of the docstrings of ``node`` and of every function or class inside it."""
    found: set[int] = set()
    for inner in ast.walk(node):
        if isinstance(inner, (*_FUNCS, ast.ClassDef, ast.Module)) and inner.body:
            first = inner.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                found.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return found


def _outer_functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function not nested in another function (methods too), with its dotted name."""
    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef |
                                                           ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCS):
                yield f"{prefix}{child.name}", child
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def _explains(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    doc = ast.get_docstring(func) or ""
    return re.search(r"\blong\b", doc, re.IGNORECASE) is not None


def measure(path: Path, shown: str) -> FileMeasure:
    """The measures of the file at ``path`` (named ``shown`` in the report)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    code, result = _code_lines(source), FileMeasure(shown)
    for name, func in _outer_functions(tree):
        span = range(func.lineno, (func.end_lineno or func.lineno) + 1)
        n = len(code.intersection(span) - _docstring_lines(func))
        if n > result.longest:
            result.longest, result.longest_name = n, name
        if n > LIMIT:
            result.over.append(f"{name} {n}{'' if _explains(func) else ' (no reason)'}")
    result.bare_asserts = sum(isinstance(n, ast.Assert) and n.msg is None
                              for n in ast.walk(tree))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        found = _IGNORE.search(tok.string) if tok.type == tokenize.COMMENT else None
        if found:
            result.ignores += 1
            result.ignores_unexplained += not found.group(2).strip(" #")
    return result


def files(paths: Sequence[str]) -> Iterator[tuple[Path, str]]:
    """Every ``.py`` file under ``paths``, sorted, with the name it is reported under."""
    for given in paths:
        root = Path(given)
        for path in sorted([root] if root.is_file() else root.rglob("*.py")):
            yield path, str(path)


def report(rows: list[FileMeasure], show_all: bool) -> None:
    """Print a row per file (with something to report, unless ``show_all``), then totals."""
    print(f"{'file':<48} {'longest':>7} {'>30':>4} {'ignore':>6} {'no why':>6} {'assert':>6}")
    for r in rows:
        if show_all or r.over or r.ignores or r.bare_asserts or r.longest > LIMIT:
            print(f"{r.path:<48} {r.longest:>7} {len(r.over):>4} {r.ignores:>6} "
                  f"{r.ignores_unexplained:>6} {r.bare_asserts:>6}")
            for o in r.over:
                print(f"    over {LIMIT}: {o}")
    top = max(rows, key=lambda r: r.longest, default=FileMeasure("-"))
    print(f"\n{len(rows)} files; longest function {top.longest} ({top.path}: "
          f"{top.longest_name}); over {LIMIT}: {sum(len(r.over) for r in rows)}; type: ignore "
          f"{sum(r.ignores for r in rows)} ({sum(r.ignores_unexplained for r in rows)} without "
          f"a reason); bare assert {sum(r.bare_asserts for r in rows)}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("paths", nargs="*", default=["src"], help="files or folders (default src)")
    p.add_argument("--all", action="store_true", help="a row for every file")
    p.add_argument("--json", action="store_true", help="one JSON object per file instead")
    a = p.parse_args(argv)
    rows = [measure(path, shown) for path, shown in files(a.paths)]
    if a.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        report(rows, a.all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
