"""`/ask private:` and `/ask dm:` end to end (real Bolt, the Slack emulator, real Postgres): a placeholder, then the whole
answer with its sources in one replace_original post only the asker sees; the DM form; the response_url's 5 posts
spent → the DM with a sentence; a failure → a sentence, never a stuck placeholder; an approval → the asker's DM."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters import wording
from adapters.slack.commands import audience_of
from adapters.slack.render import sentence
from core.channels import dm_audience
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, BOB, SlackBot, bot_replies, deploy_registry, eventually, start_bot
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000PRIVA"
ALICES_DM = "D0000ALICE"  # the emulator's conversations.open: "D" + the user id's rest
BASE = "https://github.com/acme/handbook/blob/main/docs/"
ANSWER = "Deploys need two reviewers [1]."
QUESTION = "what are the deploy rules about reviewers?"


@pytest.fixture
async def handbook(db: Database, tmp_path: Path) -> PgRetriever:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "reviewers.md").write_text("# Deploy reviewers\n\nA deploy needs two reviewers.\n")
    await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)], link_base=BASE),
                 embedder=None)
    return PgRetriever(db, None)


@pytest.fixture
async def bot(db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
              handbook: PgRetriever) -> AsyncIterator[SlackBot]:
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, retriever=handbook)
    yield started
    await started.stop()


async def ask(slack: SlackEmulator, bot: SlackBot, text: str, *, user: str = ALICE) -> str:
    """Delivers `/ask <text>` from `user` in CHANNEL; returns the command's response_url."""
    payload = slack.slash_command("/ask", text, user=user, channel=CHANNEL)
    assert (await slack.deliver_command(bot.url, payload)).status == 200
    return str(payload["response_url"])


def shown_text(ephemeral: Any) -> str:
    """Everything an ephemeral shows: its blocks' texts (the answer's markdown block, the sources' sections)."""
    parts = []
    for block in ephemeral.blocks or []:
        text = block.get("text")
        parts.append(text.get("text", "") if isinstance(text, dict) else str(text or ""))
    return "\n".join(parts) or ephemeral.text


def bot_posts(slack: SlackEmulator) -> list[Any]:
    return [c for c in slack.calls if c.method == "chat.postMessage"]


async def test_a_private_ask_shows_a_placeholder_then_the_whole_answer_and_sources_to_the_asker_alone(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=4, delay_s=0.01))
    url = await ask(slack, bot, f"private: {QUESTION}")
    assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)))
    [shown] = slack.ephemerals_for(ALICE)
    assert shown.replaced == 1 and shown.channel == CHANNEL
    text = shown_text(shown)
    assert text.startswith(ANSWER)
    assert f"*{wording.sources_title()}*" in text and f"<{BASE}reviewers.md|" in text
    # Two posts through the response_url: the placeholder, then its replacement with the whole answer.
    posts = [p for p in slack.response_url_posts if p.get("response_type") == "ephemeral"]
    assert [bool(p.get("replace_original")) for p in posts] == [False, True]
    assert posts[0]["text"] == sentence(wording.private_thinking())
    assert slack.response_url_uses(url) == 2
    # Nobody else sees anything: nothing in the channel, no ephemeral for anyone else, no message posted at all.
    assert slack.messages(CHANNEL) == [] and slack.ephemerals_for(BOB) == [] and bot_posts(slack) == []
    assert QUESTION in json.dumps(openai_emulator.chat_requests[-1]["messages"])
    assert "private:" not in json.dumps(openai_emulator.chat_requests[-1]["messages"])


async def test_the_dm_form_answers_in_the_askers_dm(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=4, delay_s=0.01))
    await ask(slack, bot, f"dm: {QUESTION}")
    assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in slack.messages(ALICES_DM)))
    question, answer, sources = slack.messages(ALICES_DM)
    assert question.is_bot and QUESTION in question.text and question.thread_ts is None
    assert answer.thread_ts == question.ts and answer.text.startswith(ANSWER)
    assert sources.thread_ts == question.ts and f"<{BASE}reviewers.md|" in sources.text
    assert slack.messages(CHANNEL) == []
    assert [e.text for e in slack.ephemerals_for(ALICE)] == [sentence(wording.answering_in_dm())]


async def test_a_spent_response_url_sends_the_answer_to_the_dm_with_a_sentence(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(ANSWER, chunk_chars=1, delay_s=0.05))  # ~1.5 s: time to spend the URL meanwhile
    url = await ask(slack, bot, f"private: {QUESTION}")
    assert await eventually(lambda: bool(slack.ephemerals_for(ALICE)))
    slack.spend_response_url(url)  # as if four more posts had gone through it
    assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in slack.messages(ALICES_DM)))
    answer, sources = slack.messages(ALICES_DM)
    assert answer.text.startswith(wording.private_answer_moved_to_dm()) and ANSWER in answer.text
    assert sources.thread_ts == answer.ts and f"<{BASE}reviewers.md|" in sources.text
    # The placeholder was the only ephemeral; the refused replacement changed nothing; the channel stays empty.
    [placeholder] = slack.ephemerals_for(ALICE)
    assert placeholder.replaced == 0 and slack.messages(CHANNEL) == []


async def test_a_failed_answer_replaces_the_placeholder_with_a_sentence(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(*[Fault("500")] * 6)
    await ask(slack, bot, f"private: {QUESTION}")
    assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)), limit_s=30)
    [shown] = slack.ephemerals_for(ALICE)
    assert shown_text(shown).startswith("⚠️") and wording.private_thinking() not in shown_text(shown)
    assert slack.messages(CHANNEL) == []


async def test_an_approval_in_a_private_answer_goes_to_the_askers_dm_and_the_answer_continues_there(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    deploys: list[str] = []
    bot = await start_bot(db, slack, openai_emulator.base_url, registry=deploy_registry(deploys))
    try:
        openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": "prod"}), id="call_prod")]), Text("Deployed."))
        await ask(slack, bot, "private: deploy to prod please")
        assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)))
        assert shown_text(slack.ephemerals_for(ALICE)[0]) == wording.private_approval_in_dm()
        [approval] = slack.messages(ALICES_DM)
        approve = next(el for block in approval.blocks if block["type"] == "actions" for el in block["elements"]
                       if el["action_id"] == "relaybot_approve")
        assert slack.messages(CHANNEL) == []
        await slack.deliver_interaction(bot.url, slack.block_actions(
            ALICES_DM, approval.ts, user=ALICE, action_id="relaybot_approve", value=approve["value"]))
        assert await eventually(lambda: any(m.text == "Deployed." for m in slack.messages(ALICES_DM)))
        assert deploys == ["prod"] and slack.messages(CHANNEL) == []
        assert bot_replies(slack, ALICES_DM, approval.ts)[0].ts == approval.ts
    finally:
        await bot.stop()


@pytest.mark.parametrize(("text", "audience", "question"), [
    ("private: why?", "private", "why?"), ("PRIVATE:why?", "private", "why?"), ("--private why?", "private", "why?"),
    ("dm: why?", "dm", "why?"), ("--dm   why?", "dm", "why?"), ("why private: things?", "channel", "why private: things?"),
    ("privately, why?", "channel", "privately, why?"), ("private:", "private", ""),
])
def test_the_ask_prefixes_say_where_the_answer_goes(text: str, audience: str, question: str) -> None:
    assert audience_of(text) == (audience, question)


async def test_private_and_dm_answers_search_what_the_channel_asked_in_may_see_never_more(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    """A source restricted to #finance, also granted to the workspace's DMs: `/ask dm:` from another channel answers in a
    DM but searches as that channel does (the DMs' grant does not widen it); in #finance a private answer finds it."""
    slack = slack_emulator
    secret = "nine hundred zeppelins"
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
        await conn.execute("DELETE FROM channel_config")
    (tmp_path / "finance").mkdir()
    (tmp_path / "finance" / "budget.md").write_text(f"# Zeppelin budget\n\nThe zeppelin budget is {secret}.\n")
    await ingest(db, IngestRequest(source="finance", exposure="prefetch", targets=[str(tmp_path / "finance")]),
                 embedder=None)
    store = ChannelConfigStore(db)
    await store.set_restricted("finance", True, actor="cli:test")
    await store.grant("finance", f"slack:{slack.team_id}:C0000FINAN", actor="cli:test")
    await store.grant("finance", dm_audience("slack", slack.team_id), actor="cli:test")
    bot = await start_bot(db, slack, openai_emulator.base_url, retriever=PgRetriever(db, None))
    try:
        for text in ("private: what is the zeppelin budget?", "dm: what is the zeppelin budget?"):
            openai_emulator.script(Text("I don't know."))
            seen = len(openai_emulator.chat_requests)
            await ask(slack, bot, text)
            assert await eventually(lambda: len(openai_emulator.chat_requests) > seen)
            assert secret not in json.dumps(openai_emulator.chat_requests[-1])
        openai_emulator.script(Text("It is in the budget [1]."))
        payload = slack.slash_command("/ask", "private: what is the zeppelin budget?", user=ALICE, channel="C0000FINAN")
        await slack.deliver_command(bot.url, payload)
        assert await eventually(lambda: any(e.replaced and e.channel == "C0000FINAN" for e in slack.ephemerals_for(ALICE)))
        assert secret in json.dumps(openai_emulator.chat_requests[-1])
    finally:
        await bot.stop()


async def test_where_dms_are_closed_a_private_approval_is_withdrawn_with_a_sentence_and_dm_asks_are_refused(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """DIRECT_MESSAGES=closed: a click in the DM would be refused, so the approval is not posted there (nothing waits
    where nobody may decide it) and the asker is told to ask in the channel; `/ask dm:` says DMs are off."""
    slack = slack_emulator
    deploys: list[str] = []
    bot = await start_bot(db, slack, openai_emulator.base_url, registry=deploy_registry(deploys),
                          direct_messages="closed")
    try:
        openai_emulator.script(ToolCalls([Call("deploy", json.dumps({"env": "prod"}), id="call_prod")]), Text("Deployed."))
        await ask(slack, bot, "private: deploy to prod please")
        assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)))
        assert shown_text(slack.ephemerals_for(ALICE)[0]) == wording.private_approval_dms_refused()
        assert slack.messages(ALICES_DM) == [] and slack.messages(CHANNEL) == [] and deploys == []
        async with db.connection() as conn:
            waiting = await (await conn.execute(
                "SELECT count(*) FROM continuations WHERE status = 'pending'")).fetchone()
        assert waiting is not None and waiting[0] == 0, "withdrawn: nothing waits for a decision"

        asked = len(openai_emulator.chat_requests)
        await ask(slack, bot, f"dm: {QUESTION}", user=BOB)
        assert await eventually(lambda: bool(slack.ephemerals_for(BOB)))
        assert [e.text for e in slack.ephemerals_for(BOB)] == [sentence(wording.direct_messages_off())]
        assert len(openai_emulator.chat_requests) == asked and slack.messages("D0000BOB") == []
    finally:
        await bot.stop()


async def test_a_private_answer_cut_by_a_shutdown_replaces_its_placeholder_with_the_interrupted_sentence(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    stopped = False
    try:
        openai_emulator.script(Text("word " * 2000, chunk_chars=5, delay_s=0.02))  # far longer than the test
        await ask(slack, bot, f"private: {QUESTION}")
        assert await eventually(lambda: bool(slack.ephemerals_for(ALICE)) and len(openai_emulator.chat_requests) == 1)
        await bot.stop()
        stopped = True
        [shown] = slack.ephemerals_for(ALICE)
        assert shown.replaced == 1 and shown_text(shown) == wording.interrupted()
    finally:
        if not stopped:
            await bot.stop()


async def test_a_private_ask_is_answered_where_the_bot_is_not_a_member(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    """A response_url needs no membership: where a plain /ask is told to invite the bot, a private one is answered."""
    slack = slack_emulator
    slack.remove_bot_from(CHANNEL)
    openai_emulator.script(Text(ANSWER))
    await ask(slack, bot, f"private: {QUESTION}")
    assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)))
    assert shown_text(slack.ephemerals_for(ALICE)[0]).startswith(ANSWER)
    assert slack.messages(CHANNEL) == []


async def test_an_empty_private_answer_is_a_sentence_not_an_empty_reply(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    openai_emulator.script(Text(""))
    await ask(slack, bot, f"private: {QUESTION}")
    assert await eventually(lambda: any(e.replaced for e in slack.ephemerals_for(ALICE)))
    assert shown_text(slack.ephemerals_for(ALICE)[0]) == wording.failed(wording.private_answer_failed())
