"""Whole-page HTML to text, headings as `#` lines: main_content's fallback for pages too small to extract from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

# Elements whose content is never reading matter.
SKIPPED_TAGS = frozenset(
    {"script", "style", "nav", "noscript", "template", "svg", "canvas", "iframe", "object", "button"}
)
# Elements that start a new paragraph.
BLOCK_TAGS = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote",
        "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "form", "fieldset",
        "figure", "figcaption", "details", "summary", "address", "hr", "body", "html",
    }
)  # fmt: skip
HEADING_TAGS = {f"h{n}": n for n in range(1, 7)}
VOID_TAGS = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr", "area", "base", "col", "source"})
_SPACE_RE = re.compile(r"[ \t\r\n\f\v]+")


@dataclass(frozen=True, kw_only=True)
class HtmlText:
    """Readable text of a page and the title found in it (empty when none)."""

    title: str
    text: str


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.title_parts: list[str] = []
        self.first_h1 = ""
        self._line: list[str] = []
        self._skip_depth = 0
        self._in_title = False
        self._pre_depth = 0
        self._heading_level = 0
        # List items and table rows are lines of one block, not paragraphs of their own.
        self._tight = False
        self._last_tight = False

    # A paragraph ends: the words gathered so far become one block.
    def _flush(self) -> None:
        raw = "".join(self._line)
        self._line = []
        if self._pre_depth:
            text = raw.strip("\n")
        else:
            text = _SPACE_RE.sub(" ", raw).strip()
        if not text:
            return
        if self._heading_level:
            if not self.first_h1 and self._heading_level == 1:
                self.first_h1 = text
            text = "#" * self._heading_level + " " + text
        if self._tight and self._last_tight and self.blocks:
            self.blocks[-1] += "\n" + text
        else:
            self.blocks.append(text)
        self._last_tight = self._tight

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in SKIPPED_TAGS:
            if tag not in VOID_TAGS:
                self._skip_depth += 1
            return
        if self._skip_depth:
            return
        if tag in HEADING_TAGS:
            self._flush()
            self._heading_level = HEADING_TAGS[tag]
        elif tag == "pre":
            self._flush()
            self._pre_depth += 1
        elif tag == "li":
            self._flush()
            self._tight = True
            self._line.append("- ")
        elif tag == "tr":
            self._flush()
            self._tight = True
        elif tag in ("td", "th"):
            if self._line and "".join(self._line).strip():
                self._line.append(" | ")
        elif tag == "br":
            if self._pre_depth:
                self._line.append("\n")
            else:
                self._flush()
        elif tag in BLOCK_TAGS:
            self._flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if tag in SKIPPED_TAGS:
            if tag not in VOID_TAGS and self._skip_depth:
                self._skip_depth -= 1
            return
        if self._skip_depth:
            return
        if tag in HEADING_TAGS:
            self._flush()
            self._heading_level = 0
        elif tag == "pre":
            self._flush()
            self._pre_depth = max(0, self._pre_depth - 1)
        elif tag in ("li", "tr"):
            self._flush()
            self._tight = False
        elif tag in BLOCK_TAGS:
            self._flush()
            self._tight = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip_depth:
            self._line.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def html_to_text(html: str) -> HtmlText:
    """Extract readable text: no scripts, styles or navigation; headings as `#` lines."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    title = _SPACE_RE.sub(" ", "".join(parser.title_parts)).strip() or parser.first_h1
    return HtmlText(title=title, text="\n\n".join(parser.blocks))


_META_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.IGNORECASE)


def sniff_html_charset(head: bytes) -> str | None:
    """Return the charset a page declares in a <meta> tag within its first bytes, if any."""
    match = _META_CHARSET_RE.search(head[:4096])
    return match.group(1).decode("ascii") if match else None
