"""Guilds joining and leaving: a welcome line in a new guild's system channel where the bot may post, a guild outside
DISCORD_GUILD_IDS left, and a removed guild's pending work dropped, its data kept or purged (UNINSTALL_DATA)."""

from __future__ import annotations

import logging

import discord

from adapters.answers import AnswerRunner
from adapters.gate import EventNotRecorded, Gate
from adapters.streaming import Clock
from core.ports import ForgetTeam

from . import transport_calls as calls
from .install import missing_permissions
from .surface import PLATFORM
from .transport import NO_PINGS, DiscordBudgets, part_nonce
from .transport_guilds import leave_guild

log = logging.getLogger(__name__)


def welcome_line(bot: str) -> str:
    """What the bot says once in a guild's system channel when it is added there."""
    return (f"👋 Hello, I'm {bot}. Mention me with a question, or use `/ask`, and I answer in a thread from the "
            "documents and tools I was given; `/relaybot config` shows a channel's settings.")


class DiscordGuilds:
    """on_guild_join and on_guild_remove for one adapter; `forget` drops a removed guild's work (the adapter's port)."""

    def __init__(
        self, *, gate: Gate, runner: AnswerRunner, budgets: DiscordBudgets, clock: Clock, forget: ForgetTeam, purge: bool,
    ) -> None:
        self._gate = gate
        self._runner = runner
        self._budgets = budgets
        self._clock = clock
        self._purge = purge
        self.forget = forget

    def listen(self, client: discord.Client) -> None:
        # discord.py looks a handler up on the client by name (on_<event>) each time it dispatches the event.
        client.on_guild_join = self.on_join  # type: ignore[attr-defined]
        client.on_guild_remove = self.on_remove  # type: ignore[attr-defined]

    async def on_join(self, guild: discord.Guild) -> None:
        with self._gate.track():
            if not self._gate.allows(str(guild.id)):
                log.warning("added to Discord guild %s (%s), which is not in DISCORD_GUILD_IDS: leaving it", guild.id,
                            guild.name)
                await leave_guild(guild, budget=self._budgets(guild.id), clock=self._clock)
                return
            me = guild.me
            if me is None:  # Discord sends the bot's own member with the guild; without it, nothing can be checked
                log.warning("added to Discord guild %s (%s), but its GUILD_CREATE had no member for the bot", guild.id,
                            guild.name)
                return
            missing = missing_permissions(me.guild_permissions)
            log.info("added to Discord guild %s (%s)%s", guild.id, guild.name,
                     f"; it did not grant the bot {', '.join(missing)}" if missing else "")
            await self._welcome(guild, me)

    async def _welcome(self, guild: discord.Guild, me: discord.Member) -> None:
        """Once per join, whichever process hears it (two may, while a shard changes hands)."""
        channel = guild.system_channel
        if channel is None:
            log.info("Discord guild %s has no system channel: no welcome line", guild.id)
            return
        allowed = channel.permissions_for(me)
        if not (allowed.view_channel and allowed.send_messages):
            log.info("the bot may not post in Discord guild %s's system channel %s: no welcome line", guild.id, channel.id)
            return
        joined = me.joined_at
        key = f"guild-join:{guild.id}:{int(joined.timestamp()) if joined is not None else 0}"
        try:
            if not await self._gate.first_time(key):
                return
        except EventNotRecorded:
            log.warning("could not record the join of Discord guild %s (the database is down): no welcome line", guild.id)
            return
        try:
            await calls.post_message(
                channel, budget=self._budgets(channel.id), clock=self._clock, nonce=part_nonce(key),
                content=welcome_line(me.display_name), allowed_mentions=NO_PINGS,
            )
        except Exception:
            log.exception("could not post the welcome line in Discord guild %s", guild.id)

    async def on_remove(self, guild: discord.Guild) -> None:
        """Removed (kicked, the guild deleted) or left: nothing of it may be delivered any more."""
        with self._gate.track():
            # First: an answer cancelled hands its kept final back to the outbox, which forget then drops.
            stopped = await self._runner.drop_workspace(str(guild.id))
            try:
                await self.forget(PLATFORM, str(guild.id), purge=self._purge)
            except Exception:
                log.exception("removed from Discord guild %s, but its pending work could not be dropped", guild.id)
                return
            log.info("removed from Discord guild %s (%s): %d answer(s) in flight stopped, its pending work dropped and "
                     "its data %s", guild.id, guild.name, stopped,
                     "purged (UNINSTALL_DATA=purge)" if self._purge else "kept (UNINSTALL_DATA=keep)")
