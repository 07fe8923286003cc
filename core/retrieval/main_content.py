"""Extract a web page's main content as Markdown (trafilatura), headings as `#` lines; tiny pages use html_text."""

from __future__ import annotations

import logging
import re

from core.retrieval.html_text import HtmlText, html_to_text

# trafilatura warns "discarding data: None" for every page it finds too little in; we fall back then,
# so that is no news to an operator.
logging.getLogger("trafilatura").setLevel(logging.ERROR)

# Below this many characters trafilatura does not trust its own extraction and, in its balanced
# mode, swaps in a whole-page text dump (navigation included, headings lost). Our own parser is the
# better whole-page reading for such small pages: it drops scripts and navigation and keeps headings.
SHORT_EXTRACTION_CHARS = 250

_FENCE_RE = re.compile(r"^\s*(```|~~~)")
# A line that starts its own Markdown block even when indented: list item, table row, heading, quote.
_BLOCK_START_RE = re.compile(r"^(?:[-*+]\s|\d+[.)]\s|\||#{1,6}\s|>)")


def _tidy(markdown: str) -> str:
    """Join the indented continuation lines that HTML source indentation leaves inside paragraphs.

    trafilatura keeps the newlines and indentation of the page's source inside a paragraph with
    inline markup; they cost tokens and read as stray indentation. Code fences are left alone.
    """
    out: list[str] = []
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE_RE.match(line):
            in_fence = not in_fence
            out.append(line.rstrip())
            continue
        if in_fence:
            out.append(line)
            continue
        stripped = line.strip()
        continuation = line[:1] in (" ", "\t") and stripped and out and out[-1].strip()
        if continuation and not _BLOCK_START_RE.match(stripped):
            out[-1] = out[-1].rstrip() + " " + stripped
        else:
            out.append(line.rstrip())
    return "\n".join(out).strip()


def extract_main_content(html: str, *, url: str | None = None) -> HtmlText:
    """The page's main text as Markdown (no navigation, banners, sidebars or footers) and its title.

    trafilatura only parses the string it is given: fetching stays with the URL guard.
    """
    import trafilatura  # imported here: lxml and its models load only when a page is read

    document = trafilatura.bare_extraction(
        html,
        url=url,
        output_format="python",
        # Formatting on is what makes headings `#` lines (trafilatura's Markdown output).
        include_formatting=True,
        include_comments=False,
        include_tables=True,
        include_links=False,
        include_images=False,
        with_metadata=True,
    )
    text = _tidy(document.text or "") if document is not None else ""
    title = (document.title or "").strip() if document is not None else ""
    if len(text) < SHORT_EXTRACTION_CHARS:
        fallback = html_to_text(html)
        return HtmlText(title=fallback.title or title, text=fallback.text)
    return HtmlText(title=title or html_to_text(html).title, text=text)


_WARM_UP_PAGE = (
    "<html><head><title>Warm-up</title></head><body><nav>Home</nav><main><h1>Warm-up</h1>"
    + "<p>A short paragraph of ordinary text, written once so the extractor loads what it needs.</p>" * 8
    + "</main><footer>Footer</footer></body></html>"
)

_WARM_UP_SHORT_PAGE = "<html><body><div>Short text here.</div></body></html>"


def warm_up() -> None:
    """Loads trafilatura and what its first extraction builds (lxml, language and date tables) at start, in a
    worker thread: the first page a question reads then neither imports it on the event loop's time nor grows
    the process by ~40 MB mid-answer."""
    extract_main_content(_WARM_UP_PAGE, url="https://example.com/warm-up")
    # A page too short to trust takes the fallback extractors, whose word lists (~8 MB) load on first use.
    extract_main_content(_WARM_UP_SHORT_PAGE, url="https://example.com/warm-up-short")
    # A host the quick domain pattern does not read (no dot: localhost, an address) loads the public-suffix trie the
    # page's links are checked against (~11,000 objects, walked by every full garbage collection unless frozen).
    extract_main_content(_WARM_UP_PAGE, url="https://localhost/warm-up")
