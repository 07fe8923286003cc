"""`relaybot ingest` and `relaybot sources`: load documents into sources, list and remove them."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from core.config import Settings
from bot.retrieval import close_provider, embedding_provider
from core.retrieval.ingest import IngestProgress, IngestSummary, ingest as ingest_targets, is_url
from core.retrieval.loaders import _dir_excluded, _matches
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.retrieval.store import EXPOSURES, SourceExposure, SourceRow, list_sources, remove_source
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_SOURCE = "docs"
PROGRESS_INTERVAL_S = 0.1
CURRENT_URI_CHARS = 60


def add_ingest_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `ingest` and `sources` to the CLI's subcommands."""
    ingest = subparsers.add_parser("ingest", help="load files, folders or URLs into a document source")
    ingest.add_argument("targets", nargs="+", metavar="PATH|URL", help="files, folders (recursive) or http(s) URLs")
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
    sources = subparsers.add_parser("sources", help="list or remove document sources")
    actions = sources.add_subparsers(dest="sources_command", required=True)
    actions.add_parser("list", help="list sources with their document and chunk counts")
    remove = actions.add_parser("remove", help="remove a source with all its documents")
    remove.add_argument("name")


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
    try:
        provider = embedding_provider(settings)
    except EmbeddingsUnavailable as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    progress = ProgressLine(sys.stderr)
    try:
        await db.open()
        exposure: SourceExposure = args.exposure or next(
            (row.exposure for row in await list_sources(db) if row.name == args.source), "prefetch"
        )
        progress.start(
            total=await asyncio.to_thread(
                count_documents, args.targets, include=tuple(args.include), exclude=tuple(args.exclude)
            )
        )
        summary = await ingest_targets(
            db,
            args.targets,
            source=args.source,
            exposure=exposure,
            embedder=provider,
            include=tuple(args.include),
            exclude=tuple(args.exclude),
            prune=args.prune,
            allow_private=args.allow_private or settings.ingest_allow_private,
            allowed_networks=settings.ingest_allowed_networks,
            max_url_bytes=settings.ingest_max_url_bytes,
            progress=progress,
        )
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


def format_sources(rows: list[SourceRow]) -> str:
    """The `sources list` table."""
    if not rows:
        return "No sources yet; add one with `relaybot ingest PATH|URL --source NAME`."
    header = ("NAME", "EXPOSURE", "KIND", "DOCUMENTS", "CHUNKS", "LAST SYNCED", "FROM")
    table = [header] + [
        (
            row.name,
            row.exposure,
            row.kind,
            str(row.documents),
            str(row.chunks),
            row.last_synced_at.strftime("%Y-%m-%d %H:%M") if row.last_synced_at else "never",
            row.uri,
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + "  " + line[-1] for line in table
    )


async def sources(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot sources list | remove NAME`."""
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        if args.sources_command == "list":
            print(format_sources(await list_sources(db)))
            return EXIT_OK
        if await remove_source(db, args.name):
            print(f'Removed source "{args.name}" with its documents.')
            return EXIT_OK
        print(f'relaybot: there is no source named "{args.name}"; `relaybot sources list` shows them.', file=sys.stderr)
        return EXIT_FAILURE
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
