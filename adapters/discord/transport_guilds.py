"""The door for a guild's own calls: the bot leaving a guild (DELETE /users/@me/guilds/{id}), paced and read by the
shared rule; a guild already left counts as left."""

from __future__ import annotations

import logging

import discord

from adapters.streaming import Clock, Priority, RateBudget
from adapters.streaming.send import send_paced

from .transport_http import guarded

log = logging.getLogger(__name__)

# Tries of one leave (429s and failures alike); a guild still joined after them is logged, and left at its next join.
LEAVE_ATTEMPTS = 3


async def leave_guild(guild: discord.Guild, *, budget: RateBudget, clock: Clock) -> None:
    """Leaves `guild`; Discord then sends GUILD_DELETE (on_guild_remove). Leaving twice is harmless."""
    try:
        await send_paced(lambda: guarded(guild.leave()), budget=budget, clock=clock, priority=Priority.INTERMEDIATE,
                         attempts=LEAVE_ATTEMPTS)
    except discord.NotFound:
        log.info("Discord guild %s was already left", guild.id)
