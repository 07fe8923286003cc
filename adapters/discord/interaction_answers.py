"""Where an interaction's answer streams (/ask, the message commands) and the conversation it belongs to: the response
seen by the channel, or by the asker only (private_answers.py); a refusal in place of the deferred response."""

from __future__ import annotations

import logging

import discord

from adapters import wording
from core import wording as engine_wording
from core.requests import EVERY_REACH, ConversationKey, Reach

from . import transport_calls as calls
from .inbound import DM_WORKSPACE, DiscordAccess, thread_key
from .private_answers import PrivateAnswers
from .surface import PLATFORM, DiscordSurface, DiscordSurfaces
from .transport import NO_PINGS

log = logging.getLogger(__name__)

# What a private answer's run may reach: reading the conversation back, never a later post (a reminder would be
# posted in the channel, for everyone, when it falls due).
PRIVATE_REACHES = frozenset({Reach.READ_BACK})


def reaches(*, private: bool) -> frozenset[Reach]:
    return PRIVATE_REACHES if private else EVERY_REACH


class InteractionAnswers:
    """Where a deferred interaction's answer streams (/ask, the message commands): its response, seen by the channel,
    or (private) by the asker only."""

    def __init__(self, surfaces: DiscordSurfaces, access: DiscordAccess) -> None:
        self._surfaces = surfaces
        self._private = PrivateAnswers(surfaces, access)

    async def surface(
        self, interaction: discord.Interaction, key: ConversationKey, *, private: bool, preface: str | None = None,
    ) -> DiscordSurface | None:
        """None when a private answer cannot be set up: the asker is told so with a sentence, and nothing is answered."""
        if not private:
            return self._surfaces.for_interaction(interaction, workspace=key.workspace, thread=key.thread)
        try:
            return await self._private.surface(interaction, workspace=key.workspace, thread=key.thread, preface=preface)
        except Exception:
            log.exception("could not set up a private answer")
            await refuse(interaction, wording.failed(engine_wording.unexpected_error()))
            return None


def conversation_of(interaction: discord.Interaction, *, one_off: bool) -> ConversationKey:
    """The conversation an interaction's question belongs to. A private one is a one-off (`one_off`): its turns must
    not become the history of the thread that everyone's later answers read. Either keeps the channel (a thread's
    parent) it was asked in, so it sees the sources an answer there would (the channel's scoping, never wider)."""
    channel = interaction.channel
    channel_id = interaction.channel_id or 0
    if interaction.guild_id is None:
        return ConversationKey(platform=PLATFORM, workspace=DM_WORKSPACE, channel=str(channel_id), direct=True)
    if isinstance(channel, discord.Thread):
        key = thread_key(interaction.guild_id, channel)
        if not one_off:
            return key
        return ConversationKey(platform=PLATFORM, workspace=key.workspace, channel=key.channel, thread=f"ask-{interaction.id}")
    # A one-off conversation: /ask in a channel has no thread to continue in.
    return ConversationKey(
        platform=PLATFORM, workspace=str(interaction.guild_id), channel=str(channel_id), thread=f"ask-{interaction.id}",
    )


async def refuse(interaction: discord.Interaction, text: str) -> None:
    """The deferred response becomes the refusal (seen as the response is: by all, or by the asker only), and
    nothing else happens."""
    try:
        await calls.update_original(interaction, content=text, allowed_mentions=NO_PINGS)
    except Exception:
        log.exception("could not refuse an interaction")
