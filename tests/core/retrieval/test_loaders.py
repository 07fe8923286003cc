"""Loaders: every supported format becomes readable text; bad files are skipped with a reason."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.retrieval.html_text import html_to_text
from core.retrieval.loaders import LoadedDocument, Skipped, iter_path, load_file, rst_to_markdown_headings

HTML_PAGE = """<!doctype html>
<html><head><title>Deploy &amp; Run</title>
<style>body { color: red; }</style>
<script>var secret = "do-not-index";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/x">NavLinkText</a></nav>
<h1>Deploying</h1>
<p>Run the <b>container</b>
   with care.</p>
<h2>Checks</h2>
<ul><li>health</li><li>logs</li></ul>
<pre>line one
  indented line</pre>
<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>
<noscript>enable js</noscript>
</body></html>
"""


def minimal_pdf(text: str, *, title: str = "") -> bytes:
    """A one-page PDF with a single text object, with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    info = f"<< /Title ({title}) >>" if title else "<< >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        info.encode("latin-1"),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref_at = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 6 0 R >>\nstartxref\n{xref_at}\n%%EOF\n".encode()
    return bytes(out)


@pytest.fixture
def docs_folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guides" / "deep").mkdir(parents=True)
    (root / "drafts").mkdir()
    (root / ".git").mkdir()
    (root / "README.md").write_text("# Relay Guide\n\nHello **team**.\n", encoding="utf-8")
    (root / "notes.txt").write_text("plain notes\nsecond line\n", encoding="utf-8")
    (root / "guides" / "deploy.html").write_text(HTML_PAGE, encoding="utf-8")
    (root / "guides" / "deep" / "manual.pdf").write_bytes(minimal_pdf("Hello from the PDF", title="Manual"))
    (root / "guides" / "intro.rst").write_text("Intro\n=====\n\nText.\n\nPart\n----\n\nMore.\n", encoding="utf-8")
    (root / "drafts" / "wip.md").write_text("# WIP\n\nunfinished\n", encoding="utf-8")
    (root / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "empty.txt").write_bytes(b"")
    (root / "data.bin").write_bytes(b"\x00\x01")
    (root / ".git" / "config.md").write_text("# hidden\n", encoding="utf-8")
    return root


def _by_name(results: list[LoadedDocument | Skipped]) -> dict[str, LoadedDocument | Skipped]:
    return {r.uri.rsplit("/", 1)[-1]: r for r in results}


def test_folder_walk_loads_every_format_in_a_stable_order(docs_folder: Path) -> None:
    results = list(iter_path(docs_folder))
    assert [r.uri for r in results] == [r.uri for r in iter_path(docs_folder)]
    by_name = _by_name(results)
    assert "config.md" not in by_name  # hidden folders are skipped

    readme = by_name["README.md"]
    assert isinstance(readme, LoadedDocument)
    assert readme.title == "Relay Guide"
    assert readme.uri == (docs_folder / "README.md").resolve().as_uri()
    assert readme.content_hash == hashlib.sha256(readme.text.encode()).hexdigest()

    notes = by_name["notes.txt"]
    assert isinstance(notes, LoadedDocument) and notes.title == "notes" and "second line" in notes.text

    html = by_name["deploy.html"]
    assert isinstance(html, LoadedDocument)
    assert html.title == "Deploy & Run"
    assert "# Deploying" in html.text and "## Checks" in html.text
    assert "Run the container with care." in html.text
    for junk in ("do-not-index", "color: red", "NavLinkText", "enable js", "<p>"):
        assert junk not in html.text

    pdf = by_name["manual.pdf"]
    assert isinstance(pdf, LoadedDocument)
    assert pdf.title == "Manual"
    assert "Hello from the PDF" in pdf.text and pdf.text.startswith("# Page 1")

    rst = by_name["intro.rst"]
    assert isinstance(rst, LoadedDocument) and rst.title == "Intro"
    assert "# Intro" in rst.text and "## Part" in rst.text


def test_bad_files_are_skipped_with_reasons_and_do_not_stop_the_walk(docs_folder: Path) -> None:
    by_name = _by_name(list(iter_path(docs_folder)))
    image, empty, binary = by_name["image.md"], by_name["empty.txt"], by_name["data.bin"]
    assert isinstance(image, Skipped) and "binary" in image.reason
    assert isinstance(empty, Skipped) and "empty" in empty.reason
    assert isinstance(binary, Skipped) and "not a supported type" in binary.reason
    assert isinstance(by_name["README.md"], LoadedDocument)


def test_include_and_exclude_globs(docs_folder: Path) -> None:
    only_md = _by_name(list(iter_path(docs_folder, include=["*.md"], exclude=["drafts"])))
    assert set(only_md) == {"README.md", "image.md"}
    guides = _by_name(list(iter_path(docs_folder, include=["guides/**"], exclude=["**/*.pdf"])))
    assert set(guides) == {"deploy.html", "intro.rst"}
    nested = _by_name(list(iter_path(docs_folder, include=["**/*.md"], exclude=["image.md"])))
    assert set(nested) == {"README.md", "wip.md"}


def test_a_single_file_and_a_missing_path(docs_folder: Path) -> None:
    assert [r.uri.rsplit("/", 1)[-1] for r in iter_path(docs_folder / "notes.txt")] == ["notes.txt"]
    with pytest.raises(FileNotFoundError):
        list(iter_path(docs_folder / "nope"))


def test_text_in_windows_1252_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "legacy.txt"
    path.write_bytes("caf\u00e9 cr\u00e8me".encode("cp1252"))
    document = load_file(path)
    assert isinstance(document, LoadedDocument) and document.text == "caf\u00e9 cr\u00e8me"


def test_a_broken_pdf_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\nthis is not really a pdf")
    assert isinstance(load_file(path), Skipped)


def test_html_title_falls_back_to_first_h1_and_tables_keep_cells() -> None:
    page = html_to_text("<body><h1>Only Heading</h1><table><tr><td>a</td><td>b</td></tr></table></body>")
    assert page.title == "Only Heading"
    assert "a | b" in page.text


def test_rst_overlined_titles() -> None:
    text, title = rst_to_markdown_headings("=====\nTop\n=====\n\nbody\n\nSub\n---\n")
    assert title == "Top"
    assert text.splitlines()[0] == "# Top" and "## Sub" in text
