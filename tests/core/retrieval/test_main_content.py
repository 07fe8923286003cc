"""A saved web page is read for its article only, headings kept as chunk headings; tiny pages still read."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.retrieval.chunking import chunk_document
from core.retrieval.loaders import LoadedDocument, load_file
from core.retrieval.main_content import extract_main_content

ARTICLE = Path(__file__).resolve().parents[2] / "fixtures" / "pages" / "article.html"
# Each marker sits in one part of the page that is not the article.
BOILERPLATE = {
    "COOKIE-BANNER-MARKER": "cookie banner",
    "NAV-MARKER": "navigation",
    "SIDEBAR-MARKER": "sidebar",
    "FOOTER-MARKER": "site footer",
    "SHARE-MARKER": "share links",
    "TRACKING-SCRIPT-MARKER": "script",
    "Related posts": "sidebar",
    "Accept all cookies": "cookie banner",
    "Terms of service": "site footer",
    "Search the blog": "search form",
}


def _loaded(tmp_path: Path) -> LoadedDocument:
    page = tmp_path / "article.html"
    shutil.copy(ARTICLE, page)
    document = load_file(page)
    assert isinstance(document, LoadedDocument), document
    return document


def test_a_realistic_page_yields_chunks_with_the_article_and_none_of_the_rest(tmp_path: Path) -> None:
    document = _loaded(tmp_path)
    assert document.title == "Rotating database credentials without downtime"
    chunks = chunk_document(document.text, title=document.title, max_tokens=128, overlap_tokens=16)
    everything = "\n".join(chunk.text for chunk in chunks)
    for marker, part in BOILERPLATE.items():
        assert marker not in everything, f"the {part} leaked into the chunks"
    # The article is there from its first paragraph to its last, table included.
    assert "Every quarter the platform team rotates the passwords" in everything
    assert "pg_stat_activity" in everything
    assert "| Q4 2023 (dual role) | 0 | 17 min |" in everything
    assert "runs on a Tuesday afternoon without an announcement" in everything
    # Source indentation inside a paragraph does not survive as stray line breaks.
    assert "The moment `ALTER ROLE` runs, every new connection with the old password is refused" in everything


def test_the_pages_headings_become_chunk_headings(tmp_path: Path) -> None:
    document = _loaded(tmp_path)
    chunks = chunk_document(document.text, title=document.title, max_tokens=128, overlap_tokens=16)
    paths = {chunk.heading_path for chunk in chunks}
    assert ("Why a single role cannot be rotated safely",) in paths
    assert ("The dual-role scheme", "Checking that no old sessions remain") in paths
    results = next(chunk for chunk in chunks if chunk.heading_path == ("Results",))
    assert "2,314" in results.text


def test_a_tiny_page_is_still_read_with_its_headings_and_without_navigation() -> None:
    page = extract_main_content(
        "<html><head><title>Runbook</title></head><body><nav>Home | Docs</nav>"
        "<h1>Runbook</h1><h2>Restart</h2><p>Restart the relay.</p><ul><li>check logs</li></ul></body></html>"
    )
    assert page.title == "Runbook"
    assert "## Restart" in page.text and "Restart the relay." in page.text and "- check logs" in page.text
    assert "Home" not in page.text


def test_an_empty_page_has_no_text() -> None:
    assert extract_main_content("<html><body></body></html>").text == ""
