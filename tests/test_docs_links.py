"""The guide holds together: every relative link of README.md and the ``docs/*.md`` pages
reaches a file of the checkout (and a heading of it, for ``#anchor`` links, as GitHub names
headings), the README links every docs page, and the README stays a guide (at most 300
lines: the rest lives in ``docs/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_pages import DOCS, PAGES, README, ROOT, name, text

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(page: Path) -> str:
    """The page without its code blocks (a link inside one is shown, not followed)."""
    return re.sub(r"^```.*?^```", "", text(page), flags=re.S | re.M)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but ``-`` and
    ``_`` dropped, spaces as ``-``."""
    found = set()
    for heading in re.findall(r"^#+ (.*)$", _prose(page), re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return found


def test_anchors_are_named_as_github_names_them() -> None:
    assert re.sub(r"[^\w\- ]", "", "Choosing between plans: `meshlayout compare`".lower()
                  ).replace(" ", "-") == "choosing-between-plans-meshlayout-compare"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or not where.is_relative_to(ROOT):
            broken.append(target)
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(target)
    assert broken == []


def test_the_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(text(README))}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


def test_the_readme_stays_a_guide() -> None:
    assert len(text(README).splitlines()) <= 300
