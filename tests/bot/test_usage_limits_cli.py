"""`relaybot usage --by user` shows each person's use today against their daily limits (issue 27)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.usage_cli import usage
from core.requests import Actor, ConversationKey, Request
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.engine import test_settings as make_settings

LIMITS = {"user_requests_per_day": 2, "user_tokens_per_day": 100_000, "limits_exempt": ("U-free",)}


def ask(question: str, user: str) -> Request:
    key = ConversationKey(platform="slack", workspace="T-limits", channel="C-limits", thread=question)
    return Request(question=question, conversation=key, user=Actor(id=user))


async def test_usage_by_user_shows_each_persons_use_today_against_their_limits(
    db: Database, database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_emulator.script_fn(lambda body: Text("Answered."))
    engine = make_engine(db, openai_emulator.base_url, **LIMITS)
    for question, user in (("a1", "U-ada"), ("a2", "U-ada"), ("a3", "U-ada"), ("b1", "U-bob"), ("f1", "U-free")):
        await engine.answer(ask(question, user))
    await ChannelConfigStore(db).update("slack:T-limits:C-big", set_fields={"user_requests_per_day": 9}, actor="test")
    settings = make_settings(openai_emulator.base_url, database_url=database_url, data_dir=tmp_path, **LIMITS)

    async def report(*argv: str) -> str:
        assert await usage(settings, build_parser().parse_args(["usage", "--by", "user", *argv])) == 0
        return capsys.readouterr().out

    records = {row["user"]: row for row in json.loads(await report("--format", "json"))}
    ada, bob, free = records["U-ada"], records["U-bob"], records["U-free"]
    # Ada's third question was refused: two counted of her two, and the tokens her answers used.
    assert (ada["requests_today"], ada["requests_per_day"], ada["tokens_per_day"]) == (2, 2, 100_000)
    assert ada["turns"] == 2 and ada["tokens_today"] == ada["tokens"] > 0
    assert (bob["requests_today"], bob["tokens_today"]) == (1, bob["tokens"])
    assert (free["requests_today"], free["requests_per_day"], free["tokens_per_day"]) == (0, "exempt", "exempt")

    rows = {row["user"]: row for row in csv.DictReader(io.StringIO(await report("--format", "csv")))}
    assert rows["U-ada"]["requests_today"] == "2" and rows["U-ada"]["requests_per_day"] == "2"

    table = (await report()).splitlines()
    assert table[0].split() == ("platform user turns tokens in tokens out tokens requests today requests per day "
                                "tokens today tokens per day").split()
    ada_line = next(line for line in table if " U-ada " in f" {line} ")
    assert ada_line.split()[-4:-2] == ["2", "2"]
    assert table[-1] == ("The limits shown are the settings'; these places set their own (requests / tokens): "
                         "slack:T-limits:C-big (9 / -)")
