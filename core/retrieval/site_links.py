"""Links out of an HTML page and page URLs out of a sitemap, as absolute http(s) URLs without fragments."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from html.parser import HTMLParser

from yarl import URL

from core.retrieval.html_text import sniff_html_charset

HTTP_SCHEMES = frozenset({"http", "https"})


def normalise(raw: str, *, base: URL | None = None) -> URL | None:
    """An absolute http(s) URL without its fragment (the same page), or None for anything else."""
    if not raw.strip():
        return None
    try:
        url = URL(raw.strip())
        if base is not None and not url.is_absolute():
            url = base.join(url)
    except (ValueError, TypeError):
        return None
    if url.scheme not in HTTP_SCHEMES or not url.raw_host:
        return None
    return url.with_fragment(None)


def same_site(url: URL, site: URL) -> bool:
    """Same scheme, host and port: what a same-site crawl may follow."""
    return url.origin() == site.origin()


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "base" and self.base is None and values.get("href"):
            self.base = values["href"]
        elif tag in ("a", "area") and values.get("href"):
            # rel=nofollow is the author asking crawlers not to follow; we honour it like robots.txt.
            if "nofollow" not in values.get("rel", "").lower().split():
                self.hrefs.append(values["href"])


def page_links(body: bytes, *, page_url: str, charset: str | None = None) -> list[URL]:
    """Every followable link of an HTML page, resolved against its <base> or URL, in page order, once each."""
    try:
        text = body.decode(charset or sniff_html_charset(body) or "utf-8", errors="replace")
    except LookupError:  # a charset name Python does not know
        text = body.decode("utf-8", errors="replace")
    parser = _Anchors()
    try:
        parser.feed(text)
        parser.close()
    except (AssertionError, ValueError):  # html.parser gives up on some broken markup; keep what it read
        pass
    base = normalise(parser.base, base=URL(page_url)) if parser.base else None
    base = base or URL(page_url)
    links: list[URL] = []
    seen: set[URL] = set()
    for href in parser.hrefs:
        url = normalise(href, base=base)
        if url is not None and url not in seen:
            seen.add(url)
            links.append(url)
    return links


@dataclass(frozen=True, kw_only=True)
class Sitemap:
    """What one sitemap lists: pages, or (a sitemap index) further sitemaps."""

    pages: tuple[URL, ...] = ()
    sitemaps: tuple[URL, ...] = ()


def parse_sitemap(body: bytes, *, sitemap_url: str) -> Sitemap:
    """Read an XML sitemap or sitemap index (sitemaps.org), or a text sitemap of one URL a line.

    ElementTree resolves no external entities, and the body is already capped in bytes by the fetch.
    Raises ValueError when the body is neither.
    """
    base = URL(sitemap_url)
    stripped = body.lstrip()
    if not stripped.startswith(b"<"):
        text = body.decode("utf-8", errors="replace")
        pages = [url for line in text.splitlines() if (url := normalise(line, base=base)) is not None]
        return Sitemap(pages=tuple(pages))
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as error:
        raise ValueError(f"the sitemap is not valid XML ({error})") from None
    kind = _local_name(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise ValueError(f"the document is not a sitemap (its root element is <{kind}>)")
    locations: list[URL] = []
    for element in root:
        for child in element:
            if _local_name(child.tag) == "loc" and child.text:
                url = normalise(child.text, base=base)
                if url is not None:
                    locations.append(url)
    if kind == "sitemapindex":
        return Sitemap(sitemaps=tuple(locations))
    return Sitemap(pages=tuple(locations))


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
