"""Source scoping end to end on both platforms: a document restricted to #finance is cited there, and
never reaches the prompt, internal_search's results or the sources reply in #general, in a thread of
#general, in a DM, or through Discord's /ask (checked on the requests the OpenAI emulator received)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.e2e.slack_harness import bot_replies, dm, eventually, mention, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(90)

SECRET = "4 million crowns"
QUESTION = "what is the zeppelin budget?"
SEARCH = ToolCalls([Call("internal_search", '{"query": "zeppelin budget"}', id="s1")])


@pytest.fixture(autouse=True)
async def documents(db: Database, tmp_path: Path) -> PgRetriever:
    """An open handbook and a finance source restricted to the finance channel (granted per test)."""
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
        await conn.execute("DELETE FROM channel_config")
    (tmp_path / "finance").mkdir()
    (tmp_path / "finance" / "budget.md").write_text(f"# Zeppelin budget\n\nThe zeppelin budget is {SECRET}.\n")
    (tmp_path / "handbook").mkdir()
    (tmp_path / "handbook" / "zeppelins.md").write_text(
        "# Zeppelin handbook\n\nQuestions about the zeppelin budget go to the finance channel.\n"
    )
    await ingest(
        db, IngestRequest(source="finance", exposure="prefetch", targets=[str(tmp_path / "finance")]),
        embedder=None,
    )
    await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(tmp_path / "handbook")]),
        embedder=None,
    )
    await ChannelConfigStore(db).set_restricted("finance", True, actor="cli:test")
    return PgRetriever(db, None)


def leaked(requests: list[dict[str, Any]]) -> list[int]:
    """Indexes of model requests that carry the restricted text anywhere (prompt, tool results, history)."""
    return [index for index, body in enumerate(requests) if SECRET in json.dumps(body)]


async def test_slack_finance_document_stays_in_finance(
    db: Database, documents: PgRetriever, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    store = ChannelConfigStore(db)
    await store.grant("finance", f"slack:{slack.team_id}:C0000FINAN", actor="cli:test")
    # #general searches through internal_search (agentic), so the tool's results are checked too.
    await store.update(f"slack:{slack.team_id}:C0000GENRL", set_fields={"agent_type": "agentic"}, actor="cli:test")
    bot = await start_bot(db, slack, openai_emulator.base_url, retriever=documents)
    try:
        # In #finance: prefetched, cited, listed.
        openai_emulator.script(Text("The budget is set in the finance document [1]."))
        asked = mention(slack, "C0000FINAN", QUESTION)
        await slack.deliver_event(bot.url, asked)
        assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in bot_replies(slack, "C0000FINAN", asked["ts"])))
        assert leaked(openai_emulator.chat_requests) == [0]
        finance_sources = bot_replies(slack, "C0000FINAN", asked["ts"])[-1].text
        assert "Zeppelin budget" in finance_sources
        seen = len(openai_emulator.chat_requests)

        # In #general: internal_search finds the handbook only; the answer cites it.
        openai_emulator.script(SEARCH, Text("Ask the finance channel [1]."))
        general = mention(slack, "C0000GENRL", QUESTION)
        await slack.deliver_event(bot.url, general)
        assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in bot_replies(slack, "C0000GENRL", general["ts"])))
        tool_result = next(m for m in openai_emulator.chat_requests[-1]["messages"] if m["role"] == "tool")["content"]
        assert "Zeppelin handbook" in tool_result and "Zeppelin budget" not in tool_result

        # In a thread of #general: a second mention there.
        openai_emulator.script(SEARCH, Text("Still the handbook [1]."))
        again = mention(slack, "C0000GENRL", "and the zeppelin budget in detail?", thread_ts=general["ts"])
        await slack.deliver_event(bot.url, again)
        assert await eventually(lambda: any("Still the handbook" in m.text for m in bot_replies(slack, "C0000GENRL", general["ts"])))

        # In a DM: classic prefetch, which finds the handbook only.
        openai_emulator.script(Text("See the handbook [1]."))
        direct = dm(slack, "D0000ALICE", QUESTION)
        await slack.deliver_event(bot.url, direct)
        in_dm = lambda: slack.messages("D0000ALICE") + slack.thread("D0000ALICE", direct["ts"])  # noqa: E731
        assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in in_dm() if m.is_bot))
    finally:
        await bot.stop()
    assert leaked(openai_emulator.chat_requests[seen:]) == []
    outside = [m.text for channel in ("C0000GENRL", "D0000ALICE") for m in slack.messages(channel) if m.is_bot]
    outside += [m.text for m in bot_replies(slack, "C0000GENRL", general["ts"])]
    assert outside and not any("Zeppelin budget" in text or SECRET in text for text in outside)
    assert any("Zeppelin handbook" in text for text in outside)


async def test_discord_finance_document_stays_in_finance(
    db: Database, documents: PgRetriever, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    finance = dc.add_channel(w.guild_id, "finance")
    store = ChannelConfigStore(db)
    await store.grant("finance", f"discord:{w.guild_id}:{finance}", actor="cli:test")
    await store.update(f"discord:{w.guild_id}:{w.channel_id}", set_fields={"agent_type": "agentic"}, actor="cli:test")
    async with running_bot(dc, db, openai_emulator, retriever=documents):
        openai_emulator.script(Text("The budget is in the finance document [1]."))
        asked = await dc.send_user_message(finance, w.alice, QUESTION, mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="finance thread")
        [cited] = await dc.wait_for(lambda: [m for m in bot_messages(dc, thread.id) if m.embeds], what="sources embed")
        assert "Zeppelin budget" in cited.embeds[0]["description"]
        assert leaked(openai_emulator.chat_requests) == [0]
        seen = len(openai_emulator.chat_requests)

        # #general (agentic: internal_search), then a follow-up mention in the thread it opened.
        openai_emulator.script(SEARCH, Text("Ask the finance channel [1]."), SEARCH, Text("Still the handbook [1]."))
        general = await dc.send_user_message(w.channel_id, w.alice, QUESTION, mentions_bot=True)
        general_thread = await dc.wait_for(lambda: dc.thread_of(general), what="general thread")
        await dc.wait_for(lambda: [m for m in bot_messages(dc, general_thread.id) if m.embeds], what="general sources")
        await dc.send_user_message(general_thread.id, w.alice, "and in detail?", mentions_bot=True)
        await dc.wait_for(
            lambda: len([m for m in bot_messages(dc, general_thread.id) if m.embeds]) == 2, what="thread sources"
        )

        # /ask in #general (agentic there: one search), then /ask in #finance, which does see it.
        openai_emulator.script(SEARCH, Text("Asked: the handbook [1]."))
        await dc.invoke_slash("ask", {"question": QUESTION}, w.alice, w.channel_id)
        await dc.wait_for(lambda: any("Asked: the handbook" in m.content for m in bot_messages(dc, w.channel_id)),
                          what="/ask answer")
        assert leaked(openai_emulator.chat_requests[seen:]) == []
        openai_emulator.script(Text("Asked in finance [1]."))
        await dc.invoke_slash("ask", {"question": QUESTION}, w.alice, finance)
        await dc.wait_for(lambda: any("Asked in finance" in m.content for m in bot_messages(dc, finance)), what="/ask in finance")
        assert SECRET in json.dumps(openai_emulator.chat_requests[-1])
        seen = len(openai_emulator.chat_requests)

        # A DM.
        openai_emulator.script(Text("See the handbook [1]."))
        await dc.send_dm(w.alice, QUESTION)
        await wait_for_text(dc, dc.dm_channel_id(w.alice), "See the handbook [1].")
        embeds = await dc.wait_for(
            lambda: [m for m in bot_messages(dc, dc.dm_channel_id(w.alice)) if m.embeds], what="DM sources"
        )
    assert leaked(openai_emulator.chat_requests[seen:]) == []
    shown = [m.embeds[0]["description"] for m in bot_messages(dc, general_thread.id) + embeds if m.embeds]
    shown += [m.embeds[0]["description"] for m in bot_messages(dc, w.channel_id) if m.embeds]
    assert len(shown) == 4 and all("Zeppelin handbook" in text and "Zeppelin budget" not in text for text in shown)
    # Every internal_search ran in #general (its thread and /ask included): the handbook only, each time.
    tool_results = {m["content"] for body in openai_emulator.chat_requests for m in body["messages"] if m["role"] == "tool"}
    assert len(tool_results) >= 1 and all("Zeppelin handbook" in t and "Zeppelin budget" not in t for t in tool_results)
