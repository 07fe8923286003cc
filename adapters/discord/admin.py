"""Discord's `/relaybot config show | set | clear | history | learn`: a channel's settings and whether relaybot learns from it, for Manage Server or CHANNEL_ADMIN_ROLES, answered privately."""

from __future__ import annotations

import logging
from collections.abc import Callable

import discord
from discord import app_commands

from adapters import wording
from adapters.gate import Gate
from core.channel_admin import FIELDS, ChannelAdmin, actor_id, change_lines, parse_value, summary
from core.channels import ChannelSettingsError
from core.learning.model import ChannelPlace, LearnedChannel, LearningRefused
from core.learning.ports import ChannelLearning
from core.requests import ConversationKey

from .inbound import actor_of, guild_of
from .surface import PLATFORM
from . import transport_calls as calls
from .transport import NO_PINGS

log = logging.getLogger(__name__)

# Discord's limits: a message of 2000 characters, an option value of 6000; a setting's value is shown cut.
MESSAGE_MAX_CHARS = 2000
VALUE_SHOWN_MAX_CHARS = 300
VALUE_MAX_CHARS = 4000
HISTORY_SHOWN = 10
WHO_MAY = "members with Manage Server (and the roles and people CHANNEL_ADMIN_ROLES and CHANNEL_ADMINS name)"
FIELD_CHOICES = [app_commands.Choice(name=f.name, value=f.name) for f in FIELDS]
LEARN_ACTIONS = [app_commands.Choice(name=name, value=name) for name in ("status", "on", "off")]
SINCE_CHOICES = [app_commands.Choice(name=f"{days} days", value=days) for days in (30, 90, 365)]


class DiscordAdmin:
    """Each command answers within Discord's 3 s by deferring privately, then checks who asks: Manage Server in
    the interaction's permissions, a role of CHANNEL_ADMIN_ROLES, or a user of CHANNEL_ADMINS."""

    def __init__(
        self, *, admin: ChannelAdmin, gate: Gate, learning: Callable[[], ChannelLearning | None] = lambda: None
    ) -> None:
        self._admin = admin
        self.gate = gate
        self._learning = learning

    async def learn(self, interaction: discord.Interaction, action: str, since_days: int | None) -> None:
        """`learn status | on | off`: whether relaybot learns from this channel's conversations, and how far back."""
        key = await self._admitted(interaction)
        if key is None:
            return
        learning = self._learning()
        if learning is None:
            await _answer(interaction, LEARNING_UNAVAILABLE)
            return
        place = ChannelPlace(platform=PLATFORM, workspace=key.workspace, channel=key.channel)
        try:
            by = actor_id(PLATFORM, key.workspace, str(interaction.user.id))
            await _answer(interaction, await _learn(learning, place, action, since_days, by=by))
        except LearningRefused as refused:
            await _answer(interaction, refused.sentence)
        except Exception:
            log.exception("could not change learning from %s", place.key)
            await _answer(interaction, wording.settings_failed())

    async def show(self, interaction: discord.Interaction) -> None:
        key = await self._admitted(interaction)
        if key is None:
            return
        try:
            view = await self._admin.view(key)
        except Exception:
            log.exception("could not read the settings of %s", key.channel)
            await _answer(interaction, wording.settings_failed())
            return
        lines = [f"**Settings of <#{key.channel}>** (where each value comes from in brackets)"]
        lines += [f"• `{name}`: {_escaped(value)} ({origin})" for name, value, origin in summary(view.config)]
        await _answer(interaction, "\n".join(lines))

    async def set(self, interaction: discord.Interaction, field: str, value: str) -> None:
        key = await self._admitted(interaction)
        if key is None:
            return
        try:
            parsed = parse_value(field, value)
            await self._change(interaction, key, set_fields={field: parsed}, unset=())
        except ChannelSettingsError as error:
            await _answer(interaction, wording.settings_invalid(str(error)))

    async def clear(self, interaction: discord.Interaction, field: str) -> None:
        key = await self._admitted(interaction)
        if key is not None:
            await self._change(interaction, key, set_fields={}, unset=(field,))

    async def history(self, interaction: discord.Interaction) -> None:
        key = await self._admitted(interaction)
        if key is None:
            return
        try:
            entries = await self._admin.history(key, limit=HISTORY_SHOWN)
        except Exception:
            log.exception("could not read the settings history of %s", key.channel)
            await _answer(interaction, wording.settings_failed())
            return
        if not entries:
            await _answer(interaction, wording.settings_no_history())
            return
        await _answer(interaction, "\n".join(
            f"• {discord.utils.format_dt(e.changed_at, 'f')} {_escaped(e.changed_by)}: {_escaped(line)}"
            for e, line in zip(entries, change_lines(entries))
        ))

    async def _change(
        self, interaction: discord.Interaction, key: ConversationKey, *, set_fields: dict[str, object], unset: tuple[str, ...]
    ) -> None:
        actor = actor_id(PLATFORM, key.workspace, str(interaction.user.id))
        try:
            entries = await self._admin.change(key, set_fields=set_fields, unset=unset, actor=actor)
        except ChannelSettingsError as error:
            await _answer(interaction, wording.settings_invalid(str(error)))
            return
        except Exception:
            log.exception("could not save the settings of %s", key.channel)
            await _answer(interaction, wording.settings_failed())
            return
        log.info("%s changed the settings of %s: %s", actor, key.channel, "; ".join(change_lines(entries)) or "nothing")
        await _answer(interaction, wording.settings_saved([_escaped(line) for line in change_lines(entries)]))

    async def _admitted(self, interaction: discord.Interaction) -> ConversationKey | None:
        """The channel whose settings the command is about, once the interaction is deferred and its user may
        change them; None after telling them why not."""
        if not self.gate.accepting:
            await calls.respond(interaction, wording.shutting_down())
            return None
        if interaction.guild_id is None:
            await calls.respond(interaction, wording.settings_in_a_channel())
            return None
        if not self.gate.allows(guild_of(interaction.guild_id)):
            await calls.respond(interaction, wording.not_enabled_here())
            return None
        await calls.acknowledge(interaction, ephemeral=True, thinking=True)
        actor = actor_of(interaction.user, permissions=interaction.permissions)
        if not self._admin.may_change(actor):
            log.info("refused /relaybot config to %s in %s: not an admin", interaction.user.id, interaction.channel_id)
            await _answer(interaction, wording.settings_only_admins(WHO_MAY))
            return None
        channel = interaction.channel
        # A thread (or forum post) uses its parent channel's settings, as its questions do.
        channel_id = channel.parent_id if isinstance(channel, discord.Thread) and channel.parent_id else interaction.channel_id
        return ConversationKey(platform=PLATFORM, workspace=str(interaction.guild_id), channel=str(channel_id))


def command_group(admin: DiscordAdmin) -> app_commands.Group:
    """`/relaybot config …`, added to the client's command tree (synced with /ask)."""
    root = app_commands.Group(name="relaybot", description="relaybot's settings", guild_only=True)
    config = app_commands.Group(name="config", description="This channel's relaybot settings", parent=root)

    @config.command(name="show", description="What this channel runs with, and where each value comes from")
    async def show(interaction: discord.Interaction) -> None:
        with admin.gate.track():
            await admin.show(interaction)

    @config.command(name="set", description="Set one of this channel's settings (lists are comma-separated)")
    @app_commands.describe(field="The setting", value="Its value, e.g. agentic, gpt-4o, true, or a comma-separated list")
    @app_commands.choices(field=FIELD_CHOICES)
    async def set_(interaction: discord.Interaction, field: str,
                   value: app_commands.Range[str, 1, VALUE_MAX_CHARS]) -> None:
        with admin.gate.track():
            await admin.set(interaction, field, value)

    @config.command(name="clear", description="Clear one of this channel's settings (the server's or the default applies)")
    @app_commands.describe(field="The setting")
    @app_commands.choices(field=FIELD_CHOICES)
    async def clear(interaction: discord.Interaction, field: str) -> None:
        with admin.gate.track():
            await admin.clear(interaction, field)

    @config.command(name="history", description="The latest changes to this channel's settings: who, what, when")
    async def history(interaction: discord.Interaction) -> None:
        with admin.gate.track():
            await admin.history(interaction)

    @config.command(name="learn", description="Whether relaybot learns from this channel's conversations, how far back")
    @app_commands.describe(action="status, on (start or change how far back) or off (stop and forget it all)",
                           since="How far back its history is read (on; the default when not given)")
    @app_commands.choices(action=LEARN_ACTIONS, since=SINCE_CHOICES)
    async def learn(interaction: discord.Interaction, action: str, since: int | None = None) -> None:
        with admin.gate.track():
            await admin.learn(interaction, action, since)

    return root


LEARNING_UNAVAILABLE = "Learning from channels is not available in this relaybot (it was not started with it)."


async def _learn(learning: ChannelLearning, place: ChannelPlace, action: str, since_days: int | None, *, by: str) -> str:
    """The sentence for one `learn` action; LearningRefused passes through with its own."""
    current = await learning.get(place)
    if action == "off":
        if not await learning.remove(place, by=by):
            return f"relaybot was not learning from <#{place.channel}>."
        log.info("stopped learning from %s; what was learnt from it is deleted", place.key)
        return f"relaybot no longer learns from <#{place.channel}>, and everything it learnt from it is deleted."
    if action == "on":
        since = since_days if since_days is not None else (current.since_days if current is not None else None)
        keep = current.keep_days if current is not None else None
        learned = await learning.add(place, since_days=since, keep_days=keep, by=by)
        log.info("learning from %s, %d days back", place.key, learned.since_days)
        return f"relaybot learns from <#{place.channel}> from now on, and reads its past {learned.since_days} days: " \
               + learning_state(learned)
    if current is None:
        return f"relaybot does not learn from <#{place.channel}>. `/relaybot config learn action:on` starts it."
    return f"relaybot learns from <#{place.channel}> ({current.since_days} days back): " + learning_state(current)


def learning_state(learned: LearnedChannel) -> str:
    """`backfilling 42% (120 of 285 messages)`, `live`, `error: <the sentence>`."""
    if learned.state == "error":
        return f"error: {learned.error or 'unknown'}"
    if learned.state == "live":
        return f"live ({learned.done} messages read)."
    left = f", about {max(1, round(learned.eta_s / 60))} min left" if learned.eta_s is not None else ""
    if learned.total:
        share = min(100, 100 * learned.done // learned.total)
        return f"reading its history, {share}% ({learned.done} of {learned.total} messages{left})."
    return f"reading its history ({learned.done} messages so far{left})."


def _escaped(text: str) -> str:
    text = text if len(text) <= VALUE_SHOWN_MAX_CHARS else text[: VALUE_SHOWN_MAX_CHARS - 1] + "…"
    return discord.utils.escape_markdown(text)


async def _answer(interaction: discord.Interaction, text: str) -> None:
    """The deferred private response becomes the answer."""
    if len(text) > MESSAGE_MAX_CHARS:
        text = text[: MESSAGE_MAX_CHARS - 1] + "…"
    try:
        await calls.update_original(interaction, content=text, allowed_mentions=NO_PINGS)
    except Exception:
        log.exception("could not answer a /relaybot config")
