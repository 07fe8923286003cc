"""Slack assistant threads (the AI-app pane) end to end with real Bolt: suggested prompts, a title from the
first question, "is thinking…" shown at once and gone on every ending, answered once, DMs for every rule, approvals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from adapters import wording
from core.tools import ToolRegistry
from tests.emulators.openai_server import Call, Fault, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator, assistant_thread_started_event
from tests.e2e.slack_harness import ALICE, SlackBot, bot_replies, deploy_registry, dm, eventually, start_bot

pytestmark = pytest.mark.timeout(60)

DM_CHANNEL = "D0000ALICE"


@pytest.fixture
def registry() -> ToolRegistry:
    return deploy_registry()


@pytest.fixture
async def bot(db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, registry) -> AsyncIterator[SlackBot]:  # type: ignore[no-untyped-def]
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry, slack_native_streaming="auto")
    yield started
    await started.stop()


def statuses(slack: SlackEmulator, thread_ts: str) -> list[str]:
    return [s.status for s in slack.statuses if s.thread_ts == thread_ts]


def shown(slack: SlackEmulator, thread_ts: str) -> str | None:
    """The status the thread shows now (Slack takes it away when the app replies there)."""
    record = slack.status_shown(DM_CHANNEL, thread_ts)
    return None if record is None else record.status


def replies_text(slack: SlackEmulator, thread_ts: str) -> list[str]:
    return [m.text for m in bot_replies(slack, DM_CHANNEL, thread_ts) if m.subtype != "assistant_app_thread"]


async def open_thread(slack: SlackEmulator, bot: SlackBot) -> str:
    thread_ts = slack.start_assistant_thread(DM_CHANNEL)
    started = assistant_thread_started_event(user=ALICE, channel=DM_CHANNEL, thread_ts=thread_ts, team_id=slack.team_id)
    assert (await slack.deliver_event(bot.url, started)).status == 200
    return thread_ts


async def test_a_new_thread_gets_suggested_prompts(bot: SlackBot, slack_emulator: SlackEmulator) -> None:
    slack = slack_emulator
    thread_ts = await open_thread(slack, bot)
    assert await eventually(lambda: any(c.method == "assistant.threads.setSuggestedPrompts" for c in slack.assistant_calls))
    [prompts] = [c for c in slack.assistant_calls if c.method == "assistant.threads.setSuggestedPrompts"]
    assert prompts.thread_ts == thread_ts and len(prompts.params["prompts"]) == len(wording.assistant_prompts())


async def test_a_question_is_titled_answered_once_and_its_status_shown_until_the_reply(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread_ts = await open_thread(slack, bot)
    openai_emulator.script(Text("Paris is the capital of France.", chunk_chars=6, delay_s=0.03), Text("About 2.1 million."))
    event = dm(slack, DM_CHANNEL, "what is the capital of France?", thread_ts=thread_ts)
    assert (await slack.deliver_event(bot.url, event)).status == 200
    assert await eventually(lambda: bool(replies_text(slack, thread_ts)) and bot.adapter.inflight_answers == 0)
    assert replies_text(slack, thread_ts) == ["Paris is the capital of France."], "answered once, by the assistant path"
    # Set once, at once; the reply took it away (no call to clear it).
    assert statuses(slack, thread_ts) == [wording.assistant_thinking()] and shown(slack, thread_ts) is None
    [title] = [c for c in slack.assistant_calls if c.method == "assistant.threads.setTitle"]
    assert title.params["title"] == "what is the capital of France?" and title.thread_ts == thread_ts
    [reply] = bot_replies(slack, DM_CHANNEL, thread_ts)[1:]
    assert reply.stream is not None, "an assistant thread streams natively"
    # A follow-up in the same thread: one conversation (it remembers), no second title.
    follow = dm(slack, DM_CHANNEL, "how many people live there?", thread_ts=thread_ts)
    await slack.deliver_event(bot.url, follow)
    assert await eventually(lambda: "About 2.1 million." in replies_text(slack, thread_ts))
    assert len([c for c in slack.assistant_calls if c.method == "assistant.threads.setTitle"]) == 1
    assert "capital of France" in json.dumps(openai_emulator.chat_requests[-1]["messages"])
    assert await eventually(lambda: statuses(slack, thread_ts) == [wording.assistant_thinking()] * 2)
    assert await eventually(lambda: shown(slack, thread_ts) is None)


async def test_the_status_is_cleared_when_the_answer_fails(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread_ts = await open_thread(slack, bot)
    openai_emulator.script(*[Fault("500")] * 6)
    await slack.deliver_event(bot.url, dm(slack, DM_CHANNEL, "will this work?", thread_ts=thread_ts))
    assert await eventually(lambda: bool(replies_text(slack, thread_ts)) and bot.adapter.inflight_answers == 0)
    assert replies_text(slack, thread_ts)[0].startswith("⚠️")
    assert statuses(slack, thread_ts) == [wording.assistant_thinking()]
    assert await eventually(lambda: shown(slack, thread_ts) is None)


async def test_the_status_is_cleared_when_the_answer_is_stopped(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread_ts = await open_thread(slack, bot)
    openai_emulator.script(Text("A long answer that takes its time to arrive. " * 20, chunk_chars=5, delay_s=0.05))
    await slack.deliver_event(bot.url, dm(slack, DM_CHANNEL, "tell me everything", thread_ts=thread_ts))
    assert await eventually(lambda: bool(replies_text(slack, thread_ts)))
    await bot.adapter.interrupt_inflight()
    assert await eventually(lambda: shown(slack, thread_ts) is None)
    assert wording.interrupted() in replies_text(slack, thread_ts)[-1]


async def test_assistant_threads_follow_the_dm_rule(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator  # type: ignore[no-untyped-def]
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, direct_messages="closed")
    try:
        thread_ts = await open_thread(slack, bot)
        await slack.deliver_event(bot.url, dm(slack, DM_CHANNEL, "hello?", thread_ts=thread_ts))
        assert await eventually(lambda: replies_text(slack, thread_ts) == [wording.direct_messages_off()])
        assert shown(slack, thread_ts) is None, "a refusal is told at once, with no status before it"
        assert not openai_emulator.chat_requests
    finally:
        await bot.stop()


async def test_approvals_work_in_an_assistant_thread(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    thread_ts = await open_thread(slack, bot)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}', id="call_prod")], text="Deploying."),
                           Text("Deployed to prod."))
    await slack.deliver_event(bot.url, dm(slack, DM_CHANNEL, "deploy prod", thread_ts=thread_ts))
    def is_approval(message: object) -> bool:
        return "relaybot_approve" in json.dumps(getattr(message, "blocks", None) or [])

    assert await eventually(lambda: any(is_approval(m) for m in bot_replies(slack, DM_CHANNEL, thread_ts)))
    assert await eventually(lambda: shown(slack, thread_ts) is None), "a pause's message takes the status away too"
    [approval] = [m for m in bot_replies(slack, DM_CHANNEL, thread_ts) if is_approval(m)]
    value = next(el["value"] for b in approval.blocks if b["type"] == "actions" for el in b["elements"]
                 if el["action_id"] == "relaybot_approve")
    payload = slack.block_actions(DM_CHANNEL, approval.ts, user=ALICE, action_id="relaybot_approve", value=value)
    assert (await slack.deliver_interaction(bot.url, payload)).status == 200
    assert await eventually(lambda: "Deployed to prod." in replies_text(slack, thread_ts))
    thinking = wording.assistant_thinking()
    assert await eventually(lambda: statuses(slack, thread_ts) == [thinking, thinking]), \
        "the resumed run shows the status while it works"
    assert await eventually(lambda: shown(slack, thread_ts) is None)
