"""Two Slack workspaces installed, each with a source of its own (issue 25's tenant isolation): team B's prompts,
internal_search results and sources reply never carry a passage of team A's source, prefetched or searched — read
on the requests the OpenAI emulator received — while team A's answers use it. The same for two Discord guilds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.oauth.installation_store import Installation

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from adapters.slack.installations import Sealer, SlackInstallations
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from core.store.installations import InstallStore
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.e2e.slack_harness import eventually
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator, Team, app_mention_event
from tests.emulators.slack.oauth import DEFAULT_CLIENT_ID
from tests.support.engine import make_engine
from tests.support.ports import ports_for

pytestmark = pytest.mark.timeout(60)

TEAM_B = "T0000TEAMB"
CHANNEL_A = "C0000AAAA1"
CHANNEL_B = "C0000BBBB1"
ALICE = "U0000ALICE"
BRUNO = "U0000BRUNO"
KEY = "a passphrase that is long enough to seal the tokens"
A_SECRET = "The zeppelin budget is 4 million crowns"
B_TEXT = "The zeppelin hangar stands in Lyon"
QUESTION = "what about the zeppelin budget?"
SEARCH = ToolCalls([Call("internal_search", '{"query": "zeppelin budget"}', id="s1")])


def installations(db: Database) -> SlackInstallations:
    return SlackInstallations(InstallStore(db), sealer=Sealer(KEY), client_id=DEFAULT_CLIENT_ID)


async def install(db: Database, slack: SlackEmulator, team: Team) -> None:
    token = slack.oauth.issue(team.team_id).access_token
    await installations(db).async_save(Installation(
        app_id=slack.app_id, enterprise_id=None, team_id=team.team_id, team_name=team.name, bot_token=token,
        bot_id=team.bot_id, bot_user_id=team.bot_user_id, bot_scopes="chat:write,app_mentions:read",
        user_id="UINSTALLER", is_enterprise_install=False,
    ))


async def add_source(db: Database, root: Path, *, name: str, owner: str, text: str) -> None:
    root.mkdir()
    (root / f"{name}.md").write_text(f"# Zeppelins of {name}\n\n{text}.\n")
    await ingest(db, IngestRequest(source=name, exposure="prefetch", targets=(str(root),), owner=owner), embedder=None)


@pytest.fixture
async def bot(db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
              tmp_path: Path) -> AsyncIterator[tuple[SlackEmulator, Team, Team, str]]:
    slack = slack_emulator
    a, b = slack.team(), slack.add_team(TEAM_B, name="Team B")
    slack.add_channel(CHANNEL_A, name="a-general")
    slack.add_channel(CHANNEL_B, name="b-general", team_id=TEAM_B)
    slack.add_user(ALICE)
    slack.add_user(BRUNO, team_id=TEAM_B)
    for team in (a, b):
        await install(db, slack, team)
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
        await conn.execute("DELETE FROM channel_config")
    await add_source(db, tmp_path / "alpha", name="alpha", owner=f"slack:{a.team_id}", text=A_SECRET)
    await add_source(db, tmp_path / "beta", name="beta", owner=f"slack:{TEAM_B}", text=B_TEXT)
    settings: dict[str, Any] = {
        "slack_bot_token": None, "slack_signing_secret": slack.signing_secret, "slack_api_url": slack.api_url,
        "http_port": 0, "slack_native_streaming": "off",
    }
    engine = make_engine(db, openai_emulator.base_url, retriever=PgRetriever(db, None), **settings)
    http = HttpServer(host="127.0.0.1", port=0)
    stored = installations(db)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), http=http,
                           time_scale=slack.time_scale, tokens=stored, installation_store=stored)
    await http.start()
    await adapter.start()
    try:
        yield slack, a, b, f"http://127.0.0.1:{http.port}/slack/events"
    finally:
        await adapter.stop_accepting()
        await adapter.close()
        await http.stop()


async def asked(slack: SlackEmulator, url: str, team: Team, channel: str, user: str) -> list[str]:
    """Mention the bot in the team's channel; the texts of its replies once the sources reply is there."""
    text = f"<@{team.bot_user_id}> {QUESTION}"
    ts = slack.add_user_message(channel, text, user, team_id=team.team_id)
    await slack.deliver_event(url, app_mention_event(text=text, user=user, channel=channel, ts=ts, team_id=team.team_id),
                              team_id=team.team_id)

    def texts() -> list[str]:
        return [m.text for m in slack.thread(channel, ts) if m.bot_id == team.bot_id]

    assert await eventually(lambda: any(t.startswith("*Sources*") for t in texts()))
    return texts()


async def test_team_b_prompts_never_carry_a_passage_of_team_as_source(
    db: Database, bot: tuple[SlackEmulator, Team, Team, str], openai_emulator: OpenAIEmulator
) -> None:
    slack, a, b, url = bot
    # Prefetched: B's prompt carries B's passage, never A's; B's sources reply lists B's source only.
    seen = len(openai_emulator.chat_requests)
    openai_emulator.script(Text("The hangar is in Lyon [1]."))
    b_replies = await asked(slack, url, b, CHANNEL_B, BRUNO)
    b_requests = [json.dumps(body) for body in openai_emulator.chat_requests[seen:]]
    assert b_requests and all(A_SECRET not in body for body in b_requests)
    assert B_TEXT in b_requests[0]
    assert "beta" in b_replies[-1] and "alpha" not in b_replies[-1]

    # Searched by the model itself (internal_search in an agentic channel of B): its results hold nothing of A's.
    await ChannelConfigStore(db).update(f"slack:{TEAM_B}:{CHANNEL_B}", set_fields={"agent_type": "agentic"},
                                        actor="cli:test")
    seen = len(openai_emulator.chat_requests)
    openai_emulator.script(SEARCH, Text("See the hangar note [1]."))
    await asked(slack, url, b, CHANNEL_B, BRUNO)
    searched = [json.dumps(body) for body in openai_emulator.chat_requests[seen:]]
    assert len(searched) == 2 and B_TEXT in searched[1]
    assert all(A_SECRET not in body for body in searched)

    # Team A's own answer does use A's source (and nothing of B's).
    seen = len(openai_emulator.chat_requests)
    openai_emulator.script(Text("Four million crowns [1]."))
    a_replies = await asked(slack, url, a, CHANNEL_A, ALICE)
    a_request = json.dumps(openai_emulator.chat_requests[seen])
    assert A_SECRET in a_request and B_TEXT not in a_request
    assert "alpha" in a_replies[-1]


async def test_guild_b_prompts_never_carry_a_passage_of_guild_as_source(
    db: Database, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    guild_b = dc.add_guild("Guild B")
    channel_b = dc.add_channel(guild_b, "general")
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
        await conn.execute("DELETE FROM channel_config")
    await add_source(db, tmp_path / "alpha", name="alpha", owner=f"discord:{w.guild_id}", text=A_SECRET)
    await add_source(db, tmp_path / "beta", name="beta", owner=f"discord:{guild_b}", text=B_TEXT)
    async with running_bot(dc, db, openai_emulator, retriever=PgRetriever(db, None)):
        for guild, channel, answer in ((guild_b, channel_b, "The hangar [1]."), (w.guild_id, w.channel_id, "Crowns [1].")):
            seen = len(openai_emulator.chat_requests)
            openai_emulator.script(Text(answer))
            asked = await dc.send_user_message(channel, w.alice, QUESTION, mentions_bot=True)
            thread = await dc.wait_for(lambda: dc.thread_of(asked), what="the answer's thread")
            [cited] = await dc.wait_for(lambda: [m for m in bot_messages(dc, thread.id) if m.embeds], what="sources")
            prompt = json.dumps(openai_emulator.chat_requests[seen])
            if guild == guild_b:
                assert B_TEXT in prompt and A_SECRET not in prompt
                assert "beta" in cited.embeds[0]["description"] and "alpha" not in cited.embeds[0]["description"]
            else:
                assert A_SECRET in prompt and B_TEXT not in prompt
