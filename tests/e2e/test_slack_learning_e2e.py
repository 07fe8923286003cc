"""Learning from Slack channels end to end: the real SlackAdapter (Bolt, slack_sdk) against the Slack emulator, the
engine's ChannelLearningService and the visibility rule over the test Postgres, the model emulator's prompts read.

A channel with threads backfilled and cited by permalink; a backfill stopped half-way (a restart) goes on from its
checkpoint without reading or storing anything twice; an edit and a delete reach what the model is given; a
private channel's passage never reaches the model for an asker outside it, or in a channel whose members differ;
/relaybot's modal turns learning on (and says why it cannot where the bot is not in the channel); over the HTTP API
a learned channel reaches only the keys it is granted to."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import aiohttp
import pytest

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from core.engine import Engine
from core.learning.model import ChannelPlace
from core.learning.service import ChannelLearningService
from core.learning.visibility import ChannelVisibility
from core.retrieval.search import PgRetriever
from bot.keys_cli import grant_key_sources
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from core.store.learned_channels import source_name
from core.tools import ToolServices
from core.tools.read_conversation import PlatformReaders
from tests.adapters.api.harness import auth, serve_api
from tests.e2e.slack_harness import ALICE, BOB, bot_replies, dm, eventually, mention
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator, channel_message_event
from tests.support.engine import make_engine
from tests.support.ports import ports_for
from tests.support.learning import indexed_texts, learn, stored

pytestmark = pytest.mark.timeout(120)

INCIDENTS, GENERAL, SECRET = "C0000INCID", "C0000GENRL", "G0000SECRT"
DAY = 86_400.0
# How the prompt numbers a passage: "[n] title (uri)" (core/sources.py render_numbered).
_NUMBERED = re.compile(r"^\[(\d+)\] (.+) \((\S+)\)$", re.M)


@dataclass(kw_only=True)
class LearningBot:
    adapter: SlackAdapter
    engine: Engine
    http: HttpServer
    learning: ChannelLearningService
    retriever: PgRetriever

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}/slack/events"


@asynccontextmanager
async def learning_bot(db: Database, slack: SlackEmulator, llm_url: str, **overrides: Any) -> AsyncIterator[LearningBot]:
    """A bot process as bot/runtime.py wires learning: one service lent to the adapter (ports.learning), the adapter's
    history door attached to it and its facts to the retriever's visibility rule."""
    settings: dict[str, Any] = {
        "slack_bot_token": slack.bot_token, "slack_signing_secret": slack.signing_secret,
        "slack_api_url": slack.api_url, "http_port": 0, "slack_native_streaming": "off", **overrides,
    }
    visibility = ChannelVisibility()
    readers = PlatformReaders()
    retriever = PgRetriever(db, None, visibility=visibility)
    engine = make_engine(db, llm_url, retriever=retriever,
                         tool_services=ToolServices(conversations=readers), **settings)
    learning = ChannelLearningService(db, embedder=None, settings=engine.settings)
    http = HttpServer(host="127.0.0.1", port=0)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db, learning=learning), http=http,
                           time_scale=slack.time_scale)
    learning.attach(adapter.platform, adapter.channel_history)
    visibility.attach(adapter.platform, adapter.channel_facts)
    readers.register(adapter.platform, adapter.reader)
    await http.start()
    await adapter.start()
    try:
        yield LearningBot(adapter=adapter, engine=engine, http=http, learning=learning, retriever=retriever)
    finally:
        await adapter.stop_accepting()
        await adapter.close()
        await http.stop()
        await learning.close()


@pytest.fixture(autouse=True)
async def no_sources(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")


def place(slack: SlackEmulator, channel: str) -> ChannelPlace:
    return ChannelPlace(platform="slack", workspace=slack.team_id, channel=channel)


def prompt(openai: OpenAIEmulator) -> str:
    return json.dumps(openai.chat_requests[-1]["messages"], ensure_ascii=False)


async def ask(bot: LearningBot, slack: SlackEmulator, openai: OpenAIEmulator, channel: str, question: str, *,
              user: str = ALICE, answer: str = "Noted.", direct: bool = False) -> str:
    """The question asked (mentioned in a channel, or in a DM); the prompt the model was given for it."""
    asked = len(openai.chat_requests)
    openai.script(Text(answer))
    event = dm(slack, channel, question, user=user) if direct else mention(slack, channel, question, user=user)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: len(openai.chat_requests) > asked)
    return prompt(openai)


def incidents_history(slack: SlackEmulator) -> tuple[str, str]:
    """#incidents: a thread 30 days old (Alice's root, Bob's replies), a plain message, another app's, and one too old."""
    now = time.time()
    slack.add_user(ALICE, display_name="alice.w")
    slack.add_user(BOB, display_name="bob")
    slack.add_channel(INCIDENTS, name="incidents", members=[ALICE, BOB])
    slack.add_user_message(INCIDENTS, "the old mainframe caught fire", ALICE, at=now - 400 * DAY)
    root = slack.add_user_message(INCIDENTS, "the payments database ran out of disk", ALICE, at=now - 30 * DAY)
    slack.add_user_message(INCIDENTS, "grew the volume to 2 TB, payments are back", BOB, root, at=now - 30 * DAY + 300)
    slack.add_bot_message(INCIDENTS, "pagerduty: payments alert resolved", bot_id="B0000PAGER", username="pagerduty",
                          at=now - 30 * DAY + 600)
    plain = slack.add_user_message(INCIDENTS, "the staging cluster is frozen for the audit", BOB, at=now - 5 * DAY)
    return root, plain


async def test_a_channel_with_threads_is_backfilled_and_its_answers_cite_the_threads_permalink(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, _ = incidents_history(slack)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, INCIDENTS))
        learned = await bot.learning.get(place(slack, INCIDENTS))
        assert learned is not None and learned.name == "incidents" and not learned.private
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "what happened to the payments database?",
                          answer="It ran out of disk; the volume was grown [1].")
        assert "alice.w: the payments database ran out of disk" in given
        assert "bob: grew the volume to 2 TB" in given
        assert "pagerduty" not in given and "mainframe" not in given  # another app's message; older than 90 days
        day = datetime.fromtimestamp(float(root), tz=timezone.utc).strftime("%Y-%m-%d")
        title = f"#incidents — {day}, thread by alice.w"
        link = f"https://{slack.team().domain}.slack.com/archives/{INCIDENTS}/p{root.replace('.', '')}"
        numbered = {int(n): (t, uri) for n, t, uri in _NUMBERED.findall(openai_emulator.chat_requests[-1]["messages"][0]["content"])}
        assert (title, link) in numbered.values()
        question = [m for m in slack.messages(INCIDENTS) if "what happened" in m.text][0]
        assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in bot_replies(slack, INCIDENTS, question.ts)))
        sources = [m for m in bot_replies(slack, INCIDENTS, question.ts) if m.text.startswith("*Sources*")][0]
        assert f"<{link}|{title}>" in sources.text
    # Permalinks came from the documented form: no chat.getPermalink was asked.
    assert "chat.getPermalink" not in slack.call_names()


async def test_a_backfill_stopped_half_way_goes_on_from_its_checkpoint_without_duplicates(
    db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    # The limited tier (one history call a minute, 15 messages a page) on a clock where a Slack minute is 0.6 s.
    async with SlackEmulator(time_scale=0.01) as slack:
        slack.limit_history("limited")
        slack.add_channel(INCIDENTS, name="incidents", members=[ALICE])
        now = time.time()
        written = [slack.add_user_message(INCIDENTS, f"status update number {n}", ALICE, at=now - DAY + n)
                   for n in range(50)]
        source = f"channel:slack:{slack.team_id}:{INCIDENTS}"
        async with learning_bot(db, slack, openai_emulator.base_url, slack_history_tier="limited") as first:
            await first.learning.add(place(slack, INCIDENTS), since_days=30, keep_days=None)
            backfill = asyncio.create_task(first.learning.run_due())
            for _ in range(1500):
                if len(await stored(db, source)) >= 15:
                    break
                await asyncio.sleep(0.02)
            backfill.cancel()  # the process stops mid-backfill
            await asyncio.gather(backfill, return_exceptions=True)
        half = await stored(db, source)
        assert 15 <= len(half) < 50
        calls_before = len(slack.calls)
        async with learning_bot(db, slack, openai_emulator.base_url, slack_history_tier="limited") as second:
            for _ in range(400):
                await second.learning.run_due()
                learned = await second.learning.get(place(slack, INCIDENTS))
                if learned is not None and learned.state == "live":
                    break
                await asyncio.sleep(0.02)
            assert learned is not None and learned.state == "live"
            await second.learning.settled()
        after = [c for c in slack.calls[calls_before:] if c.method == "conversations.history" and c.status == 200]
        # It went on from its cursor (never from the newest page again), and read each message once.
        assert after and after[0].params.get("cursor"), "the first page after the restart is the checkpoint's"
        assert sorted(await stored(db, source)) == sorted(written)
        seen = Counter(int(n) for text in await indexed_texts(db) for n in re.findall(r"status update number (\d+)", text))
        assert seen == Counter(range(50)), "each message in the index once"


async def test_an_edit_and_a_delete_reach_what_the_model_is_given(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, plain = incidents_history(slack)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, INCIDENTS))
        reply = slack.thread(INCIDENTS, root)[1].ts
        await slack.deliver_events(bot.url, slack.edit_message(INCIDENTS, reply, "grew the volume to 4 TB, payments are back"))
        await eventually(lambda: bot.adapter.learning.events.pending == 0)
        await bot.learning.settled()
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "how big is the payments volume?")
        assert "grew the volume to 4 TB" in given and "2 TB" not in given
        await slack.deliver_events(bot.url, slack.delete_message(INCIDENTS, plain))
        await eventually(lambda: bot.adapter.learning.events.pending == 0)
        await bot.learning.settled()
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "is the staging cluster frozen for the audit?")
        assert "staging cluster is frozen" not in given
        # A new message in the channel is learned as it comes.
        ts = slack.add_user_message(INCIDENTS, "the ledger service moved to the new region", BOB)
        await slack.deliver_events(bot.url, [channel_message_event(
            text="the ledger service moved to the new region", user=BOB, channel=INCIDENTS, ts=ts, team_id=slack.team_id)])
        await eventually(lambda: bot.adapter.learning.events.pending == 0)
        await bot.learning.settled()
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "where did the ledger service move?")
        assert "the ledger service moved to the new region" in given


async def test_a_private_channels_passage_never_reaches_an_asker_outside_it_or_a_channel_with_other_members(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.add_user(ALICE, display_name="alice.w")
    slack.add_user(BOB, display_name="bob")
    slack.add_channel(SECRET, name="launch", private=True, members=[ALICE])
    slack.add_channel(GENERAL, name="general", members=[ALICE, BOB])
    slack.add_user_message(SECRET, "the zeppelin launch code is 4711", ALICE, at=time.time() - DAY)
    slack.set_dm_user("D0000ALICE", ALICE)
    slack.set_dm_user("D0000BOB", BOB)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, SECRET))
        # Bob is not in #launch: in his DM, never.
        assert "4711" not in await ask(bot, slack, openai_emulator, "D0000BOB", "what is the zeppelin launch code?",
                                       user=BOB, direct=True)
        # In #general, whose members differ, never — though Alice, who is in #launch, asks.
        assert "4711" not in await ask(bot, slack, openai_emulator, GENERAL, "what is the zeppelin launch code?")
        # Alice's own DM: she reads #launch, so it is given (the rule lets through what it should).
        assert "4711" in await ask(bot, slack, openai_emulator, "D0000ALICE", "what is the zeppelin launch code?",
                                   direct=True)


async def test_relaybot_turns_learning_on_and_says_why_not_where_the_bot_is_not_in_the_channel(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    incidents_history(slack)
    slack.make_admin(ALICE)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=INCIDENTS))
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        blocks = {b.get("block_id"): b for b in opened.view["blocks"]}
        assert "initial_options" not in blocks["learn"]["element"] and "Not learned from" in json.dumps(opened.view)
        saved = await slack.deliver_interaction(bot.url, slack.view_submission(
            opened.view_id, {"learn": True, "learn_since": "365"}))
        assert saved.status == 200 and saved.body == "", "closed: saved"
        learned = await bot.learning.get(place(slack, INCIDENTS))
        assert learned is not None and learned.since_days == 365
        assert await eventually(lambda: any("learning from this channel: on" in e.text for e in slack.ephemerals))
        # Opened again: it says so.
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=INCIDENTS))
        assert await eventually(lambda: len(slack.opened_views) == 2)
        again = {b.get("block_id"): b for b in slack.opened_views[1].view["blocks"]}
        assert again["learn"]["element"]["initial_options"][0]["value"] == "on"
        assert again["learn_since"]["element"]["initial_option"]["value"] == "365"
        # A channel the bot is not in: the modal shows why, and what to do; nothing is chosen.
        slack.add_channel(GENERAL, name="general", members=[ALICE])
        slack.remove_bot_from(GENERAL)
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=GENERAL))
        assert await eventually(lambda: len(slack.opened_views) == 3)
        refused = await slack.deliver_interaction(bot.url, slack.view_submission(
            slack.opened_views[2].view_id, {"learn": True}))
        errors = json.loads(refused.body)["errors"]
        assert "invite @relaybot to #general first (`/invite @relaybot`" in errors["learn"]
        assert await bot.learning.get(place(slack, GENERAL)) is None
        # Off again: everything learnt from #incidents goes.
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=INCIDENTS))
        assert await eventually(lambda: len(slack.opened_views) == 4)
        off = await slack.deliver_interaction(bot.url, slack.view_submission(slack.opened_views[3].view_id, {"learn": False}))
        assert off.status == 200 and off.body == ""
        assert await bot.learning.get(place(slack, INCIDENTS)) is None


async def test_a_rename_and_the_bots_removal_reach_the_service_through_bolt(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    incidents_history(slack)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, INCIDENTS))
        deliveries = await slack.deliver_events(bot.url, slack.rename_channel(INCIDENTS, "incidents-2026"))
        assert [d.status for d in deliveries] == [200]
        assert await eventually(lambda: bot.adapter.learning.events.pending == 0)
        learned = await bot.learning.get(place(slack, INCIDENTS))
        assert learned is not None and learned.name == "incidents-2026"
        # Removed from the channel (Bolt keeps member_left_channel of its own user): learning stops, its rows go.
        await slack.deliver_events(bot.url, slack.leave_channel(INCIDENTS, slack.bot_user_id, by=ALICE))
        for _ in range(200):
            if await bot.learning.get(place(slack, INCIDENTS)) is None:
                break
            await asyncio.sleep(0.02)
        assert await bot.learning.get(place(slack, INCIDENTS)) is None
        assert await indexed_texts(db) == []


async def test_a_public_channels_passage_reaches_channels_without_guests_only(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, _ = incidents_history(slack)
    slack.add_user("U0000GUEST", guest="single")
    slack.add_channel(GENERAL, name="general", members=[ALICE, BOB])
    slack.add_channel("C0000GUEST", name="with-contractor", members=[ALICE, "U0000GUEST"])
    slack.add_channel("C0000SHARD", name="with-partner", members=[ALICE], shared="external")
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, INCIDENTS))
        question = "what happened to the payments database?"
        # #general: every member a full member of the workspace, not shared — a public channel's passages are given.
        assert "ran out of disk" in await ask(bot, slack, openai_emulator, GENERAL, question)
        # A guest among the members (users.info is_ultra_restricted), or Slack Connect: never.
        assert "ran out of disk" not in await ask(bot, slack, openai_emulator, "C0000GUEST", question)
        assert "ran out of disk" not in await ask(bot, slack, openai_emulator, "C0000SHARD", question)
        # A guest invited into #general later: the member event makes the facts read its members again.
        await slack.deliver_events(bot.url, slack.join_channel(GENERAL, "U0000GUEST", inviter=ALICE))
        assert await eventually(lambda: bot.adapter.learning.events.pending == 0)
        assert "ran out of disk" not in await ask(bot, slack, openai_emulator, GENERAL, question)


async def test_what_came_while_the_bot_was_down_is_caught_up_at_its_next_start(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root, plain = incidents_history(slack)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, INCIDENTS))
    # Down: a new reply in the month-old thread (its root's latest_reply moves), an edit of a recent message, and a
    # new message — no event reaches any bot.
    slack.add_user_message(INCIDENTS, "postmortem: the disk alert threshold is now 70%", ALICE, root)
    slack.edit_message(INCIDENTS, plain, "the staging cluster is frozen until the audit ends on Friday")
    slack.add_user_message(INCIDENTS, "the billing job moved to 02:00 UTC", BOB)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        # The catch-up of a start: history since the checkpoint, each thread with newer replies, the recent rescan.
        assert await bot.learning.run_due() == 1
        assert await bot.learning.run_due() == 0, "once per start"
        await bot.learning.settled()
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "what is the disk alert threshold now?")
        assert "postmortem: the disk alert threshold is now 70%" in given
        given = await ask(bot, slack, openai_emulator, INCIDENTS, "until when is staging frozen, and the billing job?")
        assert "frozen until the audit ends on Friday" in given and "billing job moved to 02:00 UTC" in given


async def test_over_the_http_api_a_learned_channel_reaches_only_the_keys_it_is_granted_to(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.add_user(ALICE, display_name="alice.w")
    slack.add_channel(SECRET, name="launch", private=True, members=[ALICE])
    slack.add_user_message(SECRET, "the zeppelin launch code is 4711", ALICE, at=time.time() - DAY)
    async with learning_bot(db, slack, openai_emulator.base_url) as bot:
        await learn(bot.learning, place(slack, SECRET))
        async with serve_api(db, openai_emulator.base_url, retriever=bot.retriever) as api, aiohttp.ClientSession() as http:
            # As `relaybot keys create launch --sources channel:slack:<team>:<channel>` makes it, and one without.
            granted, granted_secret = await api.keys.create("launch", sources=(source_name(place(slack, SECRET)),))
            await grant_key_sources(ChannelConfigStore(db), granted, actor="cli:test")
            _, plain_secret = await api.keys.create("everything else")

            async def api_prompt(secret: str) -> str:
                asked = len(openai_emulator.chat_requests)
                openai_emulator.script(Text("Noted."))
                async with http.post(f"{api.url}/api/answer", json={"question": "what is the zeppelin launch code?"},
                                     headers=auth(secret)) as response:
                    assert response.status == 200, await response.text()
                assert len(openai_emulator.chat_requests) > asked
                return prompt(openai_emulator)

            assert "4711" in await api_prompt(granted_secret)
            assert "4711" not in await api_prompt(plain_secret)
