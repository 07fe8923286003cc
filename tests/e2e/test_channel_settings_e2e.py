"""Per-channel settings on a running Slack bot: `relaybot channels set` (its own process's database pool)
changes the agent type and whether follow-ups need a mention, and the next event there uses it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.channels_cli import channels
from bot.cli import build_parser
from core.store.db import Database
from tests.e2e.slack_harness import bot_replies, channel_message, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as make_settings
from tests.support.retriever import InMemoryRetriever, MemoryDoc

pytestmark = pytest.mark.timeout(60)


async def test_cli_changes_apply_to_the_next_question_without_a_restart(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    retriever = InMemoryRetriever(docs=[MemoryDoc(title="Zeppelins", text="zeppelins fly on tuesdays")])
    cli_settings = make_settings(openai_emulator.base_url, database_url=database_url, data_dir=tmp_path)

    async def cli(*argv: str) -> int:
        return await channels(cli_settings, build_parser().parse_args(["channels", *argv]))

    bot = await start_bot(db, slack, openai_emulator.base_url, retriever=retriever)
    try:
        openai_emulator.script(Text("First answer."), Text("Follow-up answer."))
        first = mention(slack, "C0000GENRL", "when do zeppelins fly")
        await slack.deliver_event(bot.url, first)
        assert await eventually(lambda: any(m.text == "First answer." for m in bot_replies(slack, "C0000GENRL", first["ts"])))
        assert "internal_search" not in [t["function"]["name"] for t in openai_emulator.chat_requests[-1].get("tools") or []]
        follow = channel_message(slack, "C0000GENRL", "and on weekends?", thread_ts=first["ts"])
        await slack.deliver_event(bot.url, follow)
        assert await eventually(lambda: any(m.text == "Follow-up answer." for m in bot_replies(slack, "C0000GENRL", first["ts"])))

        assert await cli("set", f"slack:{slack.team_id}:C0000GENRL", "agent_type=agentic", "followups_need_mention=true") == 0
        asked = len(openai_emulator.chat_requests)
        # A follow-up without a mention is now left alone…
        ignored = channel_message(slack, "C0000GENRL", "anything else?", thread_ts=first["ts"])
        await slack.deliver_event(bot.url, ignored)
        await asyncio.sleep(0.3)
        assert len(openai_emulator.chat_requests) == asked
        # …and the next question runs the agentic agent, which offers internal_search.
        openai_emulator.script(Text("Agentic answer."))
        second = mention(slack, "C0000GENRL", "when do zeppelins fly")
        await slack.deliver_event(bot.url, second)
        assert await eventually(lambda: any(m.text == "Agentic answer." for m in bot_replies(slack, "C0000GENRL", second["ts"])))
        tools = [t["function"]["name"] for t in openai_emulator.chat_requests[-1].get("tools") or []]
        assert "internal_search" in tools
    finally:
        await bot.stop()
