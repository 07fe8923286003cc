"""Slack's `/ask` while the database is down: the asker is told in one sentence (commands are never redelivered)."""

from __future__ import annotations


import pytest

from adapters import wording
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, eventually, start_bot
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0ASKDOWN"


async def test_ask_while_the_database_is_down_tells_the_asker_instead_of_silence(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, outage: DatabaseOutage
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await outage.down()
        delivery = await slack.deliver_command(bot.url, slack.slash_command("/ask", "is it up?", user=ALICE, channel=CHANNEL))
        assert delivery.status == 200, "a command is acked at once: Slack never redelivers it"
        assert await eventually(lambda: bool(slack.ephemerals), limit_s=10)
        [note] = slack.ephemerals
        assert note.user == ALICE and note.text == wording.database_unreachable()
        assert slack.messages(CHANNEL) == [] and openai_emulator.chat_requests == []
    finally:
        await outage.up()
        await bot.stop()
