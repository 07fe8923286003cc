"""`relaybot usage` reports exactly the tokens the model reported, by channel, user or day, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.usage_cli import parse_since, render
from core.requests import Actor, ConversationKey, Request
from core.store.db import Database
from core.store.usage import UsageLine
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.observe import record_reported_usage

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)


async def relaybot(*args: str, database_url: str, cwd: Path) -> tuple[int, str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE", "TMPDIR")}
    env.update(PYTHONPATH=str(REPO), DATABASE_URL=database_url, EMBEDDING_PROVIDER="none")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


def ask(question: str, *, channel: str, user: str) -> Request:
    return Request(
        question=question, conversation=ConversationKey(platform="slack", workspace="T-usage", channel=channel),
        user=Actor(id=user),
    )


async def test_usage_matches_what_the_model_reported_for_a_scripted_session(
    db: Database, database_url: str, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reported = record_reported_usage(monkeypatch)
    engine = make_engine(db, openai_emulator.base_url)
    per_channel: dict[str, tuple[int, int]] = {}
    per_user: dict[str, tuple[int, int]] = {}
    session = [
        ("C-usage-1", "U-ada", [ToolCalls([Call("calculator", '{"expression": "6*7"}')]), Text("It is 42.")]),
        ("C-usage-1", "U-bob", [Text("Hello Bob, how can I help?")]),
        ("C-usage-2", "U-ada", [Text("A longer answer, " * 20)]),
    ]
    for channel, user, replies in session:
        openai_emulator.script(*replies)
        before = len(reported.reports)
        answer = await engine.answer(ask("what is six times seven?", channel=channel, user=user))
        assert answer.error is None
        turn = reported.reports[before:]
        tokens = (sum(r["prompt_tokens"] for r in turn), sum(r["completion_tokens"] for r in turn))
        for table, key in ((per_channel, channel), (per_user, user)):
            seen = table.get(key, (0, 0))
            table[key] = (seen[0] + tokens[0], seen[1] + tokens[1])

    code, out, err = await relaybot("usage", "--by", "channel", "--format", "json", database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    rows = {row["channel"]: row for row in json.loads(out) if row["workspace"] == "T-usage"}
    assert {channel: (row["tokens_in"], row["tokens_out"]) for channel, row in rows.items()} == per_channel
    assert rows["C-usage-1"]["turns"] == 2 and rows["C-usage-2"]["turns"] == 1

    code, out, err = await relaybot("usage", "--by", "user", "--format", "csv", "--since", "1h",
                                    database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    users = {row["user"]: (int(row["tokens_in"]), int(row["tokens_out"])) for row in csv.DictReader(io.StringIO(out))}
    assert {user: users[user] for user in per_user} == per_user

    code, out, err = await relaybot("usage", database_url=database_url, cwd=tmp_path)  # by day, as a table
    assert code == 0, err
    assert out.splitlines()[0].split() == ["day", "turns", "tokens", "in", "tokens", "out", "tokens"]
    assert out.splitlines()[-1].startswith("total")
    assert str(reported.prompt_tokens + reported.completion_tokens) in out.splitlines()[-1]


async def test_a_bad_since_is_a_usage_error_on_stderr(database_url: str, tmp_path: Path) -> None:
    code, out, err = await relaybot("usage", "--since", "last tuesday", database_url=database_url, cwd=tmp_path)
    assert code == 2 and out == ""
    assert "is not a date" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", datetime(2026, 3, 3, 12, 0, tzinfo=timezone.utc)),
        ("12h", datetime(2026, 3, 10, 0, 0, tzinfo=timezone.utc)),
        ("30m", datetime(2026, 3, 10, 11, 30, tzinfo=timezone.utc)),
        ("2w", datetime(2026, 2, 24, 12, 0, tzinfo=timezone.utc)),
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=timezone.utc)),
        ("2026-03-01T09:30", datetime(2026, 3, 1, 9, 30, tzinfo=timezone.utc)),
        ("2026-03-01T09:30+02:00", datetime(2026, 3, 1, 7, 30, tzinfo=timezone.utc)),
    ],
)
def test_since_reads_dates_times_and_amounts_ago(text: str, expected: datetime) -> None:
    assert parse_since(text, now=NOW) == expected


def test_since_refuses_anything_else() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_since("yesterday-ish", now=NOW)


def test_formats() -> None:
    lines = [
        UsageLine(group=(("platform", "slack"), ("user", "U1")), turns=2, tokens_in=1200, tokens_out=34),
        UsageLine(group=(("platform", "discord"), ("user", "9")), turns=1, tokens_in=5, tokens_out=6),
    ]
    assert render(lines, by="user", output="table") == (
        "platform  user  turns  tokens in  tokens out  tokens\n"
        "slack     U1        2       1200          34    1234\n"
        "discord   9         1          5           6      11\n"
        "total               3       1205          40    1245\n"
    )
    assert render(lines, by="user", output="csv").splitlines()[:2] == [
        "platform,user,turns,tokens_in,tokens_out,tokens", "slack,U1,2,1200,34,1234",
    ]
    assert json.loads(render(lines, by="user", output="json"))[1] == {
        "platform": "discord", "user": "9", "turns": 1, "tokens_in": 5, "tokens_out": 6, "tokens": 11,
    }
    assert render([], by="channel", output="table") == "No token usage recorded.\n"
    assert render([], by="channel", output="csv") == "platform,workspace,channel,turns,tokens_in,tokens_out,tokens\n"
