"""`relaybot sources add-channel | remove-channel`: the channels learned from, as a channel scope names them; their states listed."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from adapters.streaming import CONNECTION_ERRORS, RateLimited, TransientSendError
from adapters.streaming.transport import PermanentSendError
from bot.channels_cli import CHANNEL_HELP, UsageError, cli_actor, parse_scope
from bot.cli_names import NAME_ERRORS, channel_id, name_book
from bot.cli_quantities import format_duration, parse_duration
from bot.platforms import by_name
from core.config import Settings
from core.learning.model import ChannelPlace, LearnedChannel, LearningRefused
from core.learning.ports import ChannelHistory
from core.retrieval.store import SourceRow
from core.store.db import Database

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
# What a platform's door raises when it could not be read (each platform's transport translates its SDK's errors).
PLATFORM_ERRORS = (PermanentSendError, TransientSendError, RateLimited, *CONNECTION_ERRORS)
CHANNEL_COMMANDS = ("add-channel", "remove-channel")
DAY_S = 86400
PLACE_HELP = (f"{CHANNEL_HELP} (CHANNEL an id, or #name); or the workspace (slack:TEAM, discord:GUILD) and then the "
              "channel, quoted when it is a #name (the shell reads a word starting with # as a comment)")


def add_channel_commands(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Under `relaybot sources`: choose a channel to learn from, or stop."""
    add = actions.add_parser(
        "add-channel", help="learn from a Slack or Discord channel: its history, then its messages as they come",
        description="The running bot (`relaybot run`) reads the channel's history within the platform's read limits "
        "and keeps it current; `relaybot sources list` shows how far it is. Adding a channel again changes --since "
        "and --keep (each kept as it was when not given).",
    )
    add.add_argument("place", nargs="+", metavar="CHANNEL", help=PLACE_HELP)
    add.add_argument("--since", type=since_days, default=None, metavar="DAYS",
                     help="how far back its history is read, e.g. 30d, 90d, 12w (default: LEARN_SINCE_DAYS)")
    add.add_argument("--keep", type=whole_days, default=None, metavar="DAYS",
                     help="how long what is learnt is kept, e.g. 365d; 0 keeps it until the channel is removed")
    remove = actions.add_parser("remove-channel", help="stop learning from a channel and delete everything learnt from it")
    remove.add_argument("place", nargs="+", metavar="CHANNEL", help=PLACE_HELP)


def whole_days(text: str) -> int:
    """Days from a duration the CLI reads (bot/cli_quantities.py): 90d, 12w; 0 for never."""
    seconds = parse_duration(text)
    if seconds % DAY_S:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days; write e.g. 30d, 90d, 12w or 365d")
    return seconds // DAY_S


def since_days(text: str) -> int:
    """--since: at least a day."""
    days = whole_days(text)
    if days < 1:
        raise argparse.ArgumentTypeError(f"--since {text!r} reads nothing; write how far back, e.g. 30d or 90d")
    return days


def place_words(words: Sequence[str]) -> tuple[str, str, str]:
    """(platform, workspace, channel as written) from `slack:T1:#incidents`, or `slack:T1` and `#incidents`."""
    if len(words) > 2 or (len(words) == 2 and words[0].count(":") != 1):
        raise UsageError(f"{' '.join(words)!r} is not a channel: write {PLACE_HELP}")
    platform, workspace, channel = parse_scope(":".join(words), channel_required=True)
    assert channel is not None
    return platform, workspace, channel


def learning_state(channel: LearnedChannel) -> str:
    """`backfilling 42% (ETA 3m)`, `live`, or `error: <reason>`."""
    if channel.state == "error":
        return f"error: {channel.error or 'the last read failed'}"
    if channel.state == "live":
        return "live"
    if channel.total:
        # Never 100% while it is still backfilling (the replies still to read may be the last few).
        shown = f"backfilling {min(99, math.floor(100 * channel.done / channel.total))}%"
    else:
        shown = f"backfilling ({channel.done} messages read)" if channel.done else "backfilling"
    return f"{shown} (ETA {format_eta(channel.eta_s)})" if channel.eta_s is not None else shown


def format_eta(seconds: float) -> str:
    """45s, 3m, 2h 5m, 1d 4h: rounded up, so it never says less than is left."""
    whole = max(0, math.ceil(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes = math.ceil(whole / 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def format_learned(channels: Sequence[LearnedChannel], rows: Sequence[SourceRow] = ()) -> str:
    """The learned channels' table: each with its name, how far back and how long, its documents and its state."""
    counts = {row.name: row for row in rows}
    header = ("CHANNEL", "NAME", "SINCE", "KEEP", "DOCUMENTS", "CHUNKS", "STATE")
    table = [header]
    for channel in channels:
        row = counts.get(f"channel:{channel.place.key}")
        table.append((
            channel.place.key, f"#{channel.name}" + (" (private)" if channel.private else ""),
            format_duration(channel.since_days * DAY_S),
            format_duration(channel.keep_days * DAY_S) if channel.keep_days else "forever",
            str(row.documents) if row else "0", str(row.chunks) if row else "0", learning_state(channel),
        ))
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + "  " + line[-1] for line in table]
    return "Channels learned from:\n" + "\n".join(lines)


async def learned_channels(settings: Settings, db: Database, owner: str | None) -> list[LearnedChannel]:
    """The channels learned from, of the team `owner` names (`slack:T1`; '' the deployment's, which has none)."""
    from core.learning.service import ChannelLearningService

    if owner == "":
        return []
    platform, _, workspace = (owner or "").partition(":")
    service = ChannelLearningService(db, embedder=None, settings=settings)
    try:
        return await service.list(platform=platform or None, workspace=workspace or None)
    finally:
        await service.close()


async def channel_sources(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot sources add-channel CHANNEL [--since D] [--keep D]` and `remove-channel CHANNEL`."""
    book = name_book(settings)
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    history: ChannelHistory | None = None
    try:
        # Checked before a name is read or the database opens: a typo costs nothing.
        platform, workspace, written = place_words(args.place)
        adding = args.sources_command == "add-channel"
        if adding:
            history = _history(settings, platform)
        place = ChannelPlace(platform=platform, workspace=workspace,
                             channel=await channel_id(book, platform, workspace, written) or written)
        await db.open()
        if adding:
            print(await _add(settings, db, place, history, since=args.since, keep=args.keep))
        else:
            print(await _remove(settings, db, place))
        return EXIT_OK
    except LearningRefused as refused:
        print(f"relaybot: {refused.sentence}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, *NAME_ERRORS) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except PLATFORM_ERRORS as error:
        code = getattr(error, "code", "")
        platform = args.place[0].partition(":")[0]
        print(f"relaybot: {platform} could not be read ({code or type(error).__name__}: {error}); nothing was changed",
              file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await _close(history)
        await book.close()
        await db.close()


def _check_keep(since: int, keep: int | None) -> None:
    if keep and keep < since:
        raise UsageError(f"--keep {keep}d is shorter than --since {since}d: what is older than {keep} days would be "
                         f"read only to be purged; write a --keep of {since}d or more, or a shorter --since")


def _history(settings: Settings, platform: str) -> ChannelHistory:
    """The platform's door to a channel's info for this command (Platform.channel_history)."""
    entry = by_name()[platform]
    if entry.channel_history is None:
        raise UsageError(f"{platform}'s channels cannot be learned from in this build")
    history = entry.channel_history(settings)
    if history is None:
        needed = entry.settings.variables()[0]
        raise UsageError(f"{platform} is not configured here ({needed} is not set): the channel is read through "
                         "the bot's own token; run the command where the bot's settings are")
    return history


async def _add(settings: Settings, db: Database, place: ChannelPlace, history: ChannelHistory | None, *,
               since: int | None, keep: int | None) -> str:
    from core.learning.service import ChannelLearningService

    service = ChannelLearningService(db, embedder=None, settings=settings)
    try:
        before = await service.get(place)
        if before is not None:
            since = before.since_days if since is None else since
            keep = before.keep_days if keep is None else keep
        _check_keep(since or settings.learn_since_days, keep)
        learned = await service.add(place, since_days=since, keep_days=keep or None, history=history, by=cli_actor())
    finally:
        await service.close()
    kept = f"kept {learned.keep_days} days" if learned.keep_days else "kept until it is removed"
    again = "now reads" if before is not None else "reads"
    return (f"Learning from #{learned.name} ({place.key}): the running bot {again} its last {learned.since_days} days "
            f"within {place.platform}'s read limits, then its messages as they come; {kept}. "
            "`relaybot sources list` shows how far it is.")


async def _remove(settings: Settings, db: Database, place: ChannelPlace) -> str:
    from core.learning.service import ChannelLearningService

    service = ChannelLearningService(db, embedder=None, settings=settings)
    try:
        before = await service.get(place)
        if before is None or not await service.remove(place, by=cli_actor()):
            raise UsageError(f"relaybot learns from no channel {place.key}; `relaybot sources list` shows those it does")
    finally:
        await service.close()
    return f"Stopped learning from #{before.name} ({place.key}); everything learnt from it is deleted."


async def _close(history: ChannelHistory | None) -> None:
    """The CLI's door, if it holds a connection (Platform.channel_history)."""
    close = getattr(history, "close", None) or getattr(history, "aclose", None)
    if close is not None:
        await close()
