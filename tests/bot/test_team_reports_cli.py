"""`relaybot feedback --team` and `relaybot usage --team` (issue 25): one team's votes and tokens, nobody else's."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import pytest

from bot.usage_cli import parse_team
from core.requests import ConversationKey
from core.store.conversations import ConversationStore, NewMessage
from core.store.db import Database
from core.store.feedback import FeedbackStore
from core.store.usage import TurnUsage, UsageLog
from tests.bot.test_usage_cli import relaybot


async def turn(db: Database, platform: str, workspace: str, question: str) -> str:
    conversations = ConversationStore(db)
    conversation = await conversations.get_or_create(ConversationKey(platform=platform, workspace=workspace, channel="C1"))
    turn_id = uuid.uuid4()
    await conversations.append(conversation, turn_id, [
        NewMessage(role="user", content=question), NewMessage(role="assistant", content="An answer."),
    ])
    await UsageLog(db).add(TurnUsage(turn_id=str(turn_id), platform=platform, workspace=workspace, channel="C1",
                                     user="U1", model="m", prompt_tokens=10, completion_tokens=1))
    return str(turn_id)


async def test_feedback_and_usage_of_one_team_show_only_its_votes_and_turns(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    store = FeedbackStore(db)
    a = await turn(db, "slack", "TA", "Question of team A?")
    b = await turn(db, "slack", "TB", "Question of team B?")
    g = await turn(db, "discord", "123", "Question of the guild?")
    for turn_id, platform, workspace in ((a, "slack", "TA"), (b, "slack", "TB"), (g, "discord", "123")):
        assert await store.vote(turn_id, user_id="U1", user_name="ada", platform=platform, up=True, workspace=workspace)
    # A vote from team B naming team A's answer is not kept (the store checks the click's team).
    assert not await store.vote(a, user_id="U2", user_name="eve", platform="slack", up=False, workspace="TB")

    code, out, err = await relaybot("feedback", "--team", "slack:TA", "--format", "json", database_url=database_url,
                                    cwd=tmp_path)
    assert code == 0, err
    assert [(r["question"], r["workspace"], r["user_name"]) for r in json.loads(out)] == [
        ("Question of team A?", "TA", "ada")]
    code, out, err = await relaybot("feedback", "--team", "discord:123", "--format", "json", database_url=database_url,
                                    cwd=tmp_path)
    assert code == 0, err
    assert [r["question"] for r in json.loads(out)] == ["Question of the guild?"]

    code, out, err = await relaybot("usage", "--team", "slack:TB", "--by", "channel", "--format", "json",
                                    database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    assert [(r["workspace"], r["turns"], r["tokens_in"]) for r in json.loads(out)] == [("TB", 1, 10)]
    code, out, err = await relaybot("usage", "--format", "json", database_url=database_url, cwd=tmp_path)
    assert code == 0, err
    assert sum(r["turns"] for r in json.loads(out)) == 3

    code, out, err = await relaybot("usage", "--team", "TA", database_url=database_url, cwd=tmp_path)
    assert code == 2 and "is not a team: write PLATFORM:ID" in err


def test_a_team_is_written_platform_colon_id() -> None:
    assert parse_team("slack:T1") == ("slack", "T1") and parse_team("Discord:123") == ("discord", "123")
    for bad in ("T1", "slack:", ":T1", "slack:T1:C1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_team(bad)
