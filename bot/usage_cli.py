"""`relaybot usage`: the tokens the model reported, summed by channel, user or day, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from datetime import date, datetime, timedelta, timezone

from core.config import Settings
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError
from core.store.usage import UsageLine, UsageLog

EXIT_OK = 0
EXIT_FAILURE = 1
GROUPINGS = ("channel", "user", "day")
FORMATS = ("table", "csv", "json")
_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
SUM_COLUMNS = ("turns", "tokens_in", "tokens_out", "tokens")


def add_usage_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    usage = subparsers.add_parser("usage", help="report the tokens used, by channel, user or day")
    usage.add_argument("--by", choices=GROUPINGS, default="day", help="what to sum by (default: day)")
    usage.add_argument(
        "--since", type=parse_since, default=None, metavar="WHEN",
        help="only turns since then: a date (2026-01-31), a UTC date and time (2026-01-31T09:00), "
        "or a time ago (30m, 12h, 7d, 2w); default: all",
    )
    usage.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")


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
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        lines = await UsageLog(db).report(by=args.by, since=args.since)
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
    print(render(lines, by=args.by, output=args.format), end="")
    return EXIT_OK


def render(lines: list[UsageLine], *, by: str, output: str) -> str:
    if output == "json":
        return json.dumps([_record(line) for line in lines], indent=2) + "\n"
    header = [*_group_columns(lines, by), *SUM_COLUMNS]
    rows = [[value for _, value in line.group] + [str(n) for n in _sums(line)] for line in lines]
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return buffer.getvalue()
    if not rows:
        return "No token usage recorded.\n"
    width = len(header) - len(SUM_COLUMNS)
    totals = [sum(_sums(line)[index] for line in lines) for index in range(len(SUM_COLUMNS))]
    rows.append(["total"] + [""] * (width - 1) + [str(n) for n in totals])
    return _table([[name.replace("_", " ") for name in header], *rows], numeric_from=width)


def _group_columns(lines: list[UsageLine], by: str) -> list[str]:
    if lines:
        return [name for name, _ in lines[0].group]
    return {"channel": ["platform", "workspace", "channel"], "user": ["platform", "user"], "day": ["day"]}[by]


def _sums(line: UsageLine) -> tuple[int, int, int, int]:
    return (line.turns, line.tokens_in, line.tokens_out, line.tokens)


def _record(line: UsageLine) -> dict[str, object]:
    return {**dict(line.group), **dict(zip(SUM_COLUMNS, _sums(line)))}


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
