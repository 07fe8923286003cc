"""Builds the JSON objects Discord sends: users, members, roles, channels, guilds, messages."""

from __future__ import annotations

import datetime

from tests.emulators.discord.models import (
    DM_CHANNEL_TYPE,
    PUBLIC_THREAD_TYPE,
    THREAD_TYPES,
    Channel,
    JSONDict,
    StoredMessage,
)
from tests.emulators.discord.state import SEND_MESSAGES_PERMISSION, World

THREAD_AUTO_ARCHIVE_MINUTES = 1440
HAS_THREAD_FLAG = 1 << 5


def iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat()


def user_payload(world: World, user_id: int) -> JSONDict:
    user = world.users[user_id]
    return {
        "id": str(user.id),
        "username": user.name,
        "global_name": user.name,
        "discriminator": "0",
        "avatar": None,
        "bot": user.bot,
        "system": False,
        "public_flags": 0,
        "flags": 0,
        "mfa_enabled": False,
        "verified": True,
    }


def member_payload(world: World, guild_id: int, user_id: int, *, with_user: bool = True) -> JSONDict:
    payload: JSONDict = {
        "roles": [str(role_id) for role_id in world.member_role_ids(guild_id, user_id)],
        "nick": None,
        "avatar": None,
        "banner": None,
        "joined_at": iso(world.bot_joined_at.get(guild_id, 0) if user_id == world.bot_user_id else 0),
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "flags": 0,
        "communication_disabled_until": None,
    }
    if with_user:
        payload["user"] = user_payload(world, user_id)
    return payload


def role_payload(world: World, role_id: int) -> JSONDict:
    role = world.roles[role_id]
    return {
        "id": str(role.id),
        "name": role.name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": role.position,
        "permissions": str(role.permissions),
        "managed": False,
        "mentionable": False,
        "flags": 0,
        "tags": {},
    }


def channel_payload(world: World, channel: Channel) -> JSONDict:
    if channel.type == DM_CHANNEL_TYPE:
        assert channel.recipient_id is not None
        return {
            "id": str(channel.id),
            "type": DM_CHANNEL_TYPE,
            "last_message_id": _str_or_none(channel.last_message_id),
            "recipients": [user_payload(world, channel.recipient_id)],
            "flags": 0,
        }
    payload: JSONDict = {
        "id": str(channel.id),
        "type": channel.type,
        "guild_id": str(channel.guild_id),
        "name": channel.name,
        "position": 0,
        "permission_overwrites": _bot_overwrites(world, channel),
        "topic": None,
        "nsfw": False,
        "last_message_id": _str_or_none(channel.last_message_id),
        "rate_limit_per_user": 0,
        "parent_id": _str_or_none(channel.parent_id),
        "flags": 0,
    }
    if channel.type in THREAD_TYPES:
        # Discord's message_count leaves out the message the thread was started on (which is in the parent).
        count = len(world.channel_messages(channel.id))
        payload.update(
            owner_id=_str_or_none(channel.owner_id),
            message_count=count,
            total_message_sent=count,
            member_count=1,
            thread_metadata={
                "archived": channel.archived,
                "auto_archive_duration": THREAD_AUTO_ARCHIVE_MINUTES,
                "archive_timestamp": iso(channel.archive_timestamp),
                "locked": False,
                "create_timestamp": iso(channel.created_at),
            },
        )
    return payload


def _bot_overwrites(world: World, channel: Channel) -> list[JSONDict]:
    """The channel's overwrites, and a member overwrite denying the bot Send Messages where it is muted (what
    permissions_for reads). A thread has none: its parent's count."""
    overwrites = [dict(o) for o in channel.overwrites]
    if channel.id in world.bot_muted_channels:
        overwrites.append({"id": str(world.bot_user_id), "type": 1, "allow": "0", "deny": str(SEND_MESSAGES_PERMISSION)})
    return overwrites


def blanked_for_bot(world: World, message: StoredMessage, payload: JSONDict, *, intent: bool) -> JSONDict:
    """Without the Message Content intent Discord blanks a guild message's text, embeds, attachments and components,
    unless it mentions the bot or is the bot's own (REST and the gateway alike)."""
    if intent or message.guild_id is None or message.author_id == world.bot_user_id:
        return payload
    if world.bot_user_id in message.mention_user_ids:
        return payload
    return {**payload, "content": "", "embeds": [], "attachments": [], "components": []}


def guild_create_payload(world: World, guild_id: int) -> JSONDict:
    guild = world.guilds[guild_id]
    member_ids = world.guild_members(guild_id)
    return {
        "id": str(guild.id),
        "name": guild.name,
        "icon": None,
        "splash": None,
        "discovery_splash": None,
        "banner": None,
        "description": None,
        "owner_id": str(guild.owner_id),
        "afk_channel_id": None,
        "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_progress_bar_enabled": False,
        "preferred_locale": "en-US",
        "features": [],
        "system_channel_id": _str_or_none(world.system_channels.get(guild_id)),
        "system_channel_flags": 0,
        "rules_channel_id": None,
        "public_updates_channel_id": None,
        "safety_alerts_channel_id": None,
        "vanity_url_code": None,
        "application_id": None,
        "max_members": 500_000,
        "max_video_channel_users": 25,
        "roles": [role_payload(world, role_id) for role_id in guild.role_ids],
        "emojis": [],
        "stickers": [],
        "soundboard_sounds": [],
        "joined_at": iso(0),
        "large": False,
        "unavailable": False,
        "lazy": True,
        # member_count equal to the members sent: discord.py then counts the guild as chunked.
        "member_count": len(member_ids),
        "members": [member_payload(world, guild_id, user_id) for user_id in member_ids],
        "channels": [channel_payload(world, world.channels[channel_id]) for channel_id in guild.channel_ids],
        "threads": [channel_payload(world, thread) for thread in world.guild_threads(guild_id)],
        "presences": [],
        "voice_states": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
    }


def message_payload(world: World, message: StoredMessage, *, for_gateway: bool = False) -> JSONDict:
    current = message.versions[-1]
    edited = message.versions[-1].at if message.edit_count else None
    payload: JSONDict = {
        "id": str(message.id),
        "channel_id": str(message.channel_id),
        "author": user_payload(world, message.author_id),
        "content": current.content,
        "timestamp": iso(message.versions[0].at),
        "edited_timestamp": iso(edited) if edited is not None else None,
        "tts": False,
        "mention_everyone": message.mention_everyone,
        "mentions": [_mention_payload(world, message.guild_id, user_id) for user_id in message.mention_user_ids],
        "mention_roles": [],
        "attachments": list(message.attachments),
        "embeds": list(current.embeds),
        "components": list(current.components),
        "pinned": False,
        "type": 19 if message.message_reference else (20 if message.interaction_id else 0),
        "flags": current.flags | (HAS_THREAD_FLAG if _started_thread(world, message) else 0),
    }
    if message.guild_id is not None:
        payload["guild_id"] = str(message.guild_id)
        if for_gateway and world.is_member(message.guild_id, message.author_id):
            payload["member"] = member_payload(world, message.guild_id, message.author_id, with_user=False)
    if message.webhook_id is not None:
        payload["webhook_id"] = str(message.webhook_id)
        if message.webhook_id == world.application_id:
            # An interaction's response: posted through the application's own webhook.
            payload["application_id"] = str(message.webhook_id)
    if message.message_reference:
        payload["message_reference"] = message.message_reference
        referenced = world.messages.get(int(message.message_reference.get("message_id") or 0))
        payload["referenced_message"] = message_payload(world, referenced) if referenced else None
    thread = world.channels.get(message.id)
    if thread is not None and thread.type in THREAD_TYPES:
        # A message that started a thread carries the thread (Discord's `thread` field), its message_count with it.
        payload["thread"] = channel_payload(world, thread)
    if message.interaction_id is not None:
        interaction = world.interactions[message.interaction_id]
        payload["interaction_metadata"] = {
            "id": str(interaction.id),
            "type": interaction.type,
            "user": user_payload(world, interaction.user_id),
            "authorizing_integration_owners": {},
        }
    return payload


def _started_thread(world: World, message: StoredMessage) -> bool:
    # A thread started on a message has the message's id; Discord flags the message HAS_THREAD.
    thread = world.channels.get(message.id)
    return thread is not None and thread.type == PUBLIC_THREAD_TYPE


def _mention_payload(world: World, guild_id: int | None, user_id: int) -> JSONDict:
    payload = user_payload(world, user_id)
    if guild_id is not None:
        payload["member"] = member_payload(world, guild_id, user_id, with_user=False)
    return payload


def _str_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)
