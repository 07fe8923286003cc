"""`relaybot ingest`: load files, folders, URLs, crawls and sitemaps into a source, with progress and a summary."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from bot.cli_quantities import format_duration, parse_duration, parse_size, positive
from bot.ingest_progress import ProgressLine, count_documents
from bot.retrieval import close_provider, embedding_provider, fetch_policy
from bot.sources_cli import add_sources_command, add_team_argument, parse_team, team_of
from core.config import Settings
from core.retrieval.crawl import DEFAULT_DEPTH, DEFAULT_MAX_BYTES, DEFAULT_MAX_PAGES, CrawlOptions
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.retrieval.ingest import KEEP_INTERVAL, IngestRequest, IngestSummary, ingest as ingest_targets, is_url
from core.retrieval.links import LinkBaseError
from core.retrieval.source_lease import SourceBusy
from core.retrieval.store import EXPOSURES, SourceExposure, SourceOwnedElsewhere, list_sources
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_SOURCE = "docs"
# A new source is synced this often unless --sync-every says otherwise.
DEFAULT_SYNC_EVERY_S = 24 * 3600


def add_ingest_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `ingest` and `sources` to the CLI's subcommands."""
    ingest = subparsers.add_parser("ingest", help="load files, folders or URLs into a document source")
    _what_to_ingest(ingest)
    _how_to_crawl(ingest)
    add_sources_command(subparsers)


def _what_to_ingest(ingest: argparse.ArgumentParser) -> None:
    """The targets, the source they go into, and which of their files."""
    ingest.add_argument(
        "targets", nargs="*", metavar="PATH|URL", help="files, folders (recursive) or http(s) URLs"
    )
    ingest.add_argument("--source", default=DEFAULT_SOURCE, help=f"the source's name (default: {DEFAULT_SOURCE})")
    add_team_argument(ingest, what="the source is for (default: this deployment's own, where no team is told)")
    ingest.add_argument(
        "--exposure",
        choices=EXPOSURES,
        default=None,
        help="prefetch: put matches in the prompt; agentic_tool: only through internal_search; off: never searched "
        "(default: prefetch for a new source, unchanged for an existing one)",
    )
    ingest.add_argument("--include", action="append", default=[], metavar="GLOB", help="only files matching (repeatable)")
    ingest.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files matching (repeatable)")
    ingest.add_argument("--prune", action="store_true", help="remove documents of the source no longer found")
    ingest.add_argument(
        "--allow-private", action="store_true", help="allow URLs on loopback, link-local and private networks"
    )
    ingest.add_argument(
        "--link-base",
        metavar="URL",
        help="where the files are read on the web (e.g. https://github.com/org/repo/blob/main/docs/): citations "
        "link to URL + each file's path under the ingested folder (default: unchanged; none for a new source)",
    )


def _how_to_crawl(ingest: argparse.ArgumentParser) -> None:
    """How far a URL's site or a sitemap is followed, and how often the source is synced again."""
    ingest.add_argument(
        "--crawl", action="store_true", help="crawl each URL's site: follow its links on the same scheme and host"
    )
    ingest.add_argument(
        "--sitemap", action="append", default=[], metavar="URL",
        help="ingest the same-site pages a sitemap lists (repeatable; links from them are followed to --depth)",
    )
    ingest.add_argument(
        "--depth", type=positive, default=None, metavar="N",
        help=f"links followed away from the start page (default {DEFAULT_DEPTH}) or from a sitemap's pages (default 0)",
    )
    ingest.add_argument(
        "--max-pages", type=positive, default=DEFAULT_MAX_PAGES, metavar="N",
        help=f"pages one crawl fetches at most (default {DEFAULT_MAX_PAGES})",
    )
    ingest.add_argument(
        "--max-bytes", type=parse_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
        help=f"bytes one crawl downloads at most, e.g. 20MB (default {DEFAULT_MAX_BYTES // 1_000_000}MB)",
    )
    ingest.add_argument(
        "--sync-every", type=parse_duration, default=None, metavar="DURATION",
        help="how often the bot syncs the source again, e.g. 1h or 7d; 0 = never "
        f"(default: unchanged; {format_duration(DEFAULT_SYNC_EVERY_S)} for a new source)",
    )


def format_summary(summary: IngestSummary, *, source: str, exposure: str) -> str:
    """The summary printed after an ingest run."""
    lines = [
        f'Source "{source}" (exposure {exposure}): added {summary.added}, updated {summary.updated}, '
        f"unchanged {summary.unchanged}, removed {summary.removed}, skipped {len(summary.skipped)}.",
        f"Wrote {summary.chunks} chunk(s) and {summary.embeddings} embedding(s).",
    ]
    if summary.skipped:
        lines.append("Skipped:")
        lines.extend(f"  {uri}: {reason}" for uri, reason in summary.skipped)
    return "\n".join(lines)


async def ingest(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot ingest PATH|URL…`: ingest into a source, with progress on stderr and a summary on stdout."""
    problem = usage_problem(args) or await asyncio.to_thread(missing_paths_problem, args.targets)
    if problem is not None:
        print(f"relaybot: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        provider = embedding_provider(settings)
    except EmbeddingsUnavailable as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    progress = ProgressLine(sys.stderr)
    try:
        await db.open()
        try:
            owner = await team_of(settings, db, args.team)
        except ValueError as error:
            print(f"relaybot: {error}", file=sys.stderr)
            return EXIT_USAGE
        request = await ingest_request(db, settings, args, owner=owner or "")
        progress.start(
            total=len(args.sitemap) + await asyncio.to_thread(
                count_documents, args.targets, include=tuple(args.include), exclude=tuple(args.exclude)
            )
        )
        summary = await ingest_targets(db, request, embedder=provider, fetch=fetch_policy(settings), progress=progress)
    except (SourceBusy, LinkBaseError, SourceOwnedElsewhere, DatabaseError, MigrationError, EmbeddingsUnavailable) as error:
        progress.finish()
        print(f"relaybot: {error}", file=sys.stderr)
        # A link base the checks refuse, or another team's source name, is the user's to fix; the rest failed on the way.
        return EXIT_USAGE if isinstance(error, (LinkBaseError, SourceOwnedElsewhere)) else EXIT_FAILURE
    finally:
        await close_provider(provider)
        await db.close()
    progress.finish()
    print(format_summary(summary, source=args.source, exposure=request.exposure))
    return EXIT_OK


def usage_problem(args: argparse.Namespace) -> str | None:
    """Why the flags cannot make an ingest, checked before anything is opened; None when they can."""
    if not args.targets and not args.sitemap:
        return "name a file, folder or URL to ingest, or a --sitemap URL."
    if args.crawl and not any(is_url(target) for target in args.targets):
        return "--crawl starts from a URL; name one (http:// or https://)."
    if any(not is_url(sitemap) for sitemap in args.sitemap):
        return "--sitemap takes the sitemap's http(s) URL."
    if getattr(args, "team", None) is not None:
        try:
            parse_team(args.team)
        except ValueError as error:
            return str(error)
    return None


def missing_paths_problem(targets: list[str]) -> str | None:
    """The targets that name no file or folder, as one sentence; None when every path exists. Checked before the
    database is opened, so a typo leaves no empty source behind. Blocking (a stat per path)."""
    missing = [target for target in targets if not is_url(target) and not Path(target).expanduser().exists()]
    if not missing:
        return None
    named = ", ".join(missing)
    return f"there is no file or folder at {named}; check the path (a relative one is read from {os.getcwd()})."


async def ingest_request(db: Database, settings: Settings, args: argparse.Namespace, *, owner: str = "") -> IngestRequest:
    """The ingest the flags ask for (into `owner`'s source: a team's, or '' the deployment's); an existing source keeps
    its exposure and sync interval unless they are given."""
    existing = next((row for row in await list_sources(db) if row.name == args.source), None)
    exposure: SourceExposure = args.exposure or (existing.exposure if existing else "prefetch")  # type: ignore[assignment]
    if args.sync_every is not None:
        sync_every = args.sync_every
    else:
        sync_every = KEEP_INTERVAL if existing else DEFAULT_SYNC_EVERY_S
    crawl = CrawlOptions(
        depth=DEFAULT_DEPTH if args.depth is None else args.depth, max_pages=args.max_pages, max_bytes=args.max_bytes
    ) if args.crawl else None
    sitemap_options = CrawlOptions(
        depth=args.depth or 0, max_pages=args.max_pages, max_bytes=args.max_bytes
    ) if args.sitemap else None
    return IngestRequest(
        source=args.source, exposure=exposure, targets=tuple(args.targets), sitemaps=tuple(args.sitemap),
        include=tuple(args.include), exclude=tuple(args.exclude), prune=args.prune,
        allow_private=args.allow_private or settings.ingest_allow_private, link_base=args.link_base,
        crawl=crawl, sitemap_options=sitemap_options, sync_interval_s=sync_every, owner=owner,
    )
