"""The README is an entry point: short, its two set-up commands first, and every page it links
exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHORT_PAGES = [README, ROOT / "docs"]
"""No prose line over 400 characters in the README or anywhere in docs/ (table rows aside)."""


def test_the_readme_is_at_most_200_lines_and_10_kb() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert len(text.encode()) <= 10 * 1024


def test_the_readme_starts_with_make_demo_and_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("```bash\n") + len("```bash\n")
    commands = [line.split()[:2] for line in text[start:].split("```")[0].strip().splitlines()]
    assert commands == [["make", "demo"], ["make", "test"]]


def test_every_page_the_readme_links_exists() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links its pages"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


@pytest.mark.parametrize("page", SHORT_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_prose_line_is_over_400_characters(page: Path) -> None:
    files = sorted(page.rglob("*.md")) if page.is_dir() else [page]
    long = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > 400 and not line.startswith("|")
    ]
    assert long == []


def test_the_architecture_overview_is_at_most_3000_words_with_the_layers_first() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 3000
    first = next(line for line in text.splitlines() if line.startswith("## "))
    assert first.startswith("## Layers")
