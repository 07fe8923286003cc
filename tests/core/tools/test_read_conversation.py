"""read_conversation: reads only where it was asked, keeps the newest messages within its budget, says why it cannot read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core import wording
from core.requests import ConversationKey, PriorMessage
from core.tokens import get_token_counter
from core.tools import ToolContext, ToolError, ToolServices
from core.tools.context import ConversationUnreadable, ReadScope, UnreadableReason
from core.tools.read_conversation import PlatformReaders, read_conversation_tool, render_messages

HERE = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1700000000.000100")
START = datetime(2025, 3, 4, 23, 58, tzinfo=timezone.utc)


class RecordingReader:
    """A platform's reader as the tool sees it: answers with the given messages, or refuses."""

    def __init__(self, messages: list[PriorMessage], *, refuse: UnreadableReason | None = None) -> None:
        self.messages = messages
        self.refuse = refuse
        self.reads: list[tuple[ConversationKey, ReadScope, int]] = []

    async def read(self, conversation: ConversationKey, *, scope: ReadScope, limit: int) -> list[PriorMessage]:
        self.reads.append((conversation, scope, limit))
        if self.refuse is not None:
            raise ConversationUnreadable(self.refuse)
        return self.messages[-limit:]


def said(n: int, **extra: object) -> PriorMessage:
    return PriorMessage(author=f"person{n % 3}", text=f"message number {n}", at=START + timedelta(minutes=n), **extra)  # type: ignore[arg-type]


def context(reader: RecordingReader | None, *, platform: str = "slack") -> ToolContext:
    readers = None
    if reader is not None:
        readers = PlatformReaders()
        readers.register(platform, reader)
    return ToolContext(user="U1", conversation_id=None, conversation=HERE, services=ToolServices(conversations=readers))


async def test_reads_only_the_conversation_it_was_asked_in_oldest_first() -> None:
    reader = RecordingReader([said(n) for n in range(5)] + [said(5, is_bot=True), said(6, is_bot=True, is_self=True)])
    tool = read_conversation_tool()
    output = await tool.run(context(reader), {"scope": "channel", "limit": 50})
    assert reader.reads == [(HERE, "channel", 50)]
    lines = output.splitlines()
    assert lines[0].startswith("7 messages of this channel, oldest first")
    # A line naming the day whenever it changes; each message "name (time): text".
    assert lines[1:5] == ["[2025-03-04]", "person0 (23:58): message number 0", "person1 (23:59): message number 1", "[2025-03-05]"]
    assert lines[-2:] == ["person2 (bot) (00:03): message number 5", "person0 (you) (00:04): message number 6"]


async def test_keeps_the_newest_that_fit_and_says_how_many_were_left_out() -> None:
    counter = get_token_counter()
    messages = [said(n) for n in range(200)]
    output = render_messages(messages, scope="thread", max_tokens=300, counter=counter)
    assert counter.count(output) <= 300
    lines = output.splitlines()
    kept = int(lines[0].split()[0])
    assert 0 < kept < 200 and f"({200 - kept} earlier messages left out to fit the budget)" in lines[0]
    assert lines[-1].endswith("message number 199") and "message number 0\n" not in output


def test_one_long_message_cannot_take_the_whole_budget() -> None:
    counter = get_token_counter()
    messages = [said(0), PriorMessage(author="logger", text="x " * 5000, at=START), said(1)]
    output = render_messages(messages, scope="thread", max_tokens=400, counter=counter)
    assert counter.count(output) <= 400
    assert "message number 0" in output and "message number 1" in output and "…[truncated]…" in output


async def test_without_the_message_content_intent_it_answers_with_a_sentence() -> None:
    output = await read_conversation_tool().run(context(RecordingReader([], refuse="no_message_content")), {})
    assert output == wording.cannot_read_others_messages()


async def test_empty_failing_and_unserved_conversations() -> None:
    tool = read_conversation_tool()
    assert await tool.run(context(RecordingReader([])), {}) == wording.conversation_empty("thread")
    with pytest.raises(ToolError, match="couldn't read"):
        await tool.run(context(RecordingReader([], refuse="failed")), {})
    # No reader for this platform in this process (e.g. `relaybot chat`), or none at all.
    with pytest.raises(ToolError, match="not available"):
        await tool.run(context(RecordingReader([said(1)]), platform="discord"), {})
    with pytest.raises(ToolError, match="not available"):
        await tool.run(context(None), {})


def test_the_model_can_name_no_place_and_no_approval_is_asked() -> None:
    tool = read_conversation_tool()
    assert set(tool.parameters["properties"]) == {"scope", "limit"}
    assert tool.parameters["additionalProperties"] is False
    assert not tool.requires_approval
