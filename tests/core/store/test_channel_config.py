"""Per-channel settings in Postgres: changes audited, resolution channel → workspace → settings, and
restricted sources searched only where granted (PgRetriever's filter, used by every search path)."""

from __future__ import annotations

from pathlib import Path

import pytest

import bot.platforms  # noqa: F401  (registers the platforms' settings groups, as every entry point does)
from core.channels import ChannelResolver, ChannelSettingsError, audiences, channel_scope, resolve
from core.config import Settings
from core.requests import ConversationKey
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.retriever import SourceScope
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore, UnknownSource
from core.store.db import Database

FINANCE = ConversationKey(platform="slack", workspace="T1", channel="CFIN", thread="1.0")
GENERAL = ConversationKey(platform="slack", workspace="T1", channel="CGEN", thread="2.0")
DM = ConversationKey(platform="slack", workspace="T1", channel="D1", direct=True)


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, llm_model="base-model", **values)


@pytest.fixture
async def store(db: Database) -> ChannelConfigStore:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM channel_config")
        await conn.execute("DELETE FROM config_audit")
        await conn.execute("DELETE FROM sources")
    return ChannelConfigStore(db)


async def test_a_change_is_stored_audited_and_resolved_channel_over_workspace_over_settings(store: ChannelConfigStore) -> None:
    await store.update("slack:T1", set_fields={"agent_type": "agentic", "model": "ws-model"}, actor="cli:ops")
    _, changed = await store.update(
        "slack:T1:CFIN", set_fields={"agent_type": "research", "approvers": ["U9"], "system_prompt": "Be formal."},
        actor="cli:alice",
    )
    assert {entry.field for entry in changed} == {"agent_type", "approvers", "system_prompt"}
    resolver = ChannelResolver(settings=settings(approvers="U1"), source=store)
    finance = await resolver.resolve(FINANCE)
    assert (finance.agent_type, finance.model, finance.approvers) == ("research", "ws-model", frozenset({"U9"}))
    assert finance.origins["agent_type"] == "slack:T1:CFIN" and finance.origins["model"] == "slack:T1"
    assert finance.system_prompt == "Be formal."
    general = await resolver.resolve(GENERAL)
    assert (general.agent_type, general.model, general.approvers) == ("agentic", "ws-model", frozenset({"U1"}))
    assert general.origins["approvers"] == "settings"

    # Clearing a field falls back a level; a change that changes nothing records nothing.
    await store.update("slack:T1:CFIN", unset=["agent_type"], actor="cli:bob")
    assert (await resolver.resolve(FINANCE)).agent_type == "agentic"
    assert (await store.update("slack:T1:CFIN", set_fields={"approvers": ["U9"]}, actor="cli:bob"))[1] == []

    history = await store.history("slack:T1:CFIN")
    assert [(e.field, e.before, e.after, e.changed_by) for e in history][0] == ("agent_type", "research", None, "cli:bob")
    assert ("agent_type", None, "research", "cli:alice") in [(e.field, e.before, e.after, e.changed_by) for e in history]
    assert [c.scope for c in await store.list()] == ["slack:T1", "slack:T1:CFIN"]


async def test_bad_values_are_refused_before_anything_is_written(store: ChannelConfigStore) -> None:
    with pytest.raises(ChannelSettingsError):
        await store.update("slack:T1:C1", set_fields={"colour": "red"}, actor="cli:x")
    with pytest.raises(ChannelSettingsError):
        await store.update("slack:T1:C1", set_fields={"tool_policy": {"read_url": "sometimes"}}, actor="cli:x")
    with pytest.raises(ChannelSettingsError):
        await store.update("slack:T1:C1", set_fields={"followups_need_mention": "yes"}, actor="cli:x")
    assert await store.history() == []


def test_follow_ups_default_from_the_platform_setting_and_a_discord_thread_is_its_parent_channel() -> None:
    base = settings(slack_thread_followups=True, discord_message_content_intent=False)
    assert not resolve(GENERAL, channel=None, workspace=None, settings=base).followups_need_mention
    thread = ConversationKey(platform="discord", workspace="G1", channel="PARENT", thread="THREAD")
    assert resolve(thread, channel=None, workspace=None, settings=base).followups_need_mention
    assert channel_scope(thread) == "discord:G1:PARENT"
    # A DM's searches use its workspace's DM grants, never a channel's.
    assert audiences(DM) == ("slack:T1:dms",) and audiences(FINANCE) == ("slack:T1:CFIN",)
    assert DM == ConversationKey(platform="slack", workspace="T1", channel="D1")  # `direct` is not identity


def test_a_platform_without_a_settings_group_does_not_get_another_platforms_follow_up_default() -> None:
    """Each platform's default comes from its own settings group (issue 23); one that has none answers only
    mentions in threads, whatever Slack's SLACK_THREAD_FOLLOWUPS says."""
    base = settings(slack_thread_followups=True, discord_message_content_intent=True)
    third = ConversationKey(platform="mattermost", workspace="W1", channel="C1", thread="T1")
    assert resolve(third, channel=None, workspace=None, settings=base).followups_need_mention
    discord = ConversationKey(platform="discord", workspace="G1", channel="C1", thread="T1")
    assert not resolve(discord, channel=None, workspace=None, settings=base).followups_need_mention
    assert resolve(GENERAL, channel=None, workspace=None, settings=settings(slack_thread_followups=False)).followups_need_mention


async def test_a_restricted_source_is_searched_only_where_granted(store: ChannelConfigStore, db: Database, tmp_path: Path) -> None:
    (tmp_path / "fin").mkdir()
    (tmp_path / "fin" / "q3.md").write_text("# Budget\n\nThe quarterly budget for zeppelins is 4 million.\n")
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "about.md").write_text("# Zeppelins\n\nOur zeppelins fly on Tuesdays.\n")
    await ingest(
        db, IngestRequest(source="finance", exposure="prefetch", targets=[str(tmp_path / "fin")]),
        embedder=None,
    )
    await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(tmp_path / "gen")]),
        embedder=None,
    )
    retriever = PgRetriever(db, None)

    async def seen(scope: SourceScope | None) -> set[str]:
        return {item.source for item in await retriever.search("zeppelins budget", limit=5, scope=scope)}

    assert await seen(None) == {"finance", "handbook"}  # open by default: existing setups unchanged
    assert await store.set_restricted("finance", True, actor="cli:ops")
    assert not await store.set_restricted("finance", True, actor="cli:ops")
    await store.grant("finance", "slack:T1:CFIN", actor="cli:ops")
    await store.grant("finance", "slack:T2:dms", actor="cli:ops")

    assert await seen(None) == {"handbook"}  # no scope: open sources only
    assert await seen(SourceScope(audiences=audiences(GENERAL))) == {"handbook"}
    assert await seen(SourceScope(audiences=audiences(DM))) == {"handbook"}  # T1's DMs were not granted it
    assert await seen(SourceScope(audiences=audiences(FINANCE))) == {"finance", "handbook"}
    assert await seen(SourceScope(audiences=("slack:T2:dms",))) == {"finance", "handbook"}
    assert await seen(SourceScope(audiences=audiences(FINANCE), only=("finance",))) == {"finance"}
    assert not await retriever.has_sources("agentic_tool", scope=SourceScope(audiences=audiences(FINANCE)))

    assert await store.revoke("finance", "slack:T1:CFIN", actor="cli:ops")
    assert await seen(SourceScope(audiences=audiences(FINANCE))) == {"handbook"}
    assert await store.granted_to("slack:T2:dms") == ["finance"]
    access = {a.name: a for a in await store.access()}
    assert access["finance"].restricted and access["finance"].granted_to == ("slack:T2:dms",)
    assert not access["handbook"].restricted
    fields = [(e.scope, e.field, e.after) for e in await store.history()]
    assert ("source:finance", "restricted", True) in fields
    assert ("slack:T1:CFIN", "source finance", "not granted") in fields
    with pytest.raises(UnknownSource):
        await store.grant("nope", "slack:T1:CFIN", actor="cli:ops")
