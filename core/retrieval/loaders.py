"""Load documents (Markdown, text, reST, HTML, PDF, Word, PowerPoint, Excel) from files, folders and URLs as text."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from yarl import URL

from core.cpu_work import in_worker
from core.retrieval.html_text import sniff_html_charset
from core.retrieval.main_content import extract_main_content
from core.retrieval.office import CONVERTERS as OFFICE_CONVERTERS
from core.retrieval.url_guard import FetchedResource, FetchError, fetch_url

MAX_FILE_BYTES = 50_000_000
# A NUL byte in the first block means a binary file, whatever its name says.
BINARY_SNIFF_BYTES = 8192
TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
PDF_SUFFIXES = frozenset({".pdf"})
OFFICE_SUFFIXES = {".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx"}
OFFICE_NAMES = {"docx": "Word document", "pptx": "PowerPoint file", "xlsx": "Excel workbook"}


@dataclass(frozen=True, kw_only=True)
class LoadedDocument:
    """A document's text, ready for chunking; content_hash is the sha256 of text."""

    uri: str
    title: str
    text: str
    content_hash: str


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A file that was not loaded, and why, in words a user can act on."""

    uri: str
    reason: str


def _document(uri: str, title: str, text: str) -> LoadedDocument | Skipped:
    text = text.strip()
    if not text:
        return Skipped(uri=uri, reason="it has no readable text")
    return LoadedDocument(
        uri=uri, title=title.strip(), text=text, content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest()
    )


def _decode_text(data: bytes, charset: str | None = None) -> str | None:
    """Decode text bytes: declared charset, else UTF-8 (with BOM), else Windows-1252; None if binary."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    for encoding in (charset, "utf-8-sig", "cp1252"):
        if not encoding:
            continue
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    return None


_MD_H1_RE = re.compile(r"^ {0,3}#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_RST_ADORNMENT_RE = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}[ \t]*$")


def _markdown_title(text: str) -> str:
    match = _MD_H1_RE.search(text)
    return match.group(1).strip() if match else ""


def rst_to_markdown_headings(text: str) -> tuple[str, str]:
    """Rewrite reStructuredText section titles as `#` lines (level by order of adornment); return text, title."""
    lines = text.splitlines()
    styles: list[tuple[str, bool]] = []  # adornment char, overlined — in order first seen
    out: list[str] = []
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        over = _RST_ADORNMENT_RE.match(line)
        # Overline + title + underline.
        if over and i + 2 < len(lines) and lines[i + 1].strip() and _RST_ADORNMENT_RE.match(lines[i + 2]):
            if lines[i + 2].strip()[0] == over.group(1):
                style, name = (over.group(1), True), lines[i + 1].strip()
                i += 3
                if style not in styles:
                    styles.append(style)
                out.append("#" * min(styles.index(style) + 1, 6) + " " + name)
                title = title or name
                continue
        under = _RST_ADORNMENT_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if line.strip() and not over and under and len(lines[i + 1].rstrip()) >= len(line.rstrip()):
            style, name = (under.group(1), False), line.strip()
            i += 2
            if style not in styles:
                styles.append(style)
            out.append("#" * min(styles.index(style) + 1, 6) + " " + name)
            title = title or name
            continue
        out.append(line)
        i += 1
    return "\n".join(out), title


def _pdf_text(data: bytes, uri: str, fallback_title: str) -> LoadedDocument | Skipped:
    """Text per page, each page under a `# Page N` heading so chunks can cite pages."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception:  # noqa: BLE001 — any decryption failure means we cannot read it
                return Skipped(uri=uri, reason="the PDF is encrypted")
        pages = []
        for number, page in enumerate(reader.pages, start=1):
            page_text = (page.extract_text() or "").strip()
            if page_text:
                pages.append(f"# Page {number}\n\n{page_text}")
        meta_title = ""
        if reader.metadata is not None and reader.metadata.title:
            meta_title = str(reader.metadata.title)
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        return Skipped(uri=uri, reason=f"the PDF could not be read ({type(exc).__name__}: {exc})")
    if not pages:
        return Skipped(uri=uri, reason="the PDF has no extractable text (it may be scanned images)")
    return _document(uri, meta_title or fallback_title, "\n\n".join(pages))


def _office_text(data: bytes, uri: str, kind: str, fallback_title: str) -> LoadedDocument | Skipped:
    try:
        converted = OFFICE_CONVERTERS[kind](data)
    except Exception as exc:  # noqa: BLE001 — a damaged or encrypted zip can fail in zipfile, lxml or the library
        return Skipped(uri=uri, reason=f"the {OFFICE_NAMES[kind]} could not be read ({type(exc).__name__}: {exc})")
    return _document(uri, converted.title or fallback_title, converted.text)


def document_from_bytes(
    data: bytes, *, uri: str, kind: str, fallback_title: str, charset: str | None = None
) -> LoadedDocument | Skipped:
    """Turn raw bytes of a kind ("markdown", "text", "rst", "html", "pdf", "docx", "pptx", "xlsx") into a document."""
    if kind == "pdf":
        return _pdf_text(data, uri, fallback_title)
    if kind in OFFICE_CONVERTERS:
        return _office_text(data, uri, kind, fallback_title)
    if kind == "html":
        charset = charset or sniff_html_charset(data)
    text = _decode_text(data, charset)
    if text is None:
        return Skipped(uri=uri, reason="it looks like a binary file, not text")
    if kind == "html":
        # Main content only: navigation, banners, sidebars and footers are not the document.
        page = extract_main_content(text, url=uri if uri.startswith(("http://", "https://")) else None)
        return _document(uri, page.title or fallback_title, page.text)
    if kind == "rst":
        text, title = rst_to_markdown_headings(text)
        return _document(uri, title or fallback_title, text)
    if kind == "markdown":
        return _document(uri, _markdown_title(text) or fallback_title, text)
    return _document(uri, fallback_title, text)


def _kind_for_suffix(suffix: str) -> str | None:
    suffix = suffix.lower()
    if suffix in (".md", ".markdown"):
        return "markdown"
    if suffix == ".txt":
        return "text"
    if suffix == ".rst":
        return "rst"
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in PDF_SUFFIXES:
        return "pdf"
    return OFFICE_SUFFIXES.get(suffix)


def kind_for_file(filename: str, content_type: str, *, kinds: frozenset[str]) -> str | None:
    """The kind among `kinds` a file's name says (its suffix), else its content type; None when neither says one."""
    for kind in (_kind_for_suffix(PurePosixPath(filename).suffix),
                 _CONTENT_KINDS.get(content_type.split(";")[0].strip().lower())):
        if kind in kinds:
            return kind
    return None


def load_file(path: Path) -> LoadedDocument | Skipped:
    """Load one file; any problem becomes a Skipped with the reason."""
    uri = path.resolve().as_uri()
    kind = _kind_for_suffix(path.suffix)
    if kind is None:
        return Skipped(uri=uri, reason=f"{path.suffix or 'files without an extension'} is not a supported type")
    try:
        size = path.stat().st_size
        if size == 0:
            return Skipped(uri=uri, reason="the file is empty")
        if size > MAX_FILE_BYTES:
            return Skipped(uri=uri, reason=f"the file is {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
        data = path.read_bytes()
    except OSError as exc:
        return Skipped(uri=uri, reason=f"it could not be read ({exc.strerror or exc})")
    return document_from_bytes(data, uri=uri, kind=kind, fallback_title=path.stem)


def _matches(relative: str, patterns: Sequence[str]) -> bool:
    """Glob match against the path relative to the root and against the file name.

    `*` crosses folders (fnmatch), and a leading `**/` also matches at the top level.
    """
    name = PurePosixPath(relative).name
    for pattern in patterns:
        candidates = [pattern]
        if pattern.startswith("**/"):
            candidates.append(pattern[3:])
        for candidate in candidates:
            if fnmatch.fnmatchcase(relative, candidate) or fnmatch.fnmatchcase(name, candidate):
                return True
    return False


def _dir_excluded(relative: str, exclude: Sequence[str]) -> bool:
    # "build", "build/", "build/**" and "**/build/**" all prune the folder itself.
    trimmed = [p.rstrip("/").removesuffix("/**").removesuffix("/*") for p in exclude]
    return _matches(relative, [p for p in trimmed if p])


def iter_path(
    path: Path, *, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> Iterator[LoadedDocument | Skipped]:
    """Load a file, or every file under a folder (sorted, hidden entries skipped), filtered by globs.

    Blocking disk and CPU work: run it in a thread. A bad file yields a Skipped and the walk goes on.
    """
    if path.is_file():
        yield load_file(path)
        return
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is neither a file nor a folder.")
    root = path.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        current = Path(dirpath)
        relative_dir = current.relative_to(root).as_posix()
        # Pruning in place keeps os.walk from descending, and sorting makes the order stable.
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and not _dir_excluded(d if relative_dir == "." else f"{relative_dir}/{d}", exclude)
        )
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            relative = name if relative_dir == "." else f"{relative_dir}/{name}"
            if include and not _matches(relative, include):
                continue
            if exclude and _matches(relative, exclude):
                continue
            yield load_file(current / name)


_CONTENT_KINDS = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/x-rst": "rst",
    "text/prs.fallenstein.rst": "rst",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}


def _url_title(url: str) -> str:
    parsed = URL(url)
    name = PurePosixPath(parsed.path).name
    return name or parsed.host or url


def _without_partial_character(data: bytes) -> bytes:
    """A body cut at a byte cap may end inside a UTF-8 character; drop that piece so it still decodes
    as UTF-8 (in a one-byte encoding this drops at most one character)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data  # an ASCII byte: nothing is cut in half
        if byte >= 0xC0:  # the lead byte of a sequence this long
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if length > back else data
    return data


def document_from_fetch(resource: FetchedResource) -> LoadedDocument:
    """Turn a fetched body into a document, or raise FetchError saying why it has no text."""
    kind = _CONTENT_KINDS.get(resource.content_type, "text")
    if kind == "text":
        # Markdown is often served as text/plain; the URL's suffix tells.
        kind = _kind_for_suffix(PurePosixPath(URL(resource.final_url).path).suffix) or "text"
        if kind not in ("markdown", "rst", "text"):
            kind = "text"  # a binary format served as text/plain is not that format
    result = document_from_bytes(
        _without_partial_character(resource.body) if resource.truncated else resource.body,
        uri=resource.url,
        kind=kind,
        fallback_title=_url_title(resource.final_url),
        charset=resource.charset,
    )
    if isinstance(result, Skipped):
        raise FetchError(f"{resource.url} was fetched but could not be read: {result.reason}.")
    return result


async def load_url(
    url: str,
    *,
    allow_private: bool = False,
    allowed_networks: Sequence[str] = (),
    max_bytes: int = 5_000_000,
    timeout_s: float = 20.0,
) -> LoadedDocument:
    """Fetch url through the SSRF guard and load it; raises UrlRefused or FetchError with a sentence.

    The document's uri is the URL as given, so re-ingesting it replaces the same document.
    """
    resource = await fetch_url(
        url, allow_private=allow_private, allowed_networks=allowed_networks, max_bytes=max_bytes, timeout_s=timeout_s
    )
    # PDF parsing and HTML extraction are CPU work; keep them off the event loop.
    return await in_worker(document_from_fetch, resource)
