"""Discord's private answers end to end (issue 27, "Private answers"): `/ask private:True` streams into an ephemeral
response only the asker sees, with its sources; past the interaction token's life (or a dismissed message) the rest
goes to the asker's DMs after a sentence; a failure is a sentence; an approval waits in the asker's DMs."""

from __future__ import annotations

import json
from pathlib import Path

from adapters import wording
from bot.runtime import build_registry
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.adapters.discord.harness import DeployTool, World, approval_message, bot_messages, button_ids, make_world, running_bot
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.support.retriever import InMemoryRetriever, MemoryDoc

ANSWER = "Staging passwords rotate monthly [1]."
ROTATION = MemoryDoc(title="Rotation policy", uri="https://wiki.example/rotation", text="staging password rotation is monthly")


def seen_by(dc: DiscordEmulator, channel_id: int, user_id: int) -> list[StoredMessage]:
    """The bot's messages one user sees in a channel (ephemeral ones included)."""
    return [m for m in dc.messages_seen_by(channel_id, user_id) if m.author_id == dc.bot_user_id]


def private_texts(dc: DiscordEmulator, w: World) -> list[str]:
    return [m.content for m in seen_by(dc, w.channel_id, w.alice) if m.ephemeral and not m.embeds]


async def ask_privately(dc: DiscordEmulator, w: World, question: str) -> int:
    return await dc.invoke_slash("ask", {"question": question, "private": True}, w.alice, w.channel_id)


async def test_a_private_ask_streams_into_an_ephemeral_response_only_the_asker_sees_with_its_sources(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=3, delay_s=0.03))
    async with running_bot(dc, db, openai_emulator, retriever=InMemoryRetriever(docs=[ROTATION])):
        asked = await ask_privately(dc, w, "how often do staging passwords rotate?")
        await dc.wait_for(lambda: private_texts(dc, w) == [ANSWER], what="the private answer")
        [sources] = await dc.wait_for(lambda: [m for m in seen_by(dc, w.channel_id, w.alice) if m.embeds], what="sources")
    deferred, *rest = dc.interaction_responses(asked)
    assert deferred.callback_type == 5 and deferred.ephemeral
    [answer] = [m for m in seen_by(dc, w.channel_id, w.alice) if m.content == ANSWER]
    assert answer.ephemeral and answer.edit_count >= 2  # streamed: edited as it grew
    assert sources.ephemeral and "Rotation policy" in sources.embeds[0]["description"]
    # Nothing public: the channel and everyone else see none of it, and no DM was needed.
    assert bot_messages(dc, w.channel_id) == [] and seen_by(dc, w.channel_id, w.bob) == []
    assert bot_messages(dc, dc.dm_channel_id(w.alice)) == []
    # The question went to the model with the channel's documents, as a public /ask there would.
    assert "staging password rotation is monthly" in str(openai_emulator.chat_requests[-1]["messages"])


async def test_past_the_token_expiry_a_private_answer_continues_in_the_askers_dms_with_a_sentence(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    long_answer = "word " * 80 + "[1]."
    openai_emulator.script(Text(long_answer, chunk_chars=8, delay_s=0.05))
    async with running_bot(dc, db, openai_emulator, retriever=InMemoryRetriever(docs=[ROTATION])):
        await ask_privately(dc, w, "staging password rotation, at length")
        shown = await dc.wait_for(lambda: [t for t in private_texts(dc, w) if "word" in t], what="a first private edit")
        # The interaction's 15 minutes are over (the emulator's knob: no test waits 15 minutes).
        dc.set_interaction_token_lifetime(0.0)
        dm = dc.dm_channel_id(w.alice)

        def dm_answer() -> list[StoredMessage] | None:
            found = bot_messages(dc, dm)
            texts = [m.content for m in found if not m.embeds]
            return found if texts[1:] == [long_answer.strip()] and any(m.embeds for m in found) else None

        moved = await dc.wait_for(dm_answer, 20, what="the rest of the answer in the DMs")
    sentence, answer, sources = moved
    assert sentence.content == wording.private_moved_to_dm()
    assert answer.content == long_answer.strip() and "Rotation policy" in sources.embeds[0]["description"]
    # The private message keeps what it showed when the token ran out: the start of the answer, no more.
    [private] = private_texts(dc, w)
    assert shown and private != long_answer.strip() and long_answer.startswith(private.removesuffix(" ▌"))
    assert bot_messages(dc, w.channel_id) == [] and seen_by(dc, w.channel_id, w.bob) == []


async def test_a_dismissed_private_answer_continues_in_the_askers_dms(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    long_answer = "line " * 60
    openai_emulator.script(Text(long_answer, chunk_chars=8, delay_s=0.05))
    async with running_bot(dc, db, openai_emulator):
        await ask_privately(dc, w, "a long one")
        [first] = await dc.wait_for(
            lambda: [m for m in seen_by(dc, w.channel_id, w.alice) if "line" in m.content], what="a first private edit"
        )
        dc.dismiss_ephemeral(first.id)
        dm = dc.dm_channel_id(w.alice)
        await dc.wait_for(
            lambda: [m.content.strip() for m in bot_messages(dc, dm)] == [wording.private_moved_to_dm(), long_answer.strip()],
            20, what="the answer in the DMs",
        )
    assert bot_messages(dc, w.channel_id) == []


async def test_a_failing_model_gives_the_asker_a_private_sentence_never_a_stuck_thinking(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Fault("500"), Fault("500"), Fault("500"), Fault("500"))
    async with running_bot(dc, db, openai_emulator):
        asked = await ask_privately(dc, w, "fail please")
        [shown] = await dc.wait_for(
            lambda: [t for t in private_texts(dc, w) if t.startswith("⚠️")] or None, what="the failure sentence"
        )
    original = dc.message(dc.interaction(asked).original_message_id or 0)
    assert original.ephemeral and not original.flags & 128  # no longer "thinking…"
    assert "▌" not in shown and bot_messages(dc, w.channel_id) == []


async def test_a_private_answers_approval_waits_in_the_askers_dms_and_resumes_there(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}')]), Text("Deployed to prod."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry()):
        await ask_privately(dc, w, "deploy please")
        dm = dc.dm_channel_id(w.alice)
        approval = await dc.wait_for(lambda: approval_message(dc, dm), what="the approval in the DMs")
        await dc.wait_for(lambda: wording.private_approval_in_dm() in private_texts(dc, w), what="the pointer to it")
        assert tool.runs == [] and "deploy" in approval.content
        approve, _ = button_ids(approval)
        await dc.click_button(approval.id, approve, w.alice)
        await dc.wait_for(lambda: any(m.content == "Deployed to prod." for m in bot_messages(dc, dm)), what="resumed")
    assert tool.runs == [{"env": "prod"}]
    assert bot_messages(dc, w.channel_id) == [] and seen_by(dc, w.channel_id, w.bob) == []


async def test_where_dm_clicks_are_refused_a_private_answers_approval_is_withdrawn_with_a_sentence(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc, tool = discord_emulator, DeployTool()
    w = make_world(dc)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}')]), Text("Deployed to prod."))
    async with running_bot(dc, db, openai_emulator, registry=tool.registry(), direct_messages="closed"):
        await ask_privately(dc, w, "deploy please")
        await dc.wait_for(lambda: wording.approval_not_shown() in private_texts(dc, w), what="the withdrawal")
    assert wording.private_approval_dms_refused() in private_texts(dc, w)
    assert tool.runs == [] and len(openai_emulator.chat_requests) == 1
    # No buttons anywhere that nobody could press.
    assert bot_messages(dc, dc.dm_channel_id(w.alice)) == [] and bot_messages(dc, w.channel_id) == []

async def test_a_private_answer_carries_its_stop_button_and_then_its_votes_for_the_asker_alone(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("word " * 400, chunk_chars=5, delay_s=0.02), Text("Short and done."))
    async with running_bot(dc, db, openai_emulator, feedback_buttons=True):
        await ask_privately(dc, w, "tell me a long story")
        [answer] = await dc.wait_for(
            lambda: [m for m in seen_by(dc, w.channel_id, w.alice) if any(i.startswith("rb:s:") for i in button_ids(m))],
            what="the Stop button on the private answer",
        )
        [stop] = button_ids(answer)
        await dc.click_button(answer.id, stop, w.alice)
        await dc.wait_for(lambda: "⏹ Stopped by alice." in dc.message(answer.id).content, what="stopped")
        await ask_privately(dc, w, "a short one")
        [voted] = await dc.wait_for(
            lambda: [m for m in seen_by(dc, w.channel_id, w.alice) if m.content == "Short and done." and m.components],
            what="👍/👎 under the private answer",
        )
    assert voted.ephemeral and not any(i.startswith("rb:s:") for i in button_ids(voted))
    assert bot_messages(dc, w.channel_id) == [] and seen_by(dc, w.channel_id, w.bob) == []

async def test_a_private_answer_is_recorded_under_the_askers_dm_channel_never_the_public_one(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("word " * 200, chunk_chars=5, delay_s=0.02))
    async with running_bot(dc, db, openai_emulator):
        await ask_privately(dc, w, "a long one")
        await dc.wait_for(lambda: [t for t in private_texts(dc, w) if "word" in t], what="streaming")

        async def recorded() -> list[str]:
            async with db.connection() as conn:
                rows = await (await conn.execute(
                    "SELECT channel FROM live_messages WHERE platform = 'discord' AND workspace = %s", (str(w.guild_id),)
                )).fetchall()
            return [row[0] for row in rows]

        # What crash repair and the outbox would finish is the DM's: nothing of it can reach the channel.
        channels = await dc.wait_for(recorded, what="the live record")
    assert set(channels) == {str(dc.dm_channel_id(w.alice))}

def offered_tools(request: dict) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


async def test_a_private_answer_sees_the_sources_of_the_channel_it_was_asked_in_and_offers_no_reminders(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    finance = dc.add_channel(w.guild_id, "finance")
    documents = await finance_documents(db, tmp_path, grant=f"discord:{w.guild_id}:{finance}")
    openai_emulator.script(Text("Ask in the finance channel."), Text("It is 4 million crowns [1]."))
    # The registry relaybot run builds: create_reminder and read_conversation among its tools.
    async with running_bot(dc, db, openai_emulator, retriever=documents, registry=build_registry()):
        # Alice may read #finance, yet asked in #general: the answer sees what #general may, no more.
        await ask_privately(dc, w, "what is the zeppelin budget?")
        await dc.wait_for(lambda: private_texts(dc, w) == ["Ask in the finance channel."], what="the #general answer")
        await dc.invoke_slash("ask", {"question": "what is the zeppelin budget?", "private": True}, w.alice, finance)
        await dc.wait_for(
            lambda: [m.content for m in seen_by(dc, finance, w.alice) if not m.embeds] == ["It is 4 million crowns [1]."],
            what="the #finance answer",
        )
    in_general, in_finance = openai_emulator.chat_requests
    assert "4 million crowns" not in json.dumps(in_general) and "4 million crowns" in json.dumps(in_finance)
    assert "create_reminder" not in offered_tools(in_general) | offered_tools(in_finance)
    assert "read_conversation" in offered_tools(in_general)


async def finance_documents(db: Database, root: Path, *, grant: str) -> PgRetriever:
    """A finance source restricted to the channel `grant` names (as tests/e2e/test_source_scoping_e2e.py sets it up)."""
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
        await conn.execute("DELETE FROM channel_config")
    (root / "finance").mkdir()
    (root / "finance" / "budget.md").write_text("# Zeppelin budget\n\nThe zeppelin budget is 4 million crowns.\n")
    await ingest(db, IngestRequest(source="finance", exposure="prefetch", targets=[str(root / "finance")]), embedder=None)
    store = ChannelConfigStore(db)
    await store.set_restricted("finance", True, actor="cli:test")
    await store.grant("finance", grant, actor="cli:test")
    return PgRetriever(db, None)
