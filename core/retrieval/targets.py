"""What a source was ingested from (paths with globs, URLs, crawls and sitemaps with caps), kept so a sync repeats it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from core.retrieval.crawl import CrawlOptions


def is_url(target: str) -> bool:
    return target.lower().startswith(("http://", "https://"))


@dataclass(frozen=True, kw_only=True)
class SourceTarget:
    """One thing a source is read from: a file or folder (absolute path, with globs), a URL, a crawl or a sitemap."""

    target: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    crawl: CrawlOptions | None = None  # a URL crawled from (a sitemap is always crawled)
    sitemap: bool = False
    allow_private: bool = False  # the operator allowed private addresses when ingesting it

    @property
    def key(self) -> tuple[str, bool]:
        return self.target, self.sitemap

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"target": self.target}
        if self.include:
            data["include"] = list(self.include)
        if self.exclude:
            data["exclude"] = list(self.exclude)
        if self.crawl is not None:
            data["crawl"] = {
                "depth": self.crawl.depth, "max_pages": self.crawl.max_pages, "max_bytes": self.crawl.max_bytes
            }
        if self.sitemap:
            data["sitemap"] = True
        if self.allow_private:
            data["allow_private"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SourceTarget":
        crawl = data.get("crawl")
        return cls(
            target=str(data["target"]),
            include=tuple(data.get("include", ())),
            exclude=tuple(data.get("exclude", ())),
            crawl=CrawlOptions(**crawl) if isinstance(crawl, dict) else None,
            sitemap=bool(data.get("sitemap", False)),
            allow_private=bool(data.get("allow_private", False)),
        )


def build_targets(
    targets: Sequence[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    crawl: CrawlOptions | None = None,
    sitemaps: Sequence[str] = (),
    sitemap_options: CrawlOptions | None = None,
    allow_private: bool = False,
) -> list[SourceTarget]:
    """The targets of one `relaybot ingest`: paths made absolute (a sync runs from anywhere), URLs crawled when
    crawl is given, sitemaps crawled with sitemap_options (default: their pages only, depth 0)."""
    specs: list[SourceTarget] = []
    for target in targets:
        if is_url(target):
            specs.append(SourceTarget(target=target, crawl=crawl, allow_private=allow_private))
        else:
            path = str(Path(target).expanduser().resolve())
            specs.append(SourceTarget(target=path, include=tuple(include), exclude=tuple(exclude)))
    for sitemap in sitemaps:
        options = sitemap_options or CrawlOptions(depth=0)
        specs.append(SourceTarget(target=sitemap, crawl=options, sitemap=True, allow_private=allow_private))
    return specs


async def load_targets(conn: AsyncConnection, source_id: int) -> list[SourceTarget]:
    cursor = await conn.execute("SELECT targets FROM sources WHERE id = %s", (source_id,))
    row = await cursor.fetchone()
    return [SourceTarget.from_json(item) for item in (row[0] if row else None) or []]


async def remember_targets(
    conn: AsyncConnection, source_id: int, targets: Sequence[SourceTarget], *, replace: bool
) -> list[SourceTarget]:
    """Record what the source is read from: these targets replace one of the same path or URL, others stay
    (a source may be built by several ingests), unless replace (an ingest with --prune says "this is all")."""
    cursor = await conn.execute("SELECT targets FROM sources WHERE id = %s FOR UPDATE", (source_id,))
    row = await cursor.fetchone()
    known = [] if replace else [SourceTarget.from_json(item) for item in (row[0] if row else None) or []]
    new_keys = {spec.key for spec in targets}
    merged = [spec for spec in known if spec.key not in new_keys] + list(targets)
    await conn.execute(
        "UPDATE sources SET targets = %s::jsonb WHERE id = %s",
        (json.dumps([spec.to_json() for spec in merged]), source_id),
    )
    return merged
