"""The guide's pages, for the tests that check them: README.md and every ``docs/*.md``.

Each example a page shows is checked wherever it lives: Python blocks as doctests
(``test_readme_blocks``), ``meshlayout`` commands against their output
(``test_readme_explain``), JSON schema tables against the JSON (``test_readme_schema``), the
names used (``test_public_surface``), links and flags (``test_docs_links``, ``test_docs_cli``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = (README, *sorted(DOCS.glob("*.md")))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def name(page: Path) -> str:
    """The page's path from the checkout's root: ``README.md``, ``docs/views.md``."""
    return page.relative_to(ROOT).as_posix()


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def python_blocks() -> list[tuple[str, int, str]]:
    """Every ``python`` block of every page: (page name, its index in the page, its text)."""
    return [(name(page), i, block) for page in PAGES
            for i, block in enumerate(PYTHON_BLOCK.findall(text(page)))]
