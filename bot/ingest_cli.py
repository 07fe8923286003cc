"""`relaybot ingest` and `relaybot sources`: load documents into sources; list, sync and remove them; set their links."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from core.config import Settings
from bot.retrieval import close_provider, embedding_provider, fetch_policy
from core.retrieval.crawl import DEFAULT_DEPTH, DEFAULT_MAX_BYTES, DEFAULT_MAX_PAGES, CrawlOptions
from core.retrieval.ingest import KEEP_INTERVAL, IngestProgress, IngestRequest, IngestSummary, ingest as ingest_targets, is_url
from core.retrieval.loaders import _dir_excluded, _matches
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.retrieval.links import LinkBaseError, check_link_base
from core.retrieval.source_lease import SourceBusy
from core.retrieval.store import EXPOSURES, SourceExposure, SourceRow, list_sources, remove_source, set_link_base
from core.retrieval.sync import SourceSyncer, SyncResult, SyncState, source_ids, sync_states
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_SOURCE = "docs"
PROGRESS_INTERVAL_S = 0.1
CURRENT_URI_CHARS = 60
# A new source is synced this often unless --sync-every says otherwise.
DEFAULT_SYNC_EVERY_S = 24 * 3600
_DURATION_RE = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}


def parse_duration(text: str) -> int:
    """Seconds from "90", "90s", "15m", "1h", "2d" or "1w"; 0 means never."""
    match = _DURATION_RE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 30m, 1h, 24h, 7d, or 0 for never")
    return int(match[1]) * _DURATION_UNITS[match[2].lower()]


def parse_size(text: str) -> int:
    """Bytes from "5000000", "500k", "20MB" or "1G" (powers of 1000)."""
    match = _SIZE_RE.match(text)
    if match is None or int(match[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 500k, 20MB or 1G")
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


def positive(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def format_duration(seconds: int | None) -> str:
    if not seconds:
        return "never"
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def add_ingest_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `ingest` and `sources` to the CLI's subcommands."""
    ingest = subparsers.add_parser("ingest", help="load files, folders or URLs into a document source")
    ingest.add_argument(
        "targets", nargs="*", metavar="PATH|URL", help="files, folders (recursive) or http(s) URLs"
    )
    ingest.add_argument("--source", default=DEFAULT_SOURCE, help=f"the source's name (default: {DEFAULT_SOURCE})")
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
    sources = subparsers.add_parser("sources", help="list or remove document sources, or set where they link")
    actions = sources.add_subparsers(dest="sources_command", required=True)
    actions.add_parser("list", help="list sources with their document and chunk counts, and how their syncs went")
    sync = actions.add_parser("sync", help="sync a source (or every source) now from what it was ingested from")
    sync.add_argument("name", nargs="?", help="the source (default: every source that remembers its targets)")
    remove = actions.add_parser("remove", help="remove a source with all its documents")
    remove.add_argument("name")
    link = actions.add_parser(
        "set-link-base", help="set where a source's files are read on the web (an empty URL removes it)"
    )
    link.add_argument("name")
    link.add_argument("url", metavar="URL")
    link.add_argument(
        "--root", metavar="DIR", help="the folder the files' paths are taken relative to (default: the ingested one)"
    )
    from bot.channels_cli import add_source_access_commands

    add_source_access_commands(actions)


def count_documents(targets: Sequence[str], *, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> int:
    """How many documents an ingest of these targets goes through, counted from names alone (no file is read).

    One per URL, per missing path and per file, and for a folder one per file that core.retrieval.loaders.iter_path
    would load or skip: the same walk (hidden entries out, excluded folders pruned) and the same glob rules.
    """
    total = 0
    for target in targets:
        path = Path(target).expanduser()
        if is_url(target) or not path.is_dir():
            total += 1
            continue
        root = path.resolve()
        for dirpath, dirnames, filenames in os.walk(root):
            relative_dir = Path(dirpath).relative_to(root).as_posix()
            prefix = "" if relative_dir == "." else f"{relative_dir}/"
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not _dir_excluded(prefix + d, exclude)]
            for name in filenames:
                relative = prefix + name
                if name.startswith(".") or (include and not _matches(relative, include)):
                    continue
                if not (exclude and _matches(relative, exclude)):
                    total += 1
    return total


class ProgressLine:
    """Ingest progress on stderr: a live bar with the total and an ETA on a terminal (tqdm), else one final line."""

    BAR_FORMAT = (
        "documents {n_fmt}/{total_fmt} |{bar:20}| {percentage:3.0f}% · {elapsed} elapsed · ETA {remaining}{postfix}"
    )

    def __init__(self, stream: TextIO, *, min_interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.min_interval_s = min_interval_s
        self.last: IngestProgress | None = None
        self.total: int | None = None
        self._bar: tqdm | None = None

    def start(self, *, total: int) -> None:
        """The number of documents the run goes through; a terminal shows the bar from here on."""
        self.total = total
        self._live_bar()

    def _live_bar(self) -> tqdm | None:
        if self.live and self._bar is None:
            self._bar = tqdm(
                total=self.total, file=self.stream, bar_format=self.BAR_FORMAT, dynamic_ncols=True,
                mininterval=self.min_interval_s, miniters=0, leave=False,
            )
        return self._bar

    @staticmethod
    def details(progress: IngestProgress) -> str:
        current = progress.current
        if len(current) > CURRENT_URI_CHARS:
            current = "…" + current[-(CURRENT_URI_CHARS - 1) :]
        return f"chunks {progress.chunks} · embeddings {progress.embeddings}" + (f"  {current}" if current else "")

    @classmethod
    def render(cls, progress: IngestProgress) -> str:
        return f"documents {progress.documents} · {cls.details(progress)}"

    def __call__(self, progress: IngestProgress) -> None:
        self.last = progress
        bar = self._live_bar()
        if bar is None:
            return
        if bar.total is not None and progress.documents > bar.total:
            bar.total = progress.documents  # files appeared after the count; never show more than 100 %
        # tqdm redraws at most every min_interval_s, and its rate over the documents done gives the ETA.
        bar.set_postfix_str(self.details(progress), refresh=False)
        bar.update(progress.documents - bar.n)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()  # clears the bar's line
            self._bar = None
        if self.last is None:
            return
        final = IngestProgress(documents=self.last.documents, chunks=self.last.chunks, embeddings=self.last.embeddings)
        self.stream.write(self.render(final) + "\n")
        self.stream.flush()


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
    if not args.targets and not args.sitemap:
        print("relaybot: name a file, folder or URL to ingest, or a --sitemap URL.", file=sys.stderr)
        return EXIT_USAGE
    if args.crawl and not any(is_url(target) for target in args.targets):
        print("relaybot: --crawl starts from a URL; name one (http:// or https://).", file=sys.stderr)
        return EXIT_USAGE
    if any(not is_url(sitemap) for sitemap in args.sitemap):
        print("relaybot: --sitemap takes the sitemap's http(s) URL.", file=sys.stderr)
        return EXIT_USAGE
    crawl = sitemap_options = None
    if args.crawl:
        crawl = CrawlOptions(
            depth=DEFAULT_DEPTH if args.depth is None else args.depth, max_pages=args.max_pages, max_bytes=args.max_bytes
        )
    if args.sitemap:
        sitemap_options = CrawlOptions(depth=args.depth or 0, max_pages=args.max_pages, max_bytes=args.max_bytes)
    try:
        provider = embedding_provider(settings)
    except EmbeddingsUnavailable as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    progress = ProgressLine(sys.stderr)
    try:
        await db.open()
        existing = next((row for row in await list_sources(db) if row.name == args.source), None)
        exposure: SourceExposure = args.exposure or (existing.exposure if existing else "prefetch")  # type: ignore[assignment]
        if args.sync_every is not None:
            sync_every = args.sync_every
        else:
            sync_every = KEEP_INTERVAL if existing else DEFAULT_SYNC_EVERY_S
        progress.start(
            total=len(args.sitemap) + await asyncio.to_thread(
                count_documents, args.targets, include=tuple(args.include), exclude=tuple(args.exclude)
            )
        )
        summary = await ingest_targets(
            db,
            IngestRequest(
                source=args.source, exposure=exposure, targets=tuple(args.targets), sitemaps=tuple(args.sitemap),
                include=tuple(args.include), exclude=tuple(args.exclude), prune=args.prune,
                allow_private=args.allow_private or settings.ingest_allow_private, link_base=args.link_base,
                crawl=crawl, sitemap_options=sitemap_options, sync_interval_s=sync_every,
            ),
            embedder=provider,
            fetch=fetch_policy(settings),
            progress=progress,
        )
    except SourceBusy as error:
        progress.finish()
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except LinkBaseError as error:
        progress.finish()
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (DatabaseError, MigrationError, EmbeddingsUnavailable) as error:
        progress.finish()
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await close_provider(provider)
        await db.close()
    progress.finish()
    print(format_summary(summary, source=args.source, exposure=exposure))
    return EXIT_OK


def _sync_status(state: SyncState | None) -> str:
    if state is None:
        return "-"
    if state.syncing_by:
        return "syncing"
    return state.status or "-"


def format_sources(rows: list[SourceRow], states: dict[str, SyncState] | None = None) -> str:
    """The `sources list` table, then the last sync error of each source whose last sync failed."""
    if not rows:
        return "No sources yet; add one with `relaybot ingest PATH|URL --source NAME`."
    states = states or {}
    header = ("NAME", "EXPOSURE", "KIND", "DOCUMENTS", "CHUNKS", "LAST SYNCED", "STATUS", "EVERY", "LINKS TO", "FROM")
    table = [header] + [
        (
            row.name,
            row.exposure,
            row.kind,
            str(row.documents),
            str(row.chunks),
            row.last_synced_at.strftime("%Y-%m-%d %H:%M") if row.last_synced_at else "never",
            _sync_status(states.get(row.name)),
            format_duration(row.sync_interval_s),
            row.link_base or "-",
            row.uri,
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + "  " + line[-1] for line in table
    ]
    errors = [(row.name, state.error) for row in rows if (state := states.get(row.name)) and state.status == "error"]
    if errors:
        lines.append("")
        lines.extend(f"{name}: last sync failed: {error}" for name, error in errors)
    return "\n".join(lines)


def format_sync(result: SyncResult) -> str:
    """One source's sync, as `sources sync` prints it."""
    lines = []
    if result.summary is not None:
        summary = result.summary
        lines.append(
            f'Source "{result.source}" synced: added {summary.added}, updated {summary.updated}, '
            f"unchanged {summary.unchanged}, removed {summary.removed}, skipped {len(summary.skipped)}."
        )
        lines.extend(f"  {uri}: {reason}" for uri, reason in summary.skipped)
    if result.error:
        lines.append(f'Source "{result.source}" is marked error, nothing was pruned: {result.error}')
    return "\n".join(lines)


async def sync_sources(settings: Settings, db: Database, name: str | None) -> int:
    """`relaybot sources sync [NAME]`: sync the named source, or every source that remembers its targets, now."""
    ids = await source_ids(db, name)
    if name is not None and not ids:
        print(f'relaybot: there is no source named "{name}"; `relaybot sources list` shows them.', file=sys.stderr)
        return EXIT_FAILURE
    if not ids:
        print("No source remembers what it was ingested from yet; ingest one with `relaybot ingest`.")
        return EXIT_OK
    try:
        provider = embedding_provider(settings)
    except EmbeddingsUnavailable as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    syncer = SourceSyncer(db, embedder=provider, policy=fetch_policy(settings))
    code = EXIT_OK
    try:
        for source, source_id in ids.items():
            try:
                result = await syncer.sync(source_id)
            except SourceBusy as error:
                print(f"relaybot: {error}", file=sys.stderr)
                code = EXIT_FAILURE
                continue
            print(format_sync(result))
            if result.status == "error":
                code = EXIT_FAILURE
    finally:
        await close_provider(provider)
    return code


async def sources(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot sources list | sync [NAME] | remove NAME | set-link-base NAME URL`; who may read one: bot/channels_cli.py."""
    from bot.channels_cli import ACCESS_COMMANDS, source_access

    if args.sources_command in ACCESS_COMMANDS:
        return await source_access(settings, args)
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        if args.sources_command == "set-link-base":
            # Checked before the database opens: a typo costs nothing.
            base = check_link_base(args.url) if args.url.strip() else None
            root = str(Path(args.root).expanduser().resolve()) if args.root else None
        await db.open()
        if args.sources_command == "list":
            print(format_sources(await list_sources(db), await sync_states(db)))
            return EXIT_OK
        if args.sources_command == "sync":
            return await sync_sources(settings, db, args.name)
        if args.sources_command == "set-link-base":
            row = await set_link_base(db, args.name, base, root=root)
            if row is None:
                print(f'relaybot: there is no source named "{args.name}"; `relaybot sources list` shows them.', file=sys.stderr)
                return EXIT_FAILURE
            if row.link_base:
                print(f'Source "{row.name}" now links its files to {row.link_base} (paths under {row.link_root}).')
            else:
                print(f'Source "{row.name}" no longer links its files; they are cited by title.')
            return EXIT_OK
        if await remove_source(db, args.name):
            print(f'Removed source "{args.name}" with its documents.')
            return EXIT_OK
        print(f'relaybot: there is no source named "{args.name}"; `relaybot sources list` shows them.', file=sys.stderr)
        return EXIT_FAILURE
    except LinkBaseError as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
