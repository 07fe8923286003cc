"""`relaybot sources list | sync | remove | set-link-base`: the document sources, their syncs and where they link."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bot.cli_quantities import format_duration
from bot.retrieval import close_provider, embedding_provider, fetch_policy
from core.config import Settings
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.retrieval.links import LinkBaseError, check_link_base
from core.retrieval.source_lease import SourceBusy
from core.retrieval.store import SourceRow, list_sources, remove_source, set_link_base
from core.retrieval.sync import SourceSyncer, SyncResult, SyncState, source_ids, sync_states
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def add_sources_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `sources` and its actions (with who may read a source: bot/channels_cli.py) to the CLI's subcommands."""
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
