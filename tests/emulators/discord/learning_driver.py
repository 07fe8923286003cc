"""What tests do to the emulator's world for learning from channels: back-dated history, edits, deletes (one, in bulk, a thread, a channel), renames, permission overwrites, threads started without a message, archived and private threads, members' roles, and the Portal's Message Content intent — each dispatched to the gateway as Discord does."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tests.emulators.discord.core import EmulatorCore
from tests.emulators.discord.gateway import INTENT_GUILD_MEMBERS, INTENT_GUILDS, GatewaySession
from tests.emulators.discord.models import (PRIVATE_THREAD_TYPE, PUBLIC_THREAD_TYPE, Channel, JSONDict, MessageVersion,
                                            StoredMessage, UploadedFile)
from tests.emulators.discord.payloads import channel_payload, member_payload, role_payload
from tests.emulators.discord.rest_channels import store_attachment


class LearningDriver(EmulatorCore):
    """The test-side API of learning's parts of Discord (DiscordEmulator inherits it)."""

    base_url: str  # DiscordEmulator's

    def set_message_content_intent(self, enabled: bool) -> None:
        """The Developer Portal's Message Content toggle: off, guild text not mentioning the bot reads blank over
        REST and the gateway, and asking for the intent at IDENTIFY is refused (4014)."""
        self.world.message_content_portal = enabled

    def post_at(
        self, channel_id: int, author_id: int, content: str, *, at: float, files: Sequence[UploadedFile] = (),
    ) -> int:
        """A message written in the past (no event: it happened before the bot heard anything)."""
        channel = self.world.channels[channel_id]
        stored = [store_attachment(self, f.filename, f.data, f.content_type, self.base_url) for f in files]
        message = StoredMessage(
            id=self.world.ids.at(at), channel_id=channel_id, guild_id=channel.guild_id, author_id=author_id,
            versions=[MessageVersion(content=content, embeds=(), components=(), flags=0, at=at)], attachments=stored,
            mention_user_ids=self.world.mentioned_user_ids(content, None),
        )
        self.world.messages[message.id] = message
        channel.last_message_id = max(channel.last_message_id or 0, message.id)
        return message.id

    def thread_at(self, message_id: int, name: str, *, by: int, at: float, archived_at: float | None = None) -> int:
        """A public thread started on a past message (no event), archived at `archived_at` when given."""
        message = self.world.messages[message_id]
        return self._thread(message.id, message.channel_id, name, by=by, kind=PUBLIC_THREAD_TYPE, at=at,
                            archived_at=archived_at)

    def thread_without_message_at(
        self, channel_id: int, name: str, *, by: int, at: float, private: bool = False, archived_at: float | None = None,
    ) -> int:
        """A thread started from the channel's "+" (no starter message): its own id; private when told."""
        return self._thread(self.world.ids.at(at), channel_id, name, by=by,
                            kind=PRIVATE_THREAD_TYPE if private else PUBLIC_THREAD_TYPE, at=at, archived_at=archived_at)

    def _thread(self, thread_id: int, parent_id: int, name: str, *, by: int, kind: int, at: float,
                archived_at: float | None) -> int:
        parent = self.world.channels[parent_id]
        self.world.channels[thread_id] = Channel(
            id=thread_id, type=kind, name=name, guild_id=parent.guild_id, parent_id=parent_id, owner_id=by,
            archived=archived_at is not None, archive_timestamp=archived_at or at, created_at=at,
        )
        return thread_id

    async def edit_user_message(self, message_id: int, content: str) -> None:
        """Its author edits it: MESSAGE_UPDATE."""
        await self.edit_message(self.world.messages[message_id], {"content": content})

    async def delete_user_message(self, message_id: int) -> None:
        """Deleted by its author or a moderator: MESSAGE_DELETE."""
        message = self.world.messages[message_id]
        message.deleted = True
        if self.world.bot_may_read(message.channel_id):
            await self.hub.dispatch("MESSAGE_DELETE", lambda _s: _ids(message.channel_id, message.guild_id,
                                                                        id=str(message.id)))

    async def bulk_delete(self, channel_id: int, message_ids: Sequence[int]) -> None:
        """A moderator's bulk delete: MESSAGE_DELETE_BULK."""
        for message_id in message_ids:
            self.world.messages[message_id].deleted = True
        guild_id = self.world.channels[channel_id].guild_id
        await self.hub.dispatch("MESSAGE_DELETE_BULK", lambda _s: _ids(channel_id, guild_id,
                                                                         ids=[str(m) for m in message_ids]))

    async def rename_channel(self, channel_id: int, name: str) -> None:
        self.world.channels[channel_id].name = name
        await self._channel_event(channel_id, "CHANNEL_UPDATE")

    async def set_overwrite(self, channel_id: int, target_id: int, *, allow: int = 0, deny: int = 0,
                            member: bool = False) -> None:
        """A permission overwrite for a role (the guild's id: @everyone) or a member: CHANNEL_UPDATE."""
        channel = self.world.channels[channel_id]
        kind = 1 if member else 0
        channel.overwrites = [o for o in channel.overwrites if (int(o["type"]), int(o["id"])) != (kind, target_id)]
        channel.overwrites.append({"id": str(target_id), "type": kind, "allow": str(allow), "deny": str(deny)})
        await self._channel_event(channel_id, "CHANNEL_UPDATE")

    async def delete_channel(self, channel_id: int) -> None:
        channel = self.world.channels[channel_id]
        await self._channel_event(channel_id, "CHANNEL_DELETE")
        guild = self.world.guilds.get(channel.guild_id or 0)
        if guild is not None and channel_id in guild.channel_ids:
            guild.channel_ids.remove(channel_id)
        del self.world.channels[channel_id]

    async def archive_thread(self, thread_id: int, *, at: float | None = None) -> None:
        thread = self.world.channels[thread_id]
        thread.archived, thread.archive_timestamp = True, at if at is not None else time.time()
        await self._channel_event(thread_id, "THREAD_UPDATE")

    async def delete_thread(self, thread_id: int) -> None:
        """THREAD_DELETE (id, guild_id, parent_id, type), as Discord sends it."""
        thread = self.world.channels.pop(thread_id)
        for message in self.world.channel_messages(thread_id):
            message.deleted = True
        payload = {"id": str(thread.id), "guild_id": str(thread.guild_id), "parent_id": str(thread.parent_id),
                   "type": thread.type}
        await self.hub.dispatch("THREAD_DELETE", lambda s: payload if s.has_intent(INTENT_GUILDS) else None)

    async def set_member_roles(self, guild_id: int, user_id: int, role_ids: Sequence[int]) -> None:
        """A member's roles changed: GUILD_MEMBER_UPDATE, only to sessions with the (privileged) Server Members intent
        — but the bot's own, which Discord sends it regardless of intents."""
        user = self.world.users[user_id]
        user.role_ids = [r for r in user.role_ids if r not in self.world.guilds[guild_id].role_ids] + list(role_ids)
        payload = {**member_payload(self.world, guild_id, user_id), "guild_id": str(guild_id)}
        own = user_id == self.world.bot_user_id
        await self.hub.dispatch("GUILD_MEMBER_UPDATE",
                                lambda s: payload if own or s.has_intent(INTENT_GUILD_MEMBERS) else None)

    async def set_role_permissions(self, role_id: int, permissions: int) -> None:
        """A role's permissions changed (the guild's id: @everyone's): GUILD_ROLE_UPDATE."""
        role = self.world.roles[role_id]
        role.permissions = permissions
        payload = {"guild_id": str(role.guild_id), "role": role_payload(self.world, role_id)}
        await self.hub.dispatch("GUILD_ROLE_UPDATE", lambda s: payload if s.has_intent(INTENT_GUILDS) else None)

    async def _channel_event(self, channel_id: int, event: str) -> None:
        payload = channel_payload(self.world, self.world.channels[channel_id])

        def for_session(session: GatewaySession) -> JSONDict | None:
            return payload if session.has_intent(INTENT_GUILDS) else None

        await self.hub.dispatch(event, for_session)


def _ids(channel_id: int, guild_id: int | None, **fields: object) -> JSONDict:
    payload: JSONDict = {"channel_id": str(channel_id), **fields}
    if guild_id is not None:
        payload["guild_id"] = str(guild_id)
    return payload
