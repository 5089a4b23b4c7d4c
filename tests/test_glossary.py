"""The guide's own words are defined before a reader meets them: the README's glossary
("Words used here") defines *SPMD*, *universe*, *instance* and *family* before any other use
of them in the README, and every page of docs/ that uses one links to the glossary at or
before its first use (in the paragraph of that use, or an earlier one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_pages import PAGES, README, name

TERMS = {"SPMD": re.compile(r"\bSPMD\b"),
         "universe": re.compile(r"\buniverses?\b", re.I),
         "instance": re.compile(r"\binstances?\b", re.I),
         "family": re.compile(r"\bfamil(?:y|ies)\b", re.I)}
GLOSSARY = "## Words used here"
LINK = "README.md#words-used-here"


@pytest.mark.parametrize("term", sorted(TERMS))
def test_the_readme_defines_each_word_before_using_it(term: str) -> None:
    text = README.read_text(encoding="utf-8")
    glossary = text.index(GLOSSARY)
    first = TERMS[term].search(text)
    assert first is not None and first.start() > glossary, (term, text[:first.start()][-200:]
                                                            if first else None)
    assert f"- **{term}**" in text[glossary:text.index("\n## ", glossary + 1)]


@pytest.mark.parametrize("page", [p for p in PAGES if p != README], ids=name)
def test_each_page_links_the_glossary_before_its_first_use_of_a_word(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    used = {t: m.start() for t, pattern in TERMS.items() if (m := pattern.search(text))}
    if not used:
        return
    assert LINK in text, f"{name(page)} uses {sorted(used)} and does not link the glossary"
    paragraph = text.rfind("\n\n", 0, text.index(LINK)) + 1
    early = {t: text[max(0, at - 80):at + 20] for t, at in used.items() if at < paragraph}
    assert early == {}, f"{name(page)} uses these words before linking the glossary"
