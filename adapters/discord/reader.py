"""Reading a Discord thread or channel for thread context and read_conversation (through the door; 429s waited out).

discord.py pages the history 100 messages a call and waits out 429s itself."""

from __future__ import annotations

from collections.abc import Callable

import discord

from adapters.streaming import RateBudget
from core.requests import ConversationKey, PriorMessage
from core.tools.context import ConversationUnreadable, ReadScope

from . import render
from . import transport_calls as calls


async def history(
    channel: discord.abc.Messageable, *, limit: int, me: discord.abc.User, before: discord.abc.Snowflake | None = None,
    budget: RateBudget | None = None,
) -> list[PriorMessage]:
    """The newest `limit` messages of a channel or thread (those before `before` when given), the ones with
    text, oldest first. Only this bot's own messages are its words; other bots and webhooks are quoted like
    people. Raises what the door raises (adapters/discord/transport_calls.py)."""
    prior: list[PriorMessage] = []
    for earlier in await calls.read_history(channel, limit=limit, before=before, budget=budget):
        text = render.clean_question(earlier.content)
        if text:
            prior.append(PriorMessage(
                author=earlier.author.display_name, text=text, is_bot=earlier.author.bot or earlier.webhook_id is not None,
                is_self=earlier.author.id == me.id, at=earlier.created_at,
            ))
    return prior[::-1]


class DiscordReader:
    """Implements core.tools.context.ConversationReader for Discord.

    Without the message-content intent Discord blanks the text of guild messages that do not mention
    the bot, so a guild conversation is not read at all (the tool says why); DMs are readable either way.
    """

    def __init__(
        self, *, client: Callable[[], discord.Client | None], message_content: bool, budget: RateBudget | None = None
    ) -> None:
        self._client = client
        self._message_content = message_content
        self._budget = budget  # the bot-wide budget: a read of the tool waits behind the answers

    async def read(self, conversation: ConversationKey, *, scope: ReadScope, limit: int) -> list[PriorMessage]:
        # A guild conversation's workspace is the guild's id; a DM's is not a number.
        guild_id = int(conversation.workspace) if conversation.workspace.isdigit() else None
        if guild_id is not None and not self._message_content:
            raise ConversationUnreadable("no_message_content")
        client = self._client()
        me = client.user if client is not None else None
        if client is None or me is None:
            raise ConversationUnreadable("failed")
        # A Discord thread has an id of its own; a question answered in place ("msg-…", "/ask"'s "ask-…")
        # and a DM have only their channel. "channel" in a thread is the channel the thread is in.
        place = conversation.thread if scope == "thread" and conversation.thread.isdigit() else conversation.channel
        try:
            channel = client.get_partial_messageable(int(place), guild_id=guild_id)
            return await history(channel, limit=limit, me=me, budget=self._budget)
        except Exception as error:
            raise ConversationUnreadable("failed") from error
