"""`relaybot channels set SCOPE user_requests_per_day=N user_tokens_per_day=N`: a place's own per-person limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.channels_cli import channels
from bot.cli import build_parser
from core.channels import ChannelResolver
from core.requests import ConversationKey
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.support.engine import test_settings as make_settings


async def test_channels_set_stores_a_places_limits_which_win_over_the_settings(
    db: Database, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings("http://127.0.0.1:9", database_url=database_url, data_dir=tmp_path,
                             user_requests_per_day=5, user_tokens_per_day=1000)

    async def cli(*argv: str) -> int:
        return await channels(settings, build_parser().parse_args(["channels", *argv]))

    assert await cli("set", "slack:T1", "user_tokens_per_day=20000") == 0
    assert await cli("set", "slack:T1:C1", "user_requests_per_day=50") == 0
    resolver = ChannelResolver(settings=settings, source=ChannelConfigStore(db))
    here = await resolver.resolve(ConversationKey(platform="slack", workspace="T1", channel="C1"))
    assert (here.person_limits.requests_per_day, here.person_limits.tokens_per_day) == (50, 20_000)
    assert here.origins["user_requests_per_day"] == "slack:T1:C1" and here.origins["user_tokens_per_day"] == "slack:T1"
    elsewhere = await resolver.resolve(ConversationKey(platform="slack", workspace="T2", channel="C1"))
    assert (elsewhere.person_limits.requests_per_day, elsewhere.person_limits.tokens_per_day) == (5, 1000)
    capsys.readouterr()
    assert await cli("show", "slack:T1:C1") == 0
    shown = capsys.readouterr().out
    assert "user_requests_per_day   50  (slack:T1:C1)" in shown and "user_tokens_per_day     20000  (slack:T1)" in shown
    # A limit is a whole number; FIELD= clears it, back to the next level's.
    assert await cli("set", "slack:T1:C1", "user_requests_per_day=lots") == 2
    assert "user_requests_per_day is a whole number" in capsys.readouterr().err
    assert await cli("set", "slack:T1:C1", "user_requests_per_day=") == 0
    here = await resolver.resolve(ConversationKey(platform="slack", workspace="T1", channel="C1"))
    assert here.person_limits.requests_per_day == 5
