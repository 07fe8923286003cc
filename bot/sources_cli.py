"""`relaybot sources [list] | sync | remove | set-link-base | set-team`: the document sources, their syncs, where they link
and which team each belongs to (`--team`, shared with `relaybot ingest`); the channels learned from listed below them."""

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
from core.retrieval.store import SourceRow, list_sources, remove_source, set_link_base, set_owner
from core.retrieval.sync import SourceSyncer, SyncResult, SyncState, source_ids, sync_states
from core.store.db import Database, DatabaseError
from core.store.installations import InstallStore
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
# The platforms whose workspaces own sources, as a --team names them (`slack:T1`, `discord:G1`).
TEAM_PLATFORMS = ("slack", "discord")
DEPLOYMENT_WORDS = ("none", "deployment")


def add_team_argument(parser: argparse.ArgumentParser, *, what: str) -> None:
    """--team: the workspace a source belongs to (its answers alone search it)."""
    parser.add_argument(
        "--team", metavar="TEAM", default=None,
        help=f"the team {what}: a Slack team id (T…) or slack:T…, discord:GUILD, or none for this deployment's own "
        "(required when several Slack teams are installed or multi-workspace mode is on)",
    )


def parse_team(text: str) -> str:
    """A --team value as a source's owner: `slack:T1`, `discord:G1`, or '' (the deployment's); ValueError with the
    sentence otherwise."""
    value = text.strip()
    if value.lower() in DEPLOYMENT_WORDS:
        return ""
    platform, colon, workspace = value.partition(":")
    if not colon:
        platform, workspace = "slack", value  # a bare id is a Slack team's, as SLACK_TEAM_IDS writes them
    if platform not in TEAM_PLATFORMS or not workspace or ":" in workspace or any(c.isspace() for c in workspace):
        raise ValueError(f'--team {text!r} names no team; write T0123 or slack:T0123, discord:GUILD_ID, or none')
    return f"{platform}:{workspace}"


async def installed_slack_teams(db: Database) -> int:
    """How many Slack workspaces or orgs are installed (the stored installs, core/store/installations.py)."""
    return len(await InstallStore(db).bots())


async def team_of(settings: Settings, db: Database, team: str | None) -> str | None:
    """The owner --team names (None: not given). ValueError with the sentence when it must be given: several Slack
    teams installed, or multi-workspace mode, where no team's answers search the deployment's sources."""
    if team is not None:
        return parse_team(team)
    multi = not settings.platform_defaults("slack").shares_deployment_sources
    if multi or await installed_slack_teams(db) > 1:
        why = "multi-workspace mode is on" if multi else "several Slack teams are installed"
        raise ValueError(f"{why}: say which team the source is for with --team T… (or --team none for this "
                         "deployment's own, which no installed team searches)")
    return None


def add_sources_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `sources` and its actions (with who may read a source: bot/channels_cli.py) to the CLI's subcommands."""
    sources = subparsers.add_parser(
        "sources", help="list or remove document sources, set where they link, or learn from Slack and Discord channels")
    # `relaybot sources` alone lists them.
    actions = sources.add_subparsers(dest="sources_command", required=False)
    listing = actions.add_parser("list", help="list sources with their document and chunk counts, and how their syncs went")
    listing.add_argument("--team", metavar="TEAM", default=None, help="only this team's sources (none: the deployment's)")
    sync = actions.add_parser("sync", help="sync a source (or every source) now from what it was ingested from")
    sync.add_argument("name", nargs="?", help="the source (default: every source that remembers its targets)")
    remove = actions.add_parser("remove", help="remove a source with all its documents")
    remove.add_argument("name")
    add_team_argument(remove, what="the source belongs to")
    owner = actions.add_parser("set-team", help="give a source to a team (its answers alone search it), or back to the deployment")
    owner.add_argument("name")
    owner.add_argument("team", metavar="TEAM", help="T… or slack:T…, discord:GUILD, or none for this deployment's own")
    link = actions.add_parser(
        "set-link-base", help="set where a source's files are read on the web (an empty URL removes it)"
    )
    link.add_argument("name")
    link.add_argument("url", metavar="URL")
    link.add_argument(
        "--root", metavar="DIR", help="the folder the files' paths are taken relative to (default: the ingested one)"
    )
    add_team_argument(link, what="the source belongs to")
    from bot.channel_sources_cli import add_channel_commands
    from bot.channels_cli import add_source_access_commands

    add_source_access_commands(actions)
    add_channel_commands(actions)


def _sync_status(state: SyncState | None) -> str:
    if state is None:
        return "-"
    if state.syncing_by:
        return "syncing"
    return state.status or "-"


def format_sources(rows: list[SourceRow], states: dict[str, SyncState] | None = None) -> str:
    """The `sources list` table, then the last sync error of each source whose last sync failed; the channels learned
    from are listed apart (bot/channel_sources_cli.py)."""
    rows = [row for row in rows if row.kind != "channel"]
    if not rows:
        return "No sources yet; add one with `relaybot ingest PATH|URL --source NAME`."
    states = states or {}
    header = ("NAME", "EXPOSURE", "KIND", "DOCUMENTS", "CHUNKS", "LAST SYNCED", "STATUS", "EVERY", "LINKS TO", "TEAM", "FROM")
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
            row.owner or "-",
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


async def list_all(settings: Settings, db: Database, owner: str | None) -> int:
    """`relaybot sources [list]`: the document sources, then the channels learned from with their states."""
    from bot.channel_sources_cli import format_learned, learned_channels

    rows = await list_sources(db, owner=owner)
    channels = await learned_channels(settings, db, owner)
    if channels and not [row for row in rows if row.kind != "channel"]:
        print(format_learned(channels, rows))
        return EXIT_OK
    print(format_sources(rows, await sync_states(db)))
    if channels:
        print("\n" + format_learned(channels, rows))
    return EXIT_OK


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


def refuse_learned_channel(name: str) -> None:
    """A learned channel's source is its own team's, and cited by its messages' own links: ValueError with the sentence."""
    if name.startswith("channel:"):
        raise ValueError(f'"{name}" is a channel learned from: it belongs to its own team and links to its messages; '
                         "`relaybot sources remove-channel` stops learning from it")


async def give_to_team(db: Database, name: str, owner: str) -> int:
    """`relaybot sources set-team NAME TEAM`."""
    if not await set_owner(db, name, owner):
        print(f'relaybot: there is no source named "{name}"; `relaybot sources list` shows them.', file=sys.stderr)
        return EXIT_FAILURE
    print(f'Source "{name}" now belongs to ' + (f"team {owner}: only its answers search it." if owner
          else "this deployment: every answer of a platform that shares the deployment's sources searches it."))
    return EXIT_OK


async def sources(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot sources [list] | sync [NAME] | remove NAME | set-link-base NAME URL`; who may read one:
    bot/channels_cli.py; channels learned from: bot/channel_sources_cli.py."""
    from bot.channel_sources_cli import CHANNEL_COMMANDS, channel_sources
    from bot.channels_cli import ACCESS_COMMANDS, source_access

    if args.sources_command in ACCESS_COMMANDS:
        return await source_access(settings, args)
    if args.sources_command in CHANNEL_COMMANDS:
        return await channel_sources(settings, args)
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        if args.sources_command in ("set-team", "set-link-base"):
            refuse_learned_channel(args.name)
        if args.sources_command == "set-link-base":
            # Checked before the database opens: a typo costs nothing.
            base = check_link_base(args.url) if args.url.strip() else None
            root = str(Path(args.root).expanduser().resolve()) if args.root else None
        given = getattr(args, "team", None)
        if given is not None:
            parse_team(given)  # before the database opens, too
        await db.open()
        if args.sources_command in ("list", None):
            return await list_all(settings, db, parse_team(given) if given is not None else None)
        if args.sources_command == "sync":
            return await sync_sources(settings, db, args.name)
        if args.sources_command == "set-team":
            return await give_to_team(db, args.name, parse_team(args.team))
        owner = await team_of(settings, db, given)
        of_team = f" of team {owner}" if owner else " of this deployment" if owner == "" else ""
        if args.sources_command == "set-link-base":
            row = await set_link_base(db, args.name, base, root=root, owner=owner)
            if row is None:
                print(f'relaybot: there is no source named "{args.name}"{of_team}; `relaybot sources list` shows them.',
                      file=sys.stderr)
                return EXIT_FAILURE
            if row.link_base:
                print(f'Source "{row.name}" now links its files to {row.link_base} (paths under {row.link_root}).')
            else:
                print(f'Source "{row.name}" no longer links its files; they are cited by title.')
            return EXIT_OK
        if await remove_source(db, args.name, owner=owner):
            print(f'Removed source "{args.name}" with its documents.')
            return EXIT_OK
        print(f'relaybot: there is no source named "{args.name}"{of_team}; `relaybot sources list` shows them.',
              file=sys.stderr)
        return EXIT_FAILURE
    except (LinkBaseError, ValueError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
