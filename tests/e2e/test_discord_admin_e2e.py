"""Discord's `/relaybot config` end to end with real discord.py: Manage Server (or a configured role) changes the
channel's agent type, and the next question there, asked of a second engine on the same database, runs it; anyone
else is refused and nothing changes."""

from __future__ import annotations

import pytest

from core.requests import Actor, ConversationKey, Request
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc

pytestmark = pytest.mark.timeout(60)

MANAGE_GUILD = 1 << 5


async def answered(dc: DiscordEmulator, interaction_id: int) -> str:
    """The private answer a /relaybot config command ends with (its deferred response, edited)."""

    def final() -> str | None:
        responses = dc.interaction_responses(interaction_id)
        edits = [r.content for r in responses if r.kind == "edit_original" and r.content]
        if edits:
            return edits[-1]
        sent = [r.content for r in responses if r.kind == "callback" and r.callback_type == 4 and r.content]
        return sent[-1] if sent else None

    text = await dc.wait_for(final, what="the command's answer")
    assert dc.interaction_responses(interaction_id)[0].ephemeral, "only the person who asked sees it"
    return text


async def test_manage_server_sets_the_agent_type_and_a_second_engine_uses_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    mods = dc.add_role(w.guild_id, "mods", permissions=MANAGE_GUILD)
    dc.grant_role(w.alice, mods)
    retriever = InMemoryRetriever(docs=[MemoryDoc(title="Zeppelins", text="zeppelins fly on tuesdays")])
    # The second process: its own engine on the same database, built before the change.
    other = make_engine(db, openai_emulator.base_url, retriever=retriever)
    scope = f"discord:{w.guild_id}:{w.channel_id}"
    async with running_bot(dc, db, openai_emulator, retriever=retriever):
        relaybot = next(c for c in dc.commands() if c["name"] == "relaybot")
        assert [o["name"] for o in relaybot["options"]] == ["config"]
        assert {o["name"] for o in relaybot["options"][0]["options"]} == {"show", "set", "clear", "history", "learn"}

        shown = await answered(dc, await dc.invoke_slash("relaybot config show", {}, w.alice, w.channel_id))
        assert "• `agent_type`: classic (settings)" in shown

        done = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "agent_type", "value": "agentic"}, w.alice, w.channel_id))
        assert "agent\\_type: - → agentic" in done

        openai_emulator.script(Text("Agentic answer."))
        key = ConversationKey(platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id), thread="t1")
        result = await other.answer(Request(question="when do zeppelins fly", conversation=key, user=Actor(id=str(w.bob))))
        assert result.answer == "Agentic answer."
        tools = [t["function"]["name"] for t in openai_emulator.chat_requests[-1].get("tools") or []]
        assert "internal_search" in tools

        bad = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "agent_type", "value": "wizard"}, w.alice, w.channel_id))
        assert "not saved" in bad and "unknown agent type" in bad
        history = await answered(dc, await dc.invoke_slash("relaybot config history", {}, w.alice, w.channel_id))
        assert f"discord:{w.guild_id}:{w.alice}" in history and "agentic" in history

    entries = await ChannelConfigStore(db).history(scope)
    assert [(e.field, e.before, e.after, e.changed_by) for e in entries] == [
        ("agent_type", None, "agentic", f"discord:{w.guild_id}:{w.alice}")
    ]


async def test_a_member_without_manage_server_is_refused_and_a_configured_role_is_not(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    ops = dc.add_role(w.guild_id, "ops")
    dc.grant_role(w.alice, ops)
    scope = f"discord:{w.guild_id}:{w.channel_id}"
    async with running_bot(dc, db, openai_emulator, channel_admin_roles=str(ops)):
        refused = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "model", "value": "gpt-4o"}, w.bob, w.channel_id))
        assert refused.startswith("Only members with Manage Server")
        assert await ChannelConfigStore(db).history(scope) == []

        done = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "followups_need_mention", "value": "yes"}, w.alice, w.channel_id))
        assert "followups\\_need\\_mention: - → true" in done
        cleared = await answered(dc, await dc.invoke_slash(
            "relaybot config clear", {"field": "followups_need_mention"}, w.alice, w.channel_id))
        assert "true → -" in cleared
    assert [(e.field, e.after) for e in await ChannelConfigStore(db).history(scope)] == [
        ("followups_need_mention", None), ("followups_need_mention", True)
    ]
