"""Same-site crawls on a loopback site: robots.txt, sitemaps, depth/page/byte caps, off-site and private links."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from core.retrieval.crawl import CrawlOptions, CrawlRootError, CrawlSkip, FetchPolicy, crawl
from core.retrieval.loaders import LoadedDocument
from core.retrieval.site_links import page_links, parse_sitemap
from tests.support.loopback_site import LoopbackSite

LOOPBACK = FetchPolicy(allowed_networks=["127.0.0.1/32"], timeout_s=10)


def page(title: str, body: str, *links: str) -> str:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
        f"<p>{body}</p><ul>{anchors}</ul></body></html>"
    )


class Site(LoopbackSite):
    """A loopback web site whose pages and robots.txt a test can change; it records every path asked for."""

    PATH_PREFIX = "/"

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[str, tuple[str, str]] = {}  # path -> (content type, body)
        self.robots: str | int = "User-agent: *\nDisallow: /private/\n"

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        if path == "/robots.txt":
            if isinstance(self.robots, int):
                return web.Response(status=self.robots)
            return web.Response(text=self.robots, content_type="text/plain")
        if path == "/to-private":
            raise web.HTTPFound("http://10.0.0.1/admin")
        if path == "/to-elsewhere":
            raise web.HTTPFound(f"http://localhost:{self.port}/a")
        if path not in self.pages:
            raise web.HTTPNotFound()
        content_type, body = self.pages[path]
        return web.Response(text=body, content_type=content_type)

    def page_hits(self) -> list[str]:
        return [hit for hit in self.hits if hit != "/robots.txt"]


def build_site(site: Site, elsewhere: Site) -> None:
    site.pages = {
        "/": ("text/html", page(
            "Home", "The relay handbook starts here.",
            "/a", "/a#section", "/private/secret", f"{elsewhere.base}/stolen", "http://10.0.0.1/internal",
            "/to-private", "mailto:ops@example.com",
        )),
        "/a": ("text/html", page("Alpha", "Alpha explains the nightly backups.", "/b", "/")),
        "/b": ("text/html", page("Beta", "Beta explains restoring a backup.", "/c")),
        "/c": ("text/html", page("Gamma", "Gamma is three links deep.")),
        "/private/secret": ("text/html", page("Secret", "Robots keep this out.")),
        "/sitemap.xml": ("application/xml", (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{site.base}/a</loc></url><url><loc>{site.base}/c</loc></url>"
            f"<url><loc>{elsewhere.base}/stolen</loc></url></urlset>"
        )),
    }
    elsewhere.pages = {"/stolen": ("text/html", page("Elsewhere", "Another site's page."))}


@pytest.fixture
async def sites() -> AsyncIterator[tuple[Site, Site]]:
    site, elsewhere = Site(), Site()
    await site.start()
    await elsewhere.start()
    build_site(site, elsewhere)
    yield site, elsewhere
    await site.stop()
    await elsewhere.stop()


async def collect(start: str, **kwargs: object) -> tuple[list[LoadedDocument], list[CrawlSkip]]:
    documents: list[LoadedDocument] = []
    skips: list[CrawlSkip] = []
    async for item in crawl(start, **kwargs):  # type: ignore[arg-type]
        (skips if isinstance(item, CrawlSkip) else documents).append(item)  # type: ignore[arg-type]
    return documents, skips


async def test_a_crawl_follows_same_site_links_to_its_depth_and_honours_robots(sites: tuple[Site, Site]) -> None:
    site, elsewhere = sites
    documents, skips = await collect(f"{site.base}/", options=CrawlOptions(depth=2), policy=LOOPBACK)

    assert [d.uri for d in documents] == [f"{site.base}/", f"{site.base}/a", f"{site.base}/b"]
    assert documents[1].title == "Alpha" and "nightly backups" in documents[1].text
    # /c is three links away; robots.txt keeps /private/ out; the fragment is the same page as /a.
    assert "/c" not in site.hits and "/private/secret" not in site.hits
    assert site.hits.count("/a") == 1 and site.hits[0] == "/robots.txt"
    robots = next(s for s in skips if s.uri.endswith("/private/secret"))
    assert "robots.txt" in robots.reason and not robots.keep
    # Another host:port is another site: never asked, even on loopback the guard would allow.
    assert elsewhere.hits == []
    # A same-site page redirecting to a private address is refused by the URL guard, hop by hop.
    refused = next(s for s in skips if s.uri.endswith("/to-private"))
    assert "Refused" in refused.reason and "10.0.0.1" in refused.reason and refused.keep


async def test_page_and_byte_caps_stop_the_crawl(sites: tuple[Site, Site]) -> None:
    site, _ = sites
    documents, _ = await collect(f"{site.base}/", options=CrawlOptions(depth=5, max_pages=2), policy=LOOPBACK)
    assert len(documents) == 2 and len(site.page_hits()) == 2

    site.hits.clear()
    documents, _ = await collect(f"{site.base}/", options=CrawlOptions(depth=5, max_bytes=10), policy=LOOPBACK)
    assert [d.title for d in documents] == ["Home"] and site.page_hits() == ["/"]


async def test_a_sitemap_lists_the_pages_and_off_site_entries_are_dropped(sites: tuple[Site, Site]) -> None:
    site, elsewhere = sites
    documents, _ = await collect(
        f"{site.base}/sitemap.xml", sitemap=True, options=CrawlOptions(depth=0), policy=LOOPBACK
    )
    assert [d.title for d in documents] == ["Alpha", "Gamma"]
    assert "/b" not in site.hits and elsewhere.hits == []

    # With a depth, links from the sitemap's pages are followed too.
    documents, _ = await collect(
        f"{site.base}/sitemap.xml", sitemap=True, options=CrawlOptions(depth=1), policy=LOOPBACK
    )
    assert sorted(d.title for d in documents) == ["Alpha", "Beta", "Gamma", "Home"]


async def test_a_crawl_that_cannot_start_raises_before_yielding(sites: tuple[Site, Site]) -> None:
    site, _ = sites
    # Loopback is refused unless allowed: robots.txt is fetched through the same guard.
    with pytest.raises(CrawlRootError, match="Refused"):
        await collect(f"{site.base}/", policy=FetchPolicy())
    assert site.hits == []

    with pytest.raises(CrawlRootError, match="answered HTTP 404"):
        await collect(f"{site.base}/gone", policy=LOOPBACK)

    site.robots = 503  # unreachable rules: the crawl cannot know what it may read
    with pytest.raises(CrawlRootError, match="robots.txt"):
        await collect(f"{site.base}/", policy=LOOPBACK)

    site.robots = 404  # no robots.txt: everything may be read
    documents, _ = await collect(f"{site.base}/", options=CrawlOptions(depth=1), policy=LOOPBACK)
    assert "/private/secret" in site.hits and len(documents) == 3

    site.robots = "User-agent: relaybot\nDisallow: /\n"
    with pytest.raises(CrawlRootError, match="does not let relaybot read"):
        await collect(f"{site.base}/", policy=LOOPBACK)


def test_links_are_absolute_without_fragments_honour_base_and_nofollow() -> None:
    html = (
        b'<html><head><base href="https://docs.test/guide/"></head><body>'
        b'<a href="intro.html#top">a</a><a href="/b">b</a><a href="intro.html">dup</a>'
        b'<a href="https://other.test/x" rel="nofollow">c</a><a href="javascript:void(0)">d</a></body></html>'
    )
    links = page_links(html, page_url="https://docs.test/index.html")
    assert [str(url) for url in links] == ["https://docs.test/guide/intro.html", "https://docs.test/b"]


def test_sitemap_index_and_text_sitemaps_parse() -> None:
    index = parse_sitemap(
        b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<sitemap><loc>https://d.test/s1.xml</loc></sitemap></sitemapindex>",
        sitemap_url="https://d.test/sitemap.xml",
    )
    assert [str(u) for u in index.sitemaps] == ["https://d.test/s1.xml"] and not index.pages
    text = parse_sitemap(b"https://d.test/a\n\nhttps://d.test/b\n", sitemap_url="https://d.test/sitemap.txt")
    assert [str(u) for u in text.pages] == ["https://d.test/a", "https://d.test/b"]
    with pytest.raises(ValueError, match="not a sitemap"):
        parse_sitemap(b"<html></html>", sitemap_url="https://d.test/sitemap.xml")
