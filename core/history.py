"""A conversation's turns: loaded as token-counted chat messages, stored whole when a run ends."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any, Sequence

import psycopg

from core.agents.token_budget import HistoryTurn, complete_tool_rounds
from core.events import SourceItem
from core.requests import PriorMessage
from core.store.conversations import ConversationStore, NewMessage, StoredMessage
from core.tokens import TokenCounter

log = logging.getLogger(__name__)


class TurnHistory:
    """Token counts are cached per stored message with their encoding, and recounted only when that changed."""

    def __init__(self, conversations: ConversationStore, counter: TokenCounter) -> None:
        self._conversations = conversations
        self._counter = counter

    async def load(self, conversation_id: int, *, thread_context: Sequence[PriorMessage] = ()) -> list[HistoryTurn]:
        """Stored turns oldest first; the platform's thread messages when nothing is stored yet."""
        stored = await self._conversations.history(conversation_id)
        if not stored:
            return [
                HistoryTurn(messages=(message,), tokens=self._counter.count_message(message))
                for message in _thread_context_messages(thread_context)
            ]
        recounted: list[tuple[int, int, str]] = []
        turns: list[HistoryTurn] = []
        for turn in _group_turns(stored):
            raw = [_as_chat_message(message) for message in turn]
            tokens = 0
            # Counts are cached per stored row, so pair rows with their own messages before any are dropped.
            for message, row in zip(raw, turn):
                if row.token_count is not None and row.token_encoding == self._counter.encoding_name:
                    tokens += row.token_count
                else:
                    count = self._counter.count_message(message)
                    recounted.append((row.id, count, self._counter.encoding_name))
                    tokens += count
            messages = complete_tool_rounds(raw)
            if len(messages) != len(raw):
                tokens = sum(self._counter.count_message(message) for message in messages)
            turns.append(HistoryTurn(messages=tuple(messages), tokens=tokens))
        await self._conversations.save_token_counts(recounted)
        return turns

    async def store_turn(
        self,
        conversation_id: int,
        turn_id: str,
        turn_messages: Sequence[dict[str, Any]],
        *,
        sources: Sequence[SourceItem],
        author: str,
    ) -> None:
        """Store a finished turn in one transaction; the sources go with its final message."""
        cited = [dataclasses.asdict(item) for item in sources]
        messages = []
        for index, message in enumerate(turn_messages):
            content = content_text(message)
            is_last = index == len(turn_messages) - 1
            messages.append(
                NewMessage(
                    role=message["role"],
                    content=content,
                    tool_calls=message.get("tool_calls"),
                    tool_call_id=message.get("tool_call_id"),
                    sources=cited if is_last and cited else None,
                    author=author if message["role"] == "user" else None,
                    token_count=self._counter.count_message({**message, "content": content}),
                    token_encoding=self._counter.encoding_name,
                )
            )
        await self._conversations.append(conversation_id, uuid.UUID(turn_id), messages)

    async def store_question(self, conversation_id: int, turn_id: str, *, question: str, author: str) -> None:
        """Keep the question of a failed run, so the conversation loses nothing."""
        message = {"role": "user", "content": question}
        try:
            await self._conversations.append(
                conversation_id,
                uuid.UUID(turn_id),
                [
                    NewMessage(
                        role="user",
                        content=question,
                        author=author,
                        token_count=self._counter.count_message(message),
                        token_encoding=self._counter.encoding_name,
                    )
                ],
            )
        except psycopg.Error:
            log.exception("could not store the question of a failed run")


def content_text(message: dict[str, Any]) -> str:
    """The text of a chat message whose content may be a list of parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
    return content or ""


def _group_turns(stored: list[StoredMessage]) -> list[list[StoredMessage]]:
    turns: list[list[StoredMessage]] = []
    for message in stored:
        if turns and turns[-1][0].turn_id == message.turn_id:
            turns[-1].append(message)
        else:
            turns.append([message])
    return turns


def _as_chat_message(message: StoredMessage) -> dict[str, Any]:
    chat: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        chat["tool_calls"] = message.tool_calls
        if not message.content:
            chat["content"] = None
    if message.tool_call_id:
        chat["tool_call_id"] = message.tool_call_id
    return chat


def _thread_context_messages(thread_context: Sequence[PriorMessage]) -> list[dict[str, Any]]:
    # Only the bot's own words speak as the assistant; another bot or a webhook is quoted like a
    # person, so text it planted cannot pass for the bot's.
    return [
        {"role": "assistant", "content": prior.text}
        if prior.is_self
        else {"role": "user", "content": f"{prior.author}{' (bot)' if prior.is_bot else ''}: {prior.text}"}
        for prior in thread_context
    ]
