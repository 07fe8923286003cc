"""Tenant isolation (issue 25) on a real Postgres: two Slack teams' sources, channel settings, feedback, usage and
approvals never cross, and forget_team drops one team's pending work, or purges its rows, leaving the other's."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from core.api_access import api_conversation_key, api_key_audience
from core.approvals import Click
from core.channel_admin import ChannelAdmin
from core.channels import ChannelResolver, resolve
from core.events import ApprovalRequired, Event
from core.platform_settings import PlatformDefaults
from core.requests import Actor, ConversationKey, Request
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.retriever import OPEN_SOURCES
from core.retrieval.search import PgRetriever
from core.retrieval.store import SourceOwnedElsewhere, adopt_deployment_sources, list_sources
from core.store.channel_config import ChannelConfigStore, SourceOfAnotherTeam
from core.store.db import Database
from core.store.feedback import FeedbackStore
from core.store.team_data import forget_team
from core.store.usage import TurnUsage, UsageLog
from tests.core.engine.support import RecordingTool, registry_with
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine, test_settings as settings_for

A_SECRET = "the zeppelin budget is 4 million crowns"
B_TEXT = "the zeppelin hangar stands in Lyon"
SHARED_TEXT = "zeppelin questions go to the airship desk"
SINGLE = PlatformDefaults()  # single-workspace mode: the deployment's sources are shared
MULTI = PlatformDefaults(shares_deployment_sources=False)  # Slack's multi-workspace mode


def key(team: str, channel: str = "C1", *, direct: bool = False) -> ConversationKey:
    return ConversationKey(platform="slack", workspace=team, channel=channel, direct=direct)


@pytest.fixture(autouse=True)
async def clean(db: Database) -> None:
    async with db.connection() as conn:
        for table in ("sources", "channel_config", "config_audit", "feedback", "token_usage", "conversations",
                      "continuations", "reminders", "pending_finals", "live_messages", "run_stops", "learned_limits",
                      "conversation_leases"):
            await conn.execute(f"DELETE FROM {table}")


async def add_source(db: Database, root: Path, *, name: str, owner: str, text: str) -> None:
    root.mkdir(parents=True)
    (root / f"{name}.md").write_text(f"# {name}\n\nNote: {text}.\n")
    await ingest(db, IngestRequest(source=name, exposure="prefetch", targets=(str(root),), owner=owner), embedder=None)


@pytest.fixture
async def three_sources(db: Database, tmp_path: Path) -> PgRetriever:
    await add_source(db, tmp_path / "alpha", name="alpha", owner="slack:TA", text=A_SECRET)
    await add_source(db, tmp_path / "beta", name="beta", owner="slack:TB", text=B_TEXT)
    await add_source(db, tmp_path / "shared", name="shared", owner="", text=SHARED_TEXT)
    return PgRetriever(db, None)


async def searched(retriever: PgRetriever, conversation: ConversationKey, defaults: PlatformDefaults) -> set[str]:
    config = resolve(conversation, channel=None, workspace=None, settings=settings_for("http://127.0.0.1:9"),
                     defaults=defaults)
    return {item.source for item in await retriever.search("zeppelin", limit=10, scope=config.scope)}


async def test_team_b_retrieval_never_returns_team_a_passages(db: Database, three_sources: PgRetriever) -> None:
    retriever = three_sources
    # Single-workspace mode: each team its own plus the deployment's, as before owners existed.
    assert await searched(retriever, key("TB"), SINGLE) == {"beta", "shared"}
    assert await searched(retriever, key("TA"), SINGLE) == {"alpha", "shared"}
    assert await searched(retriever, key("TB", "D1", direct=True), SINGLE) == {"beta", "shared"}
    # Multi-workspace mode: no team searches the deployment's sources.
    assert await searched(retriever, key("TB"), MULTI) == {"beta"}
    # A grant of A's source to B's channel would mean nothing: it is refused, and a grant written anyway is ignored.
    store = ChannelConfigStore(db)
    await store.set_restricted("alpha", True, actor="cli:test")
    with pytest.raises(SourceOfAnotherTeam):
        await store.grant("alpha", "slack:TB:C1", actor="cli:test")
    async with db.connection() as conn:
        await conn.execute("INSERT INTO source_grants (source_id, audience, granted_by)"
                           " SELECT id, 'slack:TB:C1', 'test' FROM sources WHERE name = 'alpha'")
    assert await searched(retriever, key("TB"), SINGLE) == {"beta", "shared"}
    assert await store.grant("alpha", "slack:TA:C1", actor="cli:test")
    assert await searched(retriever, key("TA"), SINGLE) == {"alpha", "shared"}
    # An API key is the deployment's: its conversations search the deployment's sources, never a team's.
    assert await searched(retriever, api_conversation_key(7, "c1"), SINGLE) == {"shared"}
    with pytest.raises(SourceOfAnotherTeam):
        await store.grant("beta", api_key_audience(7), actor="cli:test")
    # A search that names no scope sees the deployment's open sources only, and nothing of a team's tells B otherwise.
    assert {item.source for item in await retriever.search("zeppelin", limit=10, scope=OPEN_SOURCES)} == {"shared"}
    config = resolve(key("TC"), channel=None, workspace=None, settings=settings_for("http://127.0.0.1:9"), defaults=MULTI)
    assert not await retriever.has_sources("prefetch", scope=config.scope)


async def test_team_b_prompts_never_carry_team_a_passages(
    db: Database, three_sources: PgRetriever, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url, retriever=three_sources)
    seen = len(openai_emulator.chat_requests)
    for team in ("TB", "TA"):
        openai_emulator.script(Text("See [1]."))
        question = Request(question="Where is the zeppelin?", conversation=key(team, "C7"), user=Actor(id="U1", name="Ada"))
        [event async for event in engine.ask(question)]
    b_prompt, a_prompt = (json.dumps(body) for body in openai_emulator.chat_requests[seen:])
    assert B_TEXT in b_prompt and SHARED_TEXT in b_prompt and A_SECRET not in b_prompt
    assert A_SECRET in a_prompt and B_TEXT not in a_prompt


async def test_an_ingest_never_writes_into_another_teams_source(db: Database, three_sources: PgRetriever, tmp_path: Path) -> None:
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "b.md").write_text("# B\n\nTeam B's words.\n")
    for owner in ("slack:TB", ""):
        with pytest.raises(SourceOwnedElsewhere, match="belongs to team slack:TA"):
            await ingest(db, IngestRequest(source="alpha", exposure="prefetch", targets=(str(tmp_path / "more"),),
                                           owner=owner), embedder=None)
    [alpha] = await list_sources(db, owner="slack:TA")
    assert (alpha.name, alpha.documents) == ("alpha", 1)
    assert [row.name for row in await list_sources(db, owner="")] == ["shared"]
    # `relaybot teams import`'s rule: the deployment's sources become the imported team's, nothing else moves.
    assert await adopt_deployment_sources(db, "slack:TA") == ["shared"]
    assert [row.name for row in await list_sources(db, owner="slack:TA")] == ["alpha", "shared"]


async def test_channel_settings_of_one_team_never_apply_to_another(db: Database) -> None:
    store = ChannelConfigStore(db)
    await store.update("slack:TA", set_fields={"system_prompt": "Answer like a pirate."}, actor="cli:test")
    await store.update("slack:TA:C1", set_fields={"agent_type": "agentic"}, actor="cli:test")
    resolver = ChannelResolver(settings=settings_for("http://127.0.0.1:9"), source=store)
    a, b = await resolver.resolve(key("TA")), await resolver.resolve(key("TB"))
    assert (a.system_prompt, a.agent_type) == ("Answer like a pirate.", "agentic")
    assert (b.system_prompt, b.origins["agent_type"]) == ("", "settings")


async def test_a_channels_settings_editor_offers_its_own_teams_sources_only(db: Database, three_sources: PgRetriever) -> None:
    settings = settings_for("http://127.0.0.1:9")
    store = ChannelConfigStore(db)
    admin = ChannelAdmin(store=store, resolver=ChannelResolver(settings=settings, source=store), settings=settings)
    assert (await admin.view(key("TB"))).source_names == ("beta", "shared")
    assert (await admin.view(key("TA"))).source_names == ("alpha", "shared")


async def stored_turn(db: Database, team: str) -> str:
    turn = uuid.uuid4()
    async with db.connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO conversations (platform, workspace, channel) VALUES ('slack', %s, 'C1')"
            " ON CONFLICT (platform, workspace, channel, thread) DO UPDATE SET updated_at = now() RETURNING id", (team,))
        row = await cursor.fetchone()
        assert row is not None
        await conn.execute("INSERT INTO messages (conversation_id, turn_id, role, content) VALUES (%s, %s, 'user', 'q'),"
                           " (%s, %s, 'assistant', 'a')", (row[0], turn, row[0], turn))
    return str(turn)


async def test_feedback_is_kept_and_exported_per_team(db: Database) -> None:
    store = FeedbackStore(db)
    a_turn, b_turn = await stored_turn(db, "TA"), await stored_turn(db, "TB")
    # A click from team B naming A's answer lands nowhere.
    assert not await store.vote(a_turn, user_id="U9", user_name="eve", platform="slack", up=False, workspace="TB")
    assert not await store.comment(a_turn, user_id="U9", user_name="eve", platform="slack", text="x", workspace="TB")
    assert await store.vote(a_turn, user_id="U1", user_name="ada", platform="slack", up=True, workspace="TA")
    assert await store.vote(b_turn, user_id="U2", user_name="bob", platform="slack", up=False, workspace="TB")
    assert [(r.user_id, r.workspace) for r in await store.export(team=("slack", "TA"))] == [("U1", "TA")]
    assert [(r.user_id, r.workspace) for r in await store.export(team=("slack", "TB"))] == [("U2", "TB")]
    assert len(await store.export()) == 2


async def test_usage_is_reported_per_team(db: Database) -> None:
    log = UsageLog(db)
    for team, tokens in (("TA", 100), ("TB", 7)):
        await log.add(TurnUsage(turn_id=str(uuid.uuid4()), platform="slack", workspace=team, channel="C1", user="U1",
                                model="m", prompt_tokens=tokens, completion_tokens=0))
    [line] = await log.report(by="user", team=("slack", "TB"))
    assert line.tokens == 7
    assert sum(line.tokens for line in await log.report(by="channel")) == 107


async def paused(engine: Any, emulator: OpenAIEmulator, team: str, channel: str = "C-deploy",
                 *, resumed: bool = True) -> ApprovalRequired:
    emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_dep")]), *([Text("Deployed.")] if resumed else []))
    request = Request(question="please deploy", conversation=key(team, channel), user=Actor(id="U1", name="Ada"))
    events: list[Event] = [event async for event in engine.ask(request)]
    assert isinstance(events[-1], ApprovalRequired), events[-1]
    return events[-1]


async def test_an_approval_of_team_a_cannot_be_found_or_decided_from_team_b(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    tool = RecordingTool(requires_approval=True)
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(tool))
    approval = await paused(engine, openai_emulator, "TA")
    # Team B's admin (an admin may decide anything in their own team) and even the requester's id, clicked from B.
    for actor in (Actor(id="UB", name="B admin", is_admin=True), Actor(id="U1", name="Ada")):
        refused = await engine.approvals.click(Click(continuation_id=approval.continuation_id, approved=True,
                                                     actor=actor, team="slack:TB"))
        assert (refused.outcome, refused.reason, refused.view, refused.events) == ("refused", "not_found", None, None)
    assert await engine.approvals.view(approval.continuation_id, team="slack:TB") is None
    assert tool.runs == []
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT status, decisions FROM continuations WHERE id = %s",
                                    (uuid.UUID(approval.continuation_id),))
        assert await cursor.fetchone() == ("pending", {})
    # From its own team the same click decides it.
    assert (await engine.approvals.view(approval.continuation_id, team="slack:TA")) is not None
    result = await engine.approvals.click(Click(continuation_id=approval.continuation_id, approved=True,
                                                actor=Actor(id="U1", name="Ada"), team="slack:TA"))
    assert result.outcome == "ready" and result.claimed and result.events is not None
    [event async for event in result.events]
    assert tool.runs == [{"env": "prod"}]


async def seed_team(db: Database, team: str, tmp_path: Path) -> None:
    """One row of the team in every table that holds a team's rows."""
    turn = await stored_turn(db, team)
    await FeedbackStore(db).vote(turn, user_id="U1", user_name="ada", platform="slack", up=True, workspace=team)
    await UsageLog(db).add(TurnUsage(turn_id=turn, platform="slack", workspace=team, channel="C1", user="U1", model="m",
                                     prompt_tokens=1, completion_tokens=1))
    await add_source(db, tmp_path / team, name=f"docs-{team}", owner=f"slack:{team}", text=f"words of {team}")
    store = ChannelConfigStore(db)
    await store.update(f"slack:{team}:C1", set_fields={"model": "m2"}, actor="cli:test")
    await store.set_restricted(f"docs-{team}", True, actor="cli:test")
    await store.grant(f"docs-{team}", f"slack:{team}:C1", actor="cli:test")
    async with db.connection() as conn:
        await conn.execute("UPDATE sources SET sync_interval_s = 3600 WHERE owner = %s", (f"slack:{team}",))
        cursor = await conn.execute("SELECT id FROM conversations WHERE platform = 'slack' AND workspace = %s", (team,))
        row = await cursor.fetchone()
        assert row is not None
        state = {"conversation": {"platform": "slack", "workspace": team, "channel": "C1", "thread": ""}}
        await conn.execute(
            "INSERT INTO continuations (id, conversation_id, schema_version, state, call_ids, requested_by, expires_at,"
            " platform) VALUES (%s, %s, 1, %s, '{c1}', 'U1', now() + interval '1 hour', 'slack')",
            (uuid.uuid4(), row[0], json.dumps(state)))
        await conn.execute("INSERT INTO conversation_leases (conversation_id, holder, expires_at) VALUES (%s, 'p', now())",
                           (row[0],))
        await conn.execute("INSERT INTO pending_finals (answer_id, platform, workspace, channel, parts)"
                           " VALUES (%s, 'slack', %s, 'C1', '[]')", (f"final-{team}", team))
        await conn.execute("INSERT INTO live_messages (platform, workspace, channel, message_id)"
                           " VALUES ('slack', %s, %s, '1.0')", (team, f"C-{team}"))
        await conn.execute("INSERT INTO reminders (platform, workspace, channel, user_id, text, due_at)"
                           " VALUES ('slack', %s, 'C1', 'U1', 'ping', now() + interval '1 day')", (team,))
        await conn.execute("INSERT INTO run_stops (run_id, platform, workspace, channel, asked_by)"
                           " VALUES (%s, 'slack', %s, 'C1', 'U1')", (uuid.uuid4(), team))
        await conn.execute("INSERT INTO learned_limits (scope, per_s, learned_by) VALUES (%s, 1.0, 'p')",
                           (f"slack:{team}:chat.postMessage",))


COUNTS = {
    "conversations": "SELECT count(*) FROM conversations WHERE workspace = %(w)s",
    "messages": "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.workspace = %(w)s",
    "continuations": "SELECT count(*) FROM continuations WHERE state -> 'conversation' ->> 'workspace' = %(w)s",
    "pending continuations": "SELECT count(*) FROM continuations WHERE state -> 'conversation' ->> 'workspace' = %(w)s"
                             " AND status = 'pending'",
    "conversation_leases": "SELECT count(*) FROM conversation_leases l JOIN conversations c ON c.id = l.conversation_id"
                           " WHERE c.workspace = %(w)s",
    "feedback": "SELECT count(*) FROM feedback WHERE workspace = %(w)s",
    "token_usage": "SELECT count(*) FROM token_usage WHERE workspace = %(w)s",
    "sources": "SELECT count(*) FROM sources WHERE owner = 'slack:' || %(w)s",
    "synced sources": "SELECT count(*) FROM sources WHERE owner = 'slack:' || %(w)s AND sync_interval_s IS NOT NULL",
    "chunks": "SELECT count(*) FROM chunks c JOIN sources s ON s.id = c.source_id WHERE s.owner = 'slack:' || %(w)s",
    "source_grants": "SELECT count(*) FROM source_grants WHERE audience LIKE 'slack:' || %(w)s || ':%%'",
    "channel_config": "SELECT count(*) FROM channel_config WHERE scope LIKE 'slack:' || %(w)s || ':%%'",
    "config_audit": "SELECT count(*) FROM config_audit WHERE scope LIKE 'slack:' || %(w)s || ':%%'"
                    " OR scope = 'source:docs-' || %(w)s",
    "pending_finals": "SELECT count(*) FROM pending_finals WHERE workspace = %(w)s",
    "live_messages": "SELECT count(*) FROM live_messages WHERE workspace = %(w)s",
    "reminders": "SELECT count(*) FROM reminders WHERE workspace = %(w)s",
    "pending reminders": "SELECT count(*) FROM reminders WHERE workspace = %(w)s AND status = 'pending'",
    "run_stops": "SELECT count(*) FROM run_stops WHERE workspace = %(w)s",
    "learned_limits": "SELECT count(*) FROM learned_limits WHERE scope LIKE 'slack:' || %(w)s || ':%%'",
}


async def counts(db: Database, team: str) -> dict[str, int]:
    found = {}
    async with db.connection() as conn:
        for name, query in COUNTS.items():
            cursor = await conn.execute(query, {"w": team})
            row = await cursor.fetchone()
            found[name] = int(row[0]) if row else -1
    return found


async def test_forget_team_drops_its_pending_work_and_keeps_its_data_then_purges_every_row(
    db: Database, tmp_path: Path
) -> None:
    await seed_team(db, "TA", tmp_path)
    await seed_team(db, "TB", tmp_path)
    b_before = await counts(db, "TB")
    assert all(count > 0 for count in b_before.values()), b_before

    kept = await forget_team(db, "slack", "TA", purge=False)
    after = await counts(db, "TA")
    # Its pending work is gone: kept finals, live records, pending reminders and approvals, scheduled syncs.
    assert {name: after[name] for name in ("pending_finals", "live_messages", "pending reminders",
                                           "pending continuations", "synced sources")} == dict.fromkeys(
        ("pending_finals", "live_messages", "pending reminders", "pending continuations", "synced sources"), 0)
    assert kept.dropped == {"pending_finals": 1, "live_messages": 1, "reminders": 1, "continuations": 1}
    assert kept.syncs_stopped == ("docs-TA",) and not kept.deleted
    # Its data waits (a reinstall finds it): conversations, history, settings, sources, usage, feedback.
    for name in ("conversations", "messages", "feedback", "token_usage", "sources", "chunks", "source_grants",
                 "channel_config", "config_audit", "reminders", "continuations", "run_stops"):
        assert after[name] > 0, name
    assert await counts(db, "TB") == b_before

    purged = await forget_team(db, "slack", "TA", purge=True)
    assert purged.purged and sum(purged.deleted.values()) > 0
    assert await counts(db, "TA") == dict.fromkeys(COUNTS, 0)
    assert await counts(db, "TB") == b_before


async def test_a_teams_open_approvals_are_never_crowded_out_by_another_teams(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url, registry=registry_with(RecordingTool(requires_approval=True)))
    b_approval = await paused(engine, openai_emulator, "TB", "C-b", resumed=False)
    for number in range(3):
        # Newer, and more than the scan looks at.
        await paused(engine, openai_emulator, "TA", f"C-a{number}", resumed=False)
    ada = Actor(id="U1", name="Ada")
    found = await engine.approvals.pending_for(ada, platform="slack", workspace="TB", scan=2)
    assert [p.view.continuation_id for p in found] == [b_approval.continuation_id]
    assert len(await engine.approvals.pending_for(ada, platform="slack", workspace="TA", scan=2)) == 2


async def test_forget_team_refuses_a_team_without_a_workspace(db: Database) -> None:
    with pytest.raises(ValueError, match="needs a platform and a workspace id"):
        await forget_team(db, "slack", "", purge=True)


def test_slacks_multi_workspace_mode_shares_no_deployment_sources_and_single_workspace_mode_does() -> None:
    # In "Add to Slack" mode the teams are other owners: none of them may search what was ingested without --team.
    from adapters.slack.settings import SlackSettings

    assert SlackSettings(bot_token="xoxb-1").defaults().shares_deployment_sources
    multi = SlackSettings(client_id="1.2", client_secret="s")
    assert multi.multi_workspace and not multi.defaults().shares_deployment_sources
