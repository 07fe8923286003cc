"""read_conversation: the asker's thread (or channel) read through its platform's adapter, cut to a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from core import wording
from core.requests import ConversationKey, PriorMessage, Reach
from core.tokens import TokenCounter, get_token_counter
from core.tools.context import ConversationReader, ConversationUnreadable, ReadScope, ToolContext
from core.tools.registry import ToolError, ToolSpec

NAME = "read_conversation"
# Messages asked of the platform at most (the adapters page for them); the budget then keeps the newest.
READ_MAX_MESSAGES = 200
READ_DEFAULT_MESSAGES = 100
DEFAULT_MAX_TOKENS = 1500
# One long message (a pasted log) may take at most this share of the budget, so it cannot crowd out the rest.
MESSAGE_SHARE_OF_BUDGET = 4
# Slack paging can wait out a 429 or two; the executor's default 20 s would cut it short.
READ_TIMEOUT_S = 60.0
TIME_FORMAT = "%H:%M"  # the day is on a line of its own above


class PlatformReaders:
    """The ConversationReader lent to tools: hands each read to the reader of the conversation's platform.

    Tools get it when the engine is built; adapters, built after the engine, register their readers
    (bot/runtime.py), as the reminder service is given the adapters' notifiers."""

    def __init__(self) -> None:
        self._readers: dict[str, ConversationReader] = {}

    def register(self, platform: str, reader: ConversationReader) -> None:
        self._readers[platform] = reader

    async def read(self, conversation: ConversationKey, *, scope: ReadScope, limit: int) -> list[PriorMessage]:
        reader = self._readers.get(conversation.platform)
        if reader is None:
            raise ConversationUnreadable("not_served")
        return await reader.read(conversation, scope=scope, limit=limit)


def render_messages(
    messages: Sequence[PriorMessage], *, scope: ReadScope, max_tokens: int, counter: TokenCounter
) -> str:
    """`name (time): text` lines, oldest first, under a line naming each day; the newest that fit `max_tokens`
    (with the first line) are kept."""
    if not messages:
        return wording.conversation_empty(scope)
    per_message = max(1, max_tokens // MESSAGE_SHARE_OF_BUDGET)
    # The first line's size depends on the counts; budget it at its longest (every message left out).
    room = max_tokens - counter.count(wording.conversation_read(scope, len(messages), len(messages))) - 1
    kept: list[tuple[date | None, str]] = []  # newest first
    for message in reversed(messages):
        day = message.at.date() if message.at is not None else None
        line = counter.truncate_middle(_line(message), per_message)
        cost = counter.count(line) + 1  # the newline
        if day is not None and (not kept or kept[-1][0] != day):
            cost += counter.count(_day_line(day)) + 1  # this message starts its day's group
        if cost > room:
            break
        kept.append((day, line))
        room -= cost
    lines = [wording.conversation_read(scope, len(kept), len(messages) - len(kept))]
    previous: date | None = None
    for day, line in reversed(kept):
        if day is not None and day != previous:
            lines.append(_day_line(day))
        previous = day or previous
        lines.append(line)
    return "\n".join(lines)


def _day_line(day: date) -> str:
    return f"[{day.isoformat()}]"


def _line(message: PriorMessage) -> str:
    who = f"{message.author} (you)" if message.is_self else f"{message.author} (bot)" if message.is_bot else message.author
    when = f" ({message.at.strftime(TIME_FORMAT)})" if message.at is not None else ""
    # One line per message: the model tells messages apart by the `name (time):` that starts each.
    return f"{who}{when}: {' '.join(message.text.split())}"


def read_conversation_tool(*, max_tokens: int = DEFAULT_MAX_TOKENS, counter: TokenCounter | None = None) -> ToolSpec:
    """The tool, its output cut to `max_tokens` (READ_CONVERSATION_MAX_TOKENS) counted with `counter`."""
    counting = counter or get_token_counter()

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        reader = ctx.services.conversations
        if reader is None:
            raise ToolError(wording.conversation_reading_unavailable())
        scope: ReadScope = "channel" if arguments.get("scope") == "channel" else "thread"
        limit = int(arguments.get("limit") or READ_DEFAULT_MESSAGES)
        try:
            # ctx.conversation is where the question was asked: the model names no place to read.
            messages = await reader.read(ctx.conversation, scope=scope, limit=limit)
        except ConversationUnreadable as unreadable:
            if unreadable.reason == "no_message_content":
                return wording.cannot_read_others_messages()
            if unreadable.reason == "not_served":
                raise ToolError(wording.conversation_reading_unavailable()) from None
            raise ToolError(wording.conversation_not_readable()) from None
        return render_messages(messages, scope=scope, max_tokens=max_tokens, counter=counting)

    return ToolSpec(
        name=NAME,
        description=(
            "Read the messages of the conversation this question was asked in, e.g. to summarise it: this thread "
            "(scope 'thread', the default) or the recent messages of this channel (scope 'channel'). It reads only "
            "where the question was asked, including messages written before you were mentioned."
        ),
        parameters={
            "type": "object",
            "properties": {
                "scope": {"type": "string", "enum": ["thread", "channel"], "description": "This thread, or this channel."},
                "limit": {
                    "type": "integer", "minimum": 1, "maximum": READ_MAX_MESSAGES,
                    "description": f"How many of the newest messages to read (default {READ_DEFAULT_MESSAGES}).",
                },
            },
            "additionalProperties": False,
        },
        run=run,
        # It reads only where the asker already is; it does show the model what others wrote there.
        requires_approval=False,
        timeout_s=READ_TIMEOUT_S,
        needs=frozenset({Reach.READ_BACK}),
        # The token budget cuts first (keeping the newest); this only has to stay out of its way.
        max_output_chars=max(8000, max_tokens * 8),
    )
