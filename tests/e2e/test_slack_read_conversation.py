"""read_conversation on Slack end to end: the real SlackAdapter's reader against the Slack and OpenAI emulators."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.store.db import Database
from core.tools import ToolRegistry, builtin_registry
from core.tools.read_conversation import read_conversation_tool
from tests.e2e.slack_harness import ALICE, BOB, CAROL, SlackBot, bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000GENRL"
OTHER_CHANNEL = "C0000OTHER"
PEOPLE = (ALICE, BOB, CAROL)


def registry() -> ToolRegistry:
    tools = builtin_registry()
    tools.register(read_conversation_tool())
    return tools


@pytest.fixture
async def bot(db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator) -> AsyncIterator[SlackBot]:
    started = await start_bot(db, slack_emulator, openai_emulator.base_url, registry=registry())
    yield started
    await started.stop()


def tool_output(request: dict[str, Any]) -> str:
    [message] = [m for m in request["messages"] if m["role"] == "tool"]
    return str(message["content"])


def answered(slack: SlackEmulator, thread_ts: str, text: str) -> bool:
    return any(m.text == text for m in bot_replies(slack, CHANNEL, thread_ts))


def read(**arguments: Any) -> ToolCalls:
    return ToolCalls([Call("read_conversation", json.dumps(arguments))])


async def test_summarise_a_thread_of_60_messages_the_bot_never_saw(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root = slack.add_user_message(CHANNEL, "incident 7: checkout is down", "U0000DAVE")
    seeded = ["incident 7: checkout is down"]
    for n in range(1, 60):
        text = f"update {n:02d} on the checkout fix"
        slack.add_user_message(CHANNEL, text, PEOPLE[n % 3], root)
        seeded.append(text)
    # A 429 first: the read waits out its Retry-After and goes on.
    slack.fail_next("conversations.replies", retry_after_s=1)
    openai_emulator.script(read(scope="thread"), Text("Checkout was fixed in 59 updates."))
    event = mention(slack, CHANNEL, "summarise this thread", thread_ts=root)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: answered(slack, root, "Checkout was fixed in 59 updates."))

    output = tool_output(openai_emulator.chat_requests[-1])
    lines = output.splitlines()
    positions = [next(i for i, line in enumerate(lines) if line.endswith(f": {text}")) for text in seeded]
    assert positions == sorted(positions), "oldest first"
    assert lines[positions[0]].startswith("U0000DAVE (")  # name (time): text
    assert lines[positions[1]].startswith(f"{PEOPLE[1]} (")
    assert "left out" not in lines[0]
    assert slack.count_429 == {"conversations.replies": 1}
    # Every read asked for the thread where the question was asked, and nothing else.
    reads = [c for c in slack.calls if c.method in ("conversations.replies", "conversations.history")]
    assert reads and {(c.params.get("channel"), c.params.get("ts")) for c in reads} == {(CHANNEL, root)}


async def test_a_long_thread_is_paged_through_and_the_newest_kept(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    root = slack.add_user_message(CHANNEL, "release train", "U0000DAVE")
    for n in range(250):
        slack.add_user_message(CHANNEL, f"note {n:03d}", PEOPLE[n % 3], root)
    openai_emulator.script(read(limit=200), Text("A long thread."))
    event = mention(slack, CHANNEL, "what happened here?", thread_ts=root)
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: answered(slack, root, "A long thread."))

    output = tool_output(openai_emulator.chat_requests[-1])
    # The budget keeps the newest that fit, and says how many of the 200 read were left out.
    assert "note 249" in output and "note 000" not in output and "release train" not in output
    assert "earlier messages left out" in output.splitlines()[0]
    replies = [c for c in slack.calls if c.method == "conversations.replies"]
    assert any(c.params.get("cursor") for c in replies), "paged with Slack's cursor"


async def test_channel_scope_reads_the_channel_asked_in_and_no_other(
    bot: SlackBot, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.add_user_message(OTHER_CHANNEL, "the other channel's secret", BOB)
    first = slack.add_user_message(CHANNEL, "standup moved to 10:00", ALICE)
    slack.add_user_message(CHANNEL, "a reply inside a thread", BOB, first)
    slack.add_user_message(CHANNEL, "lunch at noon", CAROL)
    openai_emulator.script(read(scope="channel"), Text("Standup at ten, lunch at noon."))
    event = mention(slack, CHANNEL, "what has this channel been saying?")
    await slack.deliver_event(bot.url, event)
    assert await eventually(lambda: answered(slack, event["ts"], "Standup at ten, lunch at noon."))

    output = tool_output(openai_emulator.chat_requests[-1])
    assert output.index("standup moved to 10:00") < output.index("lunch at noon")
    # Top-level messages only, of this channel only.
    assert "a reply inside a thread" not in output and "secret" not in output
    history = [c for c in slack.calls if c.method == "conversations.history"]
    assert history and {c.params.get("channel") for c in history} == {CHANNEL}
