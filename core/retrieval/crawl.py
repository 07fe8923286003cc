"""A same-site crawl from a start URL or a sitemap: every fetch through the URL guard, robots.txt honoured, capped."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.robotparser import RobotFileParser

from yarl import URL

from core.cpu_work import in_worker
from core.retrieval.loaders import LoadedDocument, document_from_fetch
from core.retrieval.site_links import normalise, page_links, parse_sitemap, same_site
from core.retrieval.url_guard import ALLOWED_CONTENT_TYPES, USER_AGENT, FetchedResource, FetchError, fetch_url

DEFAULT_DEPTH = 2
DEFAULT_MAX_PAGES = 200
DEFAULT_MAX_BYTES = 20_000_000
# A sitemap index may name further sitemaps; this many are read at most, so a loop of indexes ends.
MAX_SITEMAPS = 20
ROBOTS_MAX_BYTES = 500_000
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
SITEMAP_TYPES = frozenset({"application/xml", "text/xml", "text/plain"})


@dataclass(frozen=True, kw_only=True)
class CrawlOptions:
    """How far a crawl goes: link depth from its start (or from the sitemap's pages), pages fetched, bytes read."""

    depth: int = DEFAULT_DEPTH
    max_pages: int = DEFAULT_MAX_PAGES
    max_bytes: int = DEFAULT_MAX_BYTES


@dataclass(frozen=True, kw_only=True)
class FetchPolicy:
    """What the URL guard lets a fetch reach, and how much and how long it reads."""

    allow_private: bool = False
    allowed_networks: Sequence[str] = ()
    max_url_bytes: int = 5_000_000
    timeout_s: float = 20.0

    async def fetch(
        self, url: str, *, max_bytes: int | None = None, content_types: frozenset[str] = ALLOWED_CONTENT_TYPES
    ) -> FetchedResource:
        return await fetch_url(
            url,
            allow_private=self.allow_private,
            allowed_networks=self.allowed_networks,
            max_bytes=max_bytes or self.max_url_bytes,
            timeout_s=self.timeout_s,
            content_types=content_types,
        )


@dataclass(frozen=True, kw_only=True)
class CrawlSkip:
    """A page the crawl did not turn into a document. keep: it may still exist (a failed fetch), so a
    sync keeps yesterday's copy; otherwise it is gone from the crawl (robots.txt, off-site, no text)."""

    uri: str
    reason: str
    keep: bool


class CrawlRootError(FetchError):
    """The crawl could not start: its start page, sitemap or robots.txt could not be read (nothing may be pruned)."""


async def read_robots(site: URL, policy: FetchPolicy) -> RobotFileParser:
    """The site's robots.txt, fetched through the guard. Per RFC 9309 a 4xx answer means no rules;
    any other failure means the crawl cannot know its rules, so it does not start."""
    robots = RobotFileParser()
    url = str(site.origin().with_path("/robots.txt"))
    try:
        resource = await policy.fetch(url, max_bytes=ROBOTS_MAX_BYTES)
    except FetchError as error:
        if error.status is not None and 400 <= error.status < 500:
            robots.parse([])
            return robots
        raise CrawlRootError(f"robots.txt of {site.origin()} could not be read: {error}") from None
    robots.parse(resource.body.decode(resource.charset or "utf-8", errors="replace").splitlines())
    return robots


async def _sitemap_pages(start: URL, policy: FetchPolicy, limit: int) -> list[URL]:
    """The same-site pages a sitemap (and the sitemaps its index names) lists, up to limit."""
    pages: list[URL] = []
    queue: deque[URL] = deque([start])
    read: set[URL] = set()
    while queue and len(read) < MAX_SITEMAPS and len(pages) < limit:
        url = queue.popleft()
        if url in read:
            continue
        read.add(url)
        try:
            resource = await policy.fetch(str(url), content_types=SITEMAP_TYPES)
            sitemap = parse_sitemap(resource.body, sitemap_url=resource.final_url)
        except (FetchError, ValueError) as error:
            if url == start:
                raise CrawlRootError(f"the sitemap {url} could not be read: {error}") from None
            continue  # one nested sitemap missing leaves the rest of the index usable
        queue.extend(u for u in sitemap.sitemaps if same_site(u, start))
        pages.extend(u for u in sitemap.pages if same_site(u, start) and u not in pages)
    return pages[:limit]


async def crawl(
    start: str, *, sitemap: bool = False, options: CrawlOptions = CrawlOptions(), policy: FetchPolicy = FetchPolicy()
) -> AsyncIterator[LoadedDocument | CrawlSkip]:
    """Crawl one site breadth-first from start (a page, or a sitemap whose pages are the first level).

    Only links on start's scheme, host and port are followed, to at most options.depth links away; the
    crawl stops after options.max_pages fetches or once options.max_bytes were read. Every fetch, robots.txt
    and sitemaps included, goes through the URL guard (core/retrieval/url_guard.py). Raises CrawlRootError
    before yielding anything when the crawl cannot start.
    """
    root = normalise(start)
    if root is None:
        raise CrawlRootError(f"{start!r} is not an absolute http(s) URL.")
    robots = await read_robots(root, policy)
    if sitemap:
        seeds = await _sitemap_pages(root, policy, options.max_pages)
    else:
        if not robots.can_fetch(USER_AGENT, str(root)):
            raise CrawlRootError(f"robots.txt of {root.origin()} does not let relaybot read {root}.")
        seeds = [root]
    queue: deque[tuple[URL, int]] = deque((url, 0) for url in seeds)
    queued: set[URL] = set(seeds)
    done: set[URL] = set()
    pages = read_bytes = 0
    while queue and pages < options.max_pages and read_bytes < options.max_bytes:
        url, depth = queue.popleft()
        if not robots.can_fetch(USER_AGENT, str(url)):
            yield CrawlSkip(uri=str(url), reason="robots.txt does not let relaybot read it", keep=False)
            continue
        pages += 1
        try:
            resource = await policy.fetch(str(url))
        except FetchError as error:
            if url == root and not sitemap:
                raise CrawlRootError(str(error)) from None
            yield CrawlSkip(uri=str(url), reason=str(error), keep=True)
            continue
        read_bytes += len(resource.body)
        final = normalise(resource.final_url) or url
        if not same_site(final, root):
            yield CrawlSkip(uri=str(url), reason=f"it redirects off the site, to {final}", keep=False)
            continue
        if final in done:
            continue  # a redirect to a page already read
        done.update((url, final))
        if depth < options.depth and resource.content_type in HTML_TYPES:
            links = await asyncio.to_thread(
                page_links, resource.body, page_url=resource.final_url, charset=resource.charset
            )
            for link in links:
                if same_site(link, root) and link not in queued:
                    queued.add(link)
                    queue.append((link, depth + 1))
        try:
            # trafilatura only ever sees the body fetched here: it never fetches anything itself.
            yield await in_worker(document_from_fetch, resource)
        except FetchError as error:
            yield CrawlSkip(uri=str(url), reason=str(error), keep=False)
