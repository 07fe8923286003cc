"""`relaybot feedback`: every 👍/👎 with its comment, beside the question, answer and sources, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

from bot.usage_cli import parse_since, parse_team
from core.config import Settings
from core.store.db import Database, DatabaseError
from core.store.feedback import FeedbackRow, FeedbackStore
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
FORMATS = ("table", "csv", "json")
COLUMNS = ("at", "platform", "workspace", "user_id", "user_name", "vote", "comment", "question", "answer", "sources",
           "turn_id")
# The table is for reading in a terminal: long texts are cut there (CSV and JSON keep them whole).
TABLE_CELL_CHARS = 60


def add_feedback_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    feedback = subparsers.add_parser("feedback", help="export the 👍/👎 votes on answers, with comments")
    feedback.add_argument(
        "--since", type=parse_since, default=None, metavar="WHEN",
        help="only votes given or changed since then: a date (2026-01-31), a UTC date and time (2026-01-31T09:00), "
        "or a time ago (30m, 12h, 7d, 2w); default: all",
    )
    feedback.add_argument("--team", type=parse_team, default=None, metavar="PLATFORM:ID",
                          help="only votes on this team's answers: a Slack workspace (slack:T…) or a Discord server "
                          "(discord:…)")
    feedback.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")


async def feedback(settings: Settings, args: argparse.Namespace) -> int:
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        rows = await FeedbackStore(db).export(since=args.since, team=getattr(args, "team", None))
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
    print(render(rows, output=args.format), end="")
    return EXIT_OK


def render(rows: list[FeedbackRow], *, output: str) -> str:
    records = [record(row) for row in rows]
    if output == "json":
        return json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(COLUMNS)
        for item in records:
            writer.writerow([_cell(item[name]) for name in COLUMNS])
        return buffer.getvalue()
    if not records:
        return "No feedback recorded.\n"
    shown = ("at", "platform", "user_name", "vote", "comment", "question", "answer", "sources")
    table = [list(shown)] + [[_short(_cell(item[name])) for name in shown] for item in records]
    widths = [max(len(row[index]) for row in table) for index in range(len(shown))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table) + "\n"


def record(row: FeedbackRow) -> dict[str, object]:
    """One vote as exported: the vote as 👍/👎 words (`up` / `down`), sources as their titles and addresses."""
    return {
        "at": row.at.isoformat(), "platform": row.platform, "workspace": row.workspace, "user_id": row.user_id,
        "user_name": row.user_name,
        "vote": "up" if row.vote > 0 else "down", "comment": row.comment, "question": row.question,
        "answer": row.answer,
        "sources": [{"title": str(s.get("title") or ""), "uri": str(s.get("uri") or "")} for s in row.sources],
        "turn_id": row.turn_id,
    }


def _cell(value: object) -> str:
    if isinstance(value, list):
        return "; ".join(" ".join(p for p in (s["title"], f"<{s['uri']}>" if s["uri"] else "") if p) for s in value)
    return str(value)


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= TABLE_CELL_CHARS else flat[: TABLE_CELL_CHARS - 1] + "…"
