"""`relaybot usage`: the tokens the model reported, summed by channel, user or day, as a table, CSV or JSON; by user,
each person's use today against their daily limits."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from bot.cli_names import NAME_ERRORS, name_book
from core.config import Settings
from core.names import NameBook
from core.person_limits import account_person, person_ledger
from core.quota import DayLimits
from core.store.channel_config import ChannelConfigStore
from core.store.day_counts import today_utc
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError
from core.store.usage import UsageLine, UsageLog

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
GROUPINGS = ("channel", "user", "day")
FORMATS = ("table", "csv", "json")
_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
SUM_COLUMNS = ("turns", "tokens_in", "tokens_out", "tokens")
# By user: what each person used today (UTC) and their limits (empty: none; "exempt": LIMITS_EXEMPT).
TODAY_COLUMNS = ("requests_today", "requests_per_day", "tokens_today", "tokens_per_day")


class PersonError(ValueError):
    """A --user the CLI cannot read; the message says what to write."""


@dataclass(frozen=True, kw_only=True)
class PersonToday:
    """One person's day in the per-person ledger, and the limits the settings give them."""

    requests: int = 0
    tokens: int = 0
    limits: DayLimits = DayLimits()
    exempt: bool = False

    def cells(self) -> tuple[object, object, object, object]:
        if self.exempt:
            return (self.requests, "exempt", self.tokens, "exempt")
        return (self.requests, self.limits.requests_per_day, self.tokens, self.limits.tokens_per_day)


@dataclass(frozen=True, kw_only=True)
class Today:
    """The per-person ledger's day: what each counted account (a person in one team) used, and the settings' limits
    and exemptions."""

    counted: Mapping[str, tuple[int, int]]
    limits: DayLimits = DayLimits()
    exempt: frozenset[str] = frozenset()

    def of(self, platform: str, user: str) -> PersonToday:
        """The person's day in the team where they used most of it (each team's limits count its own questions)."""
        days = [used for account, used in self.counted.items() if _person(account) == (platform, user)]
        requests, tokens = max(days, default=(0, 0))
        return PersonToday(requests=requests, tokens=tokens, limits=self.limits, exempt=user in self.exempt)

    def where(self, keep: Callable[[str, str, str], bool]) -> Today:
        """The accounts whose (platform, workspace, user) `keep` says yes to."""
        return Today(counted={k: v for k, v in self.counted.items() if keep(*account_person(k))}, limits=self.limits,
                     exempt=self.exempt)


def _person(account: str) -> tuple[str, str]:
    platform, _, user = account_person(account)
    return platform, user


def add_usage_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    usage = subparsers.add_parser("usage", help="report the tokens used, by channel, user or day")
    usage.add_argument("--by", choices=GROUPINGS, default=None, help="what to sum by (default: day; user with --user)")
    usage.add_argument(
        "--user", metavar="WHO", default=None,
        help="only this person, by user: PLATFORM:ID or PLATFORM:@name (PLATFORM:WORKSPACE:@name for a name in one "
        "workspace)",
    )
    usage.add_argument(
        "--since", type=parse_since, default=None, metavar="WHEN",
        help="only turns since then: a date (2026-01-31), a UTC date and time (2026-01-31T09:00), "
        "or a time ago (30m, 12h, 7d, 2w); default: all",
    )
    usage.add_argument("--team", type=parse_team, default=None, metavar="PLATFORM:ID",
                       help="only this team's turns: a Slack workspace (slack:T…) or a Discord server (discord:…)")
    usage.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")


def parse_team(value: str) -> tuple[str, str]:
    """A team as (platform, workspace), from `slack:T1` or `discord:123` (core.requests.team_key's spelling)."""
    platform, _, workspace = value.strip().partition(":")
    if not platform or not workspace or ":" in workspace:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a team: write PLATFORM:ID, a Slack workspace (slack:T0123) or a Discord server "
            "(discord:1234)"
        )
    return platform.lower(), workspace


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """A moment from a date, a date and time (UTC unless it says otherwise), or an amount of time ago."""
    text = value.strip()
    ago = _AGO.match(text.lower())
    if ago:
        return (now or datetime.now(timezone.utc)) - timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a date (2026-01-31), a date and time (2026-01-31T09:00) or a time ago (7d)"
            ) from None
        moment = datetime(day.year, day.month, day.day)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


async def usage(settings: Settings, args: argparse.Namespace) -> int:
    by = args.by or ("user" if args.user else "day")
    if args.user and by != "user":
        print("relaybot: --user sums by user; leave out --by, or write --by user", file=sys.stderr)
        return EXIT_USAGE
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    book = name_book(settings)
    try:
        # The person first: a name nobody has costs no database.
        only = await person(book, args.user) if args.user else None
        await db.open()
        team = getattr(args, "team", None)
        lines = await UsageLog(db).report(by=by, since=args.since, team=team)
        today, note = await people_today(db, settings) if by == "user" else (None, "")
        if only is not None:
            lines = [line for line in lines if _key(line) == only]
            today = today.where(lambda platform, _, user: (platform, user) == tuple(only)) if today is not None else None
        if team is not None and today is not None:
            # With --team, that team's accounts only: its people's day as its limits count it.
            today = today.where(lambda platform, workspace, _: (platform, workspace) == tuple(team))
        named = lines + (_uncounted_lines(lines, today) if today is not None else [])
        names = await group_names(book, named, by=by) if by in ("user", "channel") else {}
    except (PersonError, *NAME_ERRORS) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await book.close()
        await db.close()
    print(render(lines, by=by, output=args.format, today=today, names=names), end="")
    if note and args.format == "table":
        print(note)
    if (unnamed := book.note()) is not None:
        print(unnamed, file=sys.stderr)
    return EXIT_OK


async def person(book: NameBook, text: str) -> tuple[str, str]:
    """(platform, user id) from `PLATFORM:ID`, `PLATFORM:@name` or `PLATFORM:WORKSPACE:@name`."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise PersonError(f"{text!r} is not a person: write PLATFORM:ID or PLATFORM:@name")
    platform, workspace = parts[0], parts[1] if len(parts) == 3 else ""
    return platform, await book.resolve(platform, workspace, "user", parts[-1])


async def group_names(book: NameBook, lines: Sequence[UsageLine], *, by: str) -> dict[tuple[str, ...], str]:
    """Each row's person or channel named, where the platform can say (rows it cannot name are left out)."""
    names: dict[tuple[str, ...], str] = {}
    for line in lines:
        key = _key(line)
        if by == "user":
            name = await book.name_of(key[0], "", "user", key[1])
        else:
            name = await book.name_of(key[0], key[1], "channel", key[2])
        if name:
            names[key] = f"{'@' if by == 'user' else '#'}{name}"
    return names


async def people_today(db: Database, settings: Settings) -> tuple[Today, str]:
    """The people's day, and a line naming the channels and workspaces that set limits of their own."""
    today = Today(
        counted=await person_ledger(db).day(today_utc()), exempt=frozenset(settings.limits_exempt),
        limits=DayLimits(requests_per_day=settings.user_requests_per_day, tokens_per_day=settings.user_tokens_per_day),
    )
    own = [f"{c.scope} ({_cell(c.settings.user_requests_per_day)} / {_cell(c.settings.user_tokens_per_day)})"
           for c in await ChannelConfigStore(db).list()
           if c.settings.user_requests_per_day is not None or c.settings.user_tokens_per_day is not None]
    if not own:
        return today, ""
    return today, f"The limits shown are the settings'; these places set their own (requests / tokens): {', '.join(own)}"


def render(
    lines: list[UsageLine], *, by: str, output: str, today: Today | None = None,
    names: Mapping[tuple[str, ...], str] | None = None,
) -> str:
    """The report; by user with `today`, each person's use today against their limits too (as `today` counted it);
    with `names` (a row's group values → its person's or channel's name), a name column beside the ids."""
    today = today if by == "user" else None
    if today is not None:
        lines = lines + _uncounted_lines(lines, today)
    names = names or {}
    if output == "json":
        return json.dumps([_record(line, today, names) for line in lines], indent=2) + "\n"
    extra = TODAY_COLUMNS if today is not None else ()
    named = ["name"] if names else []
    header = [*_group_columns(lines, by), *named, *SUM_COLUMNS, *extra]
    rows = [[value for _, value in line.group] + [names.get(_key(line), "") for _ in named] + [str(n) for n in _sums(line)]
            + ([_cell(value) for value in _today(line, today).cells()] if today is not None else [])
            for line in lines]
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return buffer.getvalue()
    if not rows:
        return "No token usage recorded.\n"
    width = len(header) - len(SUM_COLUMNS) - len(extra)
    totals = [sum(_sums(line)[index] for line in lines) for index in range(len(SUM_COLUMNS))]
    rows.append(["total"] + [""] * (width - 1) + [str(n) for n in totals] + [""] * len(extra))
    return _table([[name.replace("_", " ") for name in header], *rows], numeric_from=width)


def _group_columns(lines: list[UsageLine], by: str) -> list[str]:
    if lines:
        return [name for name, _ in lines[0].group]
    return {"channel": ["platform", "workspace", "channel"], "user": ["platform", "user"], "day": ["day"]}[by]


def _sums(line: UsageLine) -> tuple[int, int, int, int]:
    return (line.turns, line.tokens_in, line.tokens_out, line.tokens)


def _key(line: UsageLine) -> tuple[str, ...]:
    return tuple(value for _, value in line.group)


def _record(line: UsageLine, today: Today | None = None, names: Mapping[tuple[str, ...], str] | None = None) -> dict[str, object]:
    name = (names or {}).get(_key(line))
    record: dict[str, object] = {**dict(line.group), **({"name": name} if name else {}), **dict(zip(SUM_COLUMNS, _sums(line)))}
    if today is not None:
        record.update(zip(TODAY_COLUMNS, _today(line, today).cells()))
    return record


def _today(line: UsageLine, today: Today) -> PersonToday:
    # Someone not counted today asked nowhere a limit applied to them (or did not ask).
    group = dict(line.group)
    return today.of(group["platform"], group["user"])


def _uncounted_lines(lines: list[UsageLine], today: Today) -> list[UsageLine]:
    """People counted today who have no turn in the report (e.g. every question of theirs refused)."""
    listed = {(dict(line.group)["platform"], dict(line.group)["user"]) for line in lines}
    people = sorted({_person(account) for account in today.counted} - listed)
    return [UsageLine(group=(("platform", platform), ("user", user)), turns=0, tokens_in=0, tokens_out=0)
            for platform, user in people]


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[list[str]], *, numeric_from: int) -> str:
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            cell.rjust(width) if index >= numeric_from else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths))
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"
