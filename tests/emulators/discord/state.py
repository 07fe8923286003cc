"""The emulator's in-memory world: users, guilds, roles, channels, messages, interactions."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from tests.emulators.discord.models import (
    THREAD_TYPES,
    Channel,
    Guild,
    Interaction,
    JSONDict,
    RequestRecord,
    Role,
    SnowflakeFactory,
    StoredMessage,
    User,
)

ADMINISTRATOR_PERMISSION = 1 << 3
VIEW_CHANNEL_PERMISSION = 1 << 10
SEND_MESSAGES_PERMISSION = 1 << 11
READ_MESSAGE_HISTORY_PERMISSION = 1 << 16
ALL_PERMISSIONS = (1 << 51) - 1
# VIEW_CHANNEL, SEND_MESSAGES, READ_MESSAGE_HISTORY, EMBED_LINKS, ATTACH_FILES, ADD_REACTIONS,
# USE_APPLICATION_COMMANDS, CREATE_PUBLIC_THREADS, SEND_MESSAGES_IN_THREADS: a typical @everyone.
DEFAULT_EVERYONE_PERMISSIONS = (
    (1 << 10) | (1 << 11) | (1 << 16) | (1 << 14) | (1 << 15) | (1 << 6) | (1 << 31) | (1 << 35) | (1 << 38)
)
USER_MENTION_RE = re.compile(r"<@!?(\d+)>")


@dataclass(kw_only=True)
class World:
    """Everything the emulator knows; REST, gateway and test-side API all read and write this."""

    bot_token: str
    bot_name: str
    ids: SnowflakeFactory = field(default_factory=SnowflakeFactory)
    users: dict[int, User] = field(default_factory=dict)
    guilds: dict[int, Guild] = field(default_factory=dict)
    roles: dict[int, Role] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    interactions: dict[int, Interaction] = field(default_factory=dict)
    interactions_by_token: dict[str, Interaction] = field(default_factory=dict)
    global_commands: list[JSONDict] = field(default_factory=list)
    guild_commands: dict[int, list[JSONDict]] = field(default_factory=dict)
    command_ids: dict[tuple[int | None, str], int] = field(default_factory=dict)
    attachments: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    typing_channel_ids: list[int] = field(default_factory=list)
    request_log: list[RequestRecord] = field(default_factory=list)
    dm_channel_by_user: dict[int, int] = field(default_factory=dict)
    # Channels some users may not view (a permission overwrite denying VIEW_CHANNEL); their threads too.
    hidden_channels: dict[int, set[int]] = field(default_factory=dict)
    # Channels the bot itself may not view or read (its role lacks View Channel / Read Message History there):
    # REST reads and posts answer 403 Missing Access, its gateway hears nothing of them, and an interaction
    # there carries app_permissions without those two bits. Interaction responses still work.
    bot_hidden_channels: set[int] = field(default_factory=set)
    # Channels the bot may view but not post in (a member overwrite denying it Send Messages): posts answer 403.
    bot_muted_channels: set[int] = field(default_factory=set)
    # Each guild's system channel, where it has one (Discord's "welcome messages" channel).
    system_channels: dict[int, int] = field(default_factory=dict)
    # Guilds the bot is not in (not added yet, removed, or left): no READY lists them, their channels answer
    # 403 Missing Access and send no events, GET /users/@me/guilds leaves them out.
    guilds_without_bot: set[int] = field(default_factory=set)
    # When the bot was last added to each guild (its member's joined_at), in epoch seconds; 0 if at the start.
    bot_joined_at: dict[int, float] = field(default_factory=dict)
    # GET /gateway/bot's session_start_limit.max_concurrency: how many shards may identify at once (1 but for large
    # bots; the emulator does not enforce it).
    max_concurrency: int = 1
    bot_user_id: int = 0
    # The Message Content intent as the Developer Portal sets it for the application: off, REST and the gateway
    # blank the text of guild messages that neither mention the bot nor are its own, and an IDENTIFY asking for
    # the intent is closed with 4014 (Disallowed intent(s)).
    message_content_portal: bool = True

    def __post_init__(self) -> None:
        self.bot_user_id = self.ids.next()
        self.users[self.bot_user_id] = User(id=self.bot_user_id, name=self.bot_name, bot=True)

    @property
    def application_id(self) -> int:
        # A bot's application id equals its user id on Discord.
        return self.bot_user_id

    def new_token(self) -> str:
        return secrets.token_urlsafe(24)

    def member_role_ids(self, guild_id: int, user_id: int) -> list[int]:
        guild = self.guilds[guild_id]
        return [role_id for role_id in self.users[user_id].role_ids if role_id in guild.role_ids]

    def member_permissions(self, guild_id: int, user_id: int) -> int:
        guild = self.guilds[guild_id]
        if user_id == guild.owner_id:
            return ALL_PERMISSIONS
        permissions = self.roles[guild_id].permissions
        for role_id in self.member_role_ids(guild_id, user_id):
            permissions |= self.roles[role_id].permissions
        return ALL_PERMISSIONS if permissions & ADMINISTRATOR_PERMISSION else permissions

    def channel_permissions(self, guild_id: int, channel_id: int, user_id: int) -> int:
        """The member's permissions in one channel: the guild's, then the channel's overwrites (a thread: its
        parent's) in Discord's order, less VIEW_CHANNEL where a test hid it from them."""
        permissions = self.member_permissions(guild_id, user_id)
        channel = self.channels.get(channel_id)
        hidden = {channel_id} | ({channel.parent_id} if channel is not None and channel.parent_id else set())
        if permissions == ALL_PERMISSIONS:
            return permissions
        if any(user_id in self.hidden_channels.get(c, ()) for c in hidden):
            permissions &= ~VIEW_CHANNEL_PERMISSION
        where = self.channels.get(channel.parent_id) if channel is not None and channel.parent_id else channel
        if where is not None and where.overwrites:
            permissions = self._overwritten(guild_id, where, user_id, permissions)
        # Discord's implicit denial: without View Channel nothing else in the channel counts.
        return permissions if permissions & VIEW_CHANNEL_PERMISSION else 0

    def _overwritten(self, guild_id: int, channel: Channel, user_id: int, permissions: int) -> int:
        by_target = {(int(o.get("type") or 0), int(o["id"])): o for o in channel.overwrites}

        def apply(value: int, overwrite: JSONDict | None) -> int:
            if overwrite is None:
                return value
            return (value & ~int(overwrite.get("deny") or 0)) | int(overwrite.get("allow") or 0)

        permissions = apply(permissions, by_target.get((0, guild_id)))
        allow = deny = 0
        for role_id in self.member_role_ids(guild_id, user_id):
            overwrite = by_target.get((0, role_id))
            if overwrite is not None:
                allow |= int(overwrite.get("allow") or 0)
                deny |= int(overwrite.get("deny") or 0)
        permissions = (permissions & ~deny) | allow
        return apply(permissions, by_target.get((1, user_id)))

    def bot_may_read(self, channel_id: int) -> bool:
        """Whether the bot may view and read a channel (a thread: its parent too)."""
        channel = self.channels.get(channel_id)
        parent = channel.parent_id if channel is not None else None
        if channel is not None and channel.guild_id in self.guilds_without_bot:
            return False
        if channel is not None and channel.guild_id is not None and not (
            self.channel_permissions(channel.guild_id, channel_id, self.bot_user_id) & VIEW_CHANNEL_PERMISSION
        ):
            return False
        return channel_id not in self.bot_hidden_channels and parent not in self.bot_hidden_channels

    def bot_may_read_history(self, channel_id: int) -> bool:
        """Read Message History: without it Discord answers a channel's history with no messages."""
        channel = self.channels.get(channel_id)
        if channel is None or channel.guild_id is None:
            return True
        return bool(self.channel_permissions(channel.guild_id, channel_id, self.bot_user_id) & READ_MESSAGE_HISTORY_PERMISSION)

    def bot_may_send(self, channel_id: int) -> bool:
        """Whether the bot may post in a channel: it may read it, and Send Messages is not denied it there."""
        return self.bot_may_read(channel_id) and channel_id not in self.bot_muted_channels

    def bot_guild_ids(self) -> list[int]:
        """The guilds the bot is in, by id."""
        return sorted(guild_id for guild_id in self.guilds if guild_id not in self.guilds_without_bot)

    def guild_members(self, guild_id: int) -> list[int]:
        # Unless a test names a guild's members, every user is a member of every guild: tests stay short.
        return [user_id for user_id in self.users if self.is_member(guild_id, user_id)]

    def is_member(self, guild_id: int, user_id: int) -> bool:
        guild = self.guilds.get(guild_id)
        user = self.users.get(user_id)
        if guild is None or user is None or user.webhook:
            return False
        if guild.member_ids is None:
            return True
        return user_id in guild.member_ids or user_id in (self.bot_user_id, guild.owner_id)

    def guild_threads(self, guild_id: int) -> list[Channel]:
        """The guild's active threads (what GUILD_CREATE and GET /guilds/{id}/threads/active list)."""
        return [c for c in self.channels.values() if c.guild_id == guild_id and c.type in THREAD_TYPES and not c.archived]

    def channel_messages(self, channel_id: int) -> list[StoredMessage]:
        return [m for m in self.messages.values() if m.channel_id == channel_id and not m.deleted]

    def mentioned_user_ids(self, content: str, allowed_mentions: JSONDict | None) -> list[int]:
        found = [int(raw) for raw in USER_MENTION_RE.findall(content) if int(raw) in self.users]
        if allowed_mentions is None:
            return found
        explicit = {int(user_id) for user_id in allowed_mentions.get("users") or []}
        parse_users = "users" in (allowed_mentions.get("parse") or [])
        return [user_id for user_id in found if parse_users or user_id in explicit]

    @staticmethod
    def pings_everyone(content: str, allowed_mentions: JSONDict | None) -> bool:
        if "@everyone" not in content and "@here" not in content:
            return False
        return allowed_mentions is None or "everyone" in (allowed_mentions.get("parse") or [])
