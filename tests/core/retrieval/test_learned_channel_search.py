"""Learned channels' passages through the real retriever and Postgres: the visibility rule holds inside search, and
has_sources agrees with it; through the engine, a private channel's passage never reaches the model's prompt."""

from __future__ import annotations

import json

import pytest

from core.api_access import api_conversation_key, api_key_audience
from core.channels import answer_scope, resolve
from core.learning.visibility import ChannelVisibility
from core.platform_settings import PlatformDefaults
from core.requests import Actor, ConversationKey, Request
from core.retrieval.retriever import SourceScope
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore, SourceOfAnotherTeam
from core.store.db import Database
from tests.core.learning.test_visibility import ModelFacts, world
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine, test_settings as settings_for

SECRET_TEXT = "the zeppelin launch code is 4711"


async def add_passage(db: Database, *, name: str, owner: str, text: str, kind: str = "files",
                      restricted: bool = False) -> int:
    """One source holding one document of one chunk: a learned channel is kind 'channel', restricted, its team's."""
    async with db.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO sources (name, kind, owner, restricted, exposure) VALUES (%s, %s, %s, %s, 'prefetch')"
            " RETURNING id", (name, kind, owner, restricted))
        row = await cursor.fetchone()
        assert row is not None
        source_id = int(row[0])
        cursor = await conn.execute(
            "INSERT INTO documents (source_id, uri, title, content_hash) VALUES (%s, %s, %s, 'h') RETURNING id",
            (source_id, f"https://example.test/{name}", name))
        doc = await cursor.fetchone()
        assert doc is not None
        await conn.execute("INSERT INTO chunks (document_id, source_id, ord, text, token_count) VALUES (%s, %s, 0, %s, 12)",
                           (doc[0], source_id, text))
    return source_id


async def add_learned(db: Database, channel: str, *, workspace: str = "T1", platform: str = "slack",
                      text: str = "", private: bool = False, owner: str | None = None) -> int:
    """A learned channel as migration 028 shapes one: its source (kind 'channel', its team's, restricted) and row."""
    source_id = await add_passage(db, name=f"channel:{platform}:{workspace}:{channel}",
                                  owner=f"{platform}:{workspace}" if owner is None else owner,
                                  text=text or f"zeppelin notes from {channel}", kind="channel", restricted=True)
    async with db.connection() as conn:
        await conn.execute("INSERT INTO learned_channels (source_id, platform, workspace, channel, name, private, since_days,"
                           " state) VALUES (%s, %s, %s, %s, %s, %s, 90, 'live')",
                           (source_id, platform, workspace, channel, channel.lower(), private))
    return source_id


def conversation(channel: str, *, direct: bool = False, workspace: str = "T1") -> ConversationKey:
    return ConversationKey(platform="slack", workspace=workspace, channel=channel, direct=direct)


def scope_for(key: ConversationKey, asker: str | None) -> SourceScope:
    """The scope Runs.config gives an answer here (asker None: a resumed run)."""
    config = resolve(key, channel=None, workspace=None, settings=settings_for("http://127.0.0.1:9"),
                     defaults=PlatformDefaults())
    request = Request(question="q", conversation=key, user=Actor(id=asker, name=asker)) if asker else None
    return answer_scope(config.scope, sources=None, request=request)


async def found(retriever: PgRetriever, scope: SourceScope, query: str = "zeppelin") -> set[str]:
    return {item.source for item in await retriever.search(query, limit=20, scope=scope)}


@pytest.fixture
async def channels(db: Database) -> Database:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    for channel in ("GENERAL", "RANDOM", "SECRET", "WITHGUEST", "CONNECT"):
        await add_learned(db, channel, text=SECRET_TEXT if channel == "SECRET" else "", private=channel == "SECRET")
    # Stored as public when learning began, private since: the platform's facts decide.
    await add_learned(db, "TEAMPRIV", text="zeppelin team-only notes")
    await add_learned(db, "OTHER", workspace="T2")
    await add_passage(db, name="handbook", owner="", text="zeppelin handbook page")
    return db


def retriever_with(db: Database, facts: ModelFacts | None = None) -> PgRetriever:
    visibility = ChannelVisibility()
    visibility.attach("slack", facts or ModelFacts(world()))
    return PgRetriever(db, None, visibility=visibility)


def learned(name: str) -> str:
    return f"channel:slack:T1:{name}"


async def test_a_private_channels_passage_never_reaches_an_asker_outside_it_or_a_channel_of_other_members(
    channels: Database,
) -> None:
    retriever = retriever_with(channels)
    # U2 is not in SECRET: in a DM, never; in a channel with other members, never, even when U1 (a member) asks.
    assert learned("SECRET") not in await found(retriever, scope_for(conversation("D1", direct=True), "U2"))
    assert learned("SECRET") not in await found(retriever, scope_for(conversation("GENERAL"), "U1"))
    assert await found(retriever, scope_for(conversation("GENERAL"), "U1")) == {
        learned("GENERAL"), learned("RANDOM"), learned("WITHGUEST"), "handbook"}
    assert learned("TEAMPRIV") in await found(retriever, scope_for(conversation("D1", direct=True), "U2"))
    # In the channel itself, and in the DM of a member, it is there.
    assert learned("SECRET") in await found(retriever, scope_for(conversation("SECRET"), "U1"))
    assert learned("SECRET") in await found(retriever, scope_for(conversation("D1", direct=True), "U1"))
    # Where a guest or Slack Connect will see the answer: the channel's own passages only.
    assert await found(retriever, scope_for(conversation("CONNECT"), "U1")) == {learned("CONNECT"), "handbook"}
    assert await found(retriever, scope_for(conversation("WITHGUEST"), "U1")) == {learned("WITHGUEST"), "handbook"}


async def test_no_audience_no_rule_or_another_team_sees_no_learned_channel(channels: Database) -> None:
    retriever = retriever_with(channels)
    assert await found(retriever, scope_for(conversation("GENERAL"), None)) == {"handbook"}  # a resumed run
    assert await found(PgRetriever(channels, None), scope_for(conversation("GENERAL"), "U1")) == {"handbook"}
    assert await found(retriever, scope_for(conversation("OTHER", workspace="T2"), "U1")) == {
        "channel:slack:T2:OTHER", "handbook"}
    assert "channel:slack:T2:OTHER" not in await found(retriever, scope_for(conversation("D1", direct=True), "U1"))
    # A grant does not widen the rule: SECRET granted to GENERAL's audience is still not seen there.
    async with channels.connection() as conn:
        await conn.execute("INSERT INTO source_grants (source_id, audience, granted_by)"
                           " SELECT id, 'slack:T1:GENERAL', 'test' FROM sources WHERE name = %s", (learned("SECRET"),))
    assert learned("SECRET") not in await found(retriever, scope_for(conversation("GENERAL"), "U1"))
    # An API key sees a learned channel only when it is granted to that key (relaybot keys create --sources).
    assert await found(retriever, scope_for(api_conversation_key(7, "c1"), "key:7")) == {"handbook"}
    store = ChannelConfigStore(channels)
    assert await store.grant(learned("SECRET"), api_key_audience(7), actor="cli:test")  # as relaybot keys create does
    assert await found(retriever, scope_for(api_conversation_key(7, "c1"), "key:7")) == {learned("SECRET"), "handbook"}
    with pytest.raises(SourceOfAnotherTeam):  # a key may be granted it; another team's channel may not
        await store.grant(learned("SECRET"), "slack:T2:C1", actor="cli:test")
    assert await found(retriever, scope_for(api_conversation_key(8, "c1"), "key:8")) == {"handbook"}  # another key
    # A grant to the API keys' audience widens nothing for the team's own conversations.
    assert learned("SECRET") not in await found(retriever, scope_for(conversation("GENERAL"), "U1"))
    # Operators' tools see every source, as before the rule.
    assert learned("SECRET") in await found(retriever, SourceScope(owners=None, every_restricted=True))


async def test_a_channel_source_nothing_vouches_for_is_never_seen(channels: Database) -> None:
    # Owned by another team than its channel's, or with no learned_channels row: left out, wherever asked.
    await add_learned(channels, "ODD", owner="slack:T9")
    await add_passage(channels, name="channel:slack:T1:BARE", owner="slack:T1", text="zeppelin bare", kind="channel",
                      restricted=True)
    retriever = retriever_with(channels)
    for channel in ("ODD", "BARE"):
        scope = SourceScope(audiences=(f"slack:T1:{channel}",), owners=("slack:T9", "slack:T1"),
                            audience=scope_for(conversation(channel), "U1").audience)
        assert f"channel:slack:T1:{channel}" not in await found(retriever, scope)


async def test_has_sources_agrees_with_search(channels: Database) -> None:
    async with channels.connection() as conn:
        await conn.execute("DELETE FROM sources WHERE name NOT IN (%s, %s)", (learned("SECRET"), learned("GENERAL")))
    retriever = retriever_with(channels)
    cases = [(conversation("D1", direct=True), "U2"), (conversation("D1", direct=True), "U3"),
             (conversation("WITHGUEST"), "U1"), (conversation("SECRET"), "U1"), (conversation("RANDOM"), None),
             (conversation("CONNECT"), "U1"), (conversation("RANDOM"), "U2")]
    for key, asker in cases:
        scope = scope_for(key, asker)
        assert await retriever.has_sources("prefetch", scope=scope) == bool(await found(retriever, scope)), (key, asker)
    assert not await retriever.has_sources("prefetch", scope=scope_for(conversation("CONNECT"), "U1"))
    assert await retriever.has_sources("prefetch", scope=scope_for(conversation("D1", direct=True), "U3"))


async def test_a_bot_that_learns_nothing_asks_the_platform_nothing(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    await add_passage(db, name="handbook", owner="", text="zeppelin handbook page")
    facts = ModelFacts(world())
    retriever = retriever_with(db, facts)
    for key, asker in ((conversation("D1", direct=True), "U1"), (conversation("GENERAL"), "U1")):
        assert await found(retriever, scope_for(key, asker)) == {"handbook"}
        assert await retriever.has_sources("prefetch", scope=scope_for(key, asker))
    # A learned channel answered in itself needs no fact either.
    await add_learned(db, "SECRET", private=True)
    assert await found(retriever, scope_for(conversation("SECRET"), "U1")) == {"handbook", learned("SECRET")}
    assert not facts.place_calls and not facts.readable_calls
    # Nor one stored as private, answered in another channel: it never goes there.
    assert await found(retriever, scope_for(conversation("GENERAL"), "U1")) == {"handbook"}
    assert not facts.place_calls and not facts.readable_calls
    # In a DM the rule reads at most one readers' list per search.
    await found(retriever, scope_for(conversation("D1", direct=True), "U1"))
    assert len(facts.readable_calls) == 1


async def test_the_engines_prompt_never_carries_a_private_channels_passage_to_others(
    channels: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(channels, openai_emulator.base_url, retriever=retriever_with(channels))
    asked = [(conversation("GENERAL"), "U1"), (conversation("D1", direct=True), "U2"),
             (conversation("D1", direct=True), "U1")]
    seen = len(openai_emulator.chat_requests)
    for key, asker in asked:
        openai_emulator.script(Text("See [1]."))
        question = Request(question="What is the zeppelin launch code?", conversation=key, user=Actor(id=asker, name=asker))
        [event async for event in engine.ask(question)]
    general, outsider_dm, member_dm = (json.dumps(body) for body in openai_emulator.chat_requests[seen:])
    assert SECRET_TEXT not in general and SECRET_TEXT not in outsider_dm
    assert SECRET_TEXT in member_dm
