"""What people do to channels and messages, done to the store and returned as the events Slack sends for it.

Edits and deletes (message_changed with `message` and `previous_message`, message_deleted with `deleted_ts`),
renames, archives and deletions, people and the bot joining and leaving, sharing (Slack Connect) and a channel made
private — each payload as Slack's Events API documents it (docs.slack.dev/reference/events)."""

from __future__ import annotations

import time
from typing import Any

from .conversations import Conversations
from .directory import Directory
from .state import Edit, JsonDict, Team
from .store import SlackStore

Events = list[JsonDict]


def _event_ts() -> str:
    return f"{time.time():.6f}"


class ChannelChanges:
    """Each method changes the store as the person's action would and returns the events Slack sends the app for it,
    in order (deliver them with deliver_event_until_taken or push_socket_event)."""

    def __init__(self, store: SlackStore, directory: Directory, conversations: Conversations) -> None:
        self._store = store
        self._directory = directory
        self._conversations = conversations

    def _channel_type(self, channel: str) -> str:
        if channel.startswith("D"):
            return "im"
        if channel in self._conversations.membership.mpims:
            return "mpim"
        return "group" if self._conversations.private(channel) else "channel"

    def _listed(self, team: Team, channel: str, ts: str) -> JsonDict:
        found = self._store.channels[channel]
        record = found.messages[ts]
        out = record.to_api(reply_count=self._store.reply_count(found, record), latest_reply=self._store.latest_reply(found, record))
        if record.thread_ts not in (None, record.ts):
            root = found.messages.get(str(record.thread_ts))
            out["parent_user_id"] = (root.user or root.bot_id) if root is not None else None
        return out

    def edit_message(self, team: Team, channel: str, ts: str, text: str) -> Events:
        """The author edits the message: message_changed, `message` as edited, `previous_message` as it was."""
        record = self._store.channels[channel].messages[ts]
        before = self._listed(team, channel, ts)
        edited_ts = self._store.clock.next()
        record.text = text
        record.edits.append(Edit(text=text, blocks=record.blocks, edited_ts=edited_ts, at_s=time.monotonic()))
        after = self._listed(team, channel, ts)
        return [{"type": "message", "subtype": "message_changed", "hidden": True, "channel": channel,
                 "channel_type": self._channel_type(channel), "ts": edited_ts, "event_ts": edited_ts,
                 "message": after, "previous_message": before}]

    def delete_message(self, team: Team, channel: str, ts: str) -> Events:
        """The author deletes the message: message_deleted naming it by `deleted_ts`."""
        record = self._store.channels[channel].messages[ts]
        before = self._listed(team, channel, ts)
        record.deleted = True
        now = self._store.clock.next()
        event: JsonDict = {"type": "message", "subtype": "message_deleted", "hidden": True, "channel": channel,
                           "channel_type": self._channel_type(channel), "ts": now, "event_ts": now, "deleted_ts": ts,
                           "previous_message": before}
        if record.thread_ts is not None:
            event["thread_ts"] = record.thread_ts
        return [event]

    def rename(self, team: Team, channel: str, name: str) -> Events:
        self._directory.names[channel] = name
        private = self._conversations.private(channel)
        body: JsonDict = {"id": channel, "name": name, "name_normalized": name, "created": int(time.time()),
                          "is_channel": not private, "is_mpim": False}
        if private:
            body["is_group"] = True
        return [{"type": "group_rename" if private else "channel_rename", "channel": body, "event_ts": _event_ts()}]

    def archive(self, team: Team, channel: str, *, by: str) -> Events:
        self._directory.archived.add(channel)
        kind = "group_archive" if self._conversations.private(channel) else "channel_archive"
        return [{"type": kind, "channel": channel, "user": by, "event_ts": _event_ts()}]

    def delete_channel(self, team: Team, channel: str) -> Events:
        kind = "group_deleted" if self._conversations.private(channel) else "channel_deleted"
        self._store.bot_not_member.add(channel)
        return [{"type": kind, "channel": channel, "event_ts": _event_ts()}]

    def join(self, team: Team, channel: str, user: str, *, inviter: str | None = None) -> Events:
        """`user` joins (or is invited): member_joined_channel. The bot joining is `user` = the bot's user id."""
        if user == team.bot_user_id:
            self._store.bot_not_member.discard(channel)
        else:
            self._people(channel).add(user)
        event: JsonDict = {"type": "member_joined_channel", "user": user, "channel": channel,
                           "channel_type": "G" if self._conversations.private(channel) else "C", "team": team.team_id,
                           "event_ts": _event_ts()}
        if inviter:
            event["inviter"] = inviter
        return [event]

    def leave(self, team: Team, channel: str, user: str, *, by: str | None = None) -> Events:
        """`user` leaves (or is removed by `by`): member_left_channel; for the bot, also channel_left / group_left,
        which Slack sends the app whose bot was removed."""
        private = self._conversations.private(channel)
        left: JsonDict = {"type": "member_left_channel", "user": user, "channel": channel,
                          "channel_type": "G" if private else "C", "team": team.team_id, "event_ts": _event_ts()}
        if user != team.bot_user_id:
            self._people(channel).discard(user)
            return [left]
        self._store.bot_not_member.add(channel)
        own: dict[str, Any] = {"type": "group_left" if private else "channel_left", "channel": channel,
                               "actor_id": by or user, "event_ts": _event_ts()}
        return [left, own]

    def share(self, team: Team, channel: str, *, with_team: str, external: bool = True) -> Events:
        """Shared with another organisation (Slack Connect, is_ext_shared) or another workspace of the org."""
        self._store.channel(channel, team_id=team.team_id, create=True)
        (self._conversations.membership.ext_shared if external else self._conversations.membership.org_shared).add(channel)
        return [{"type": "channel_shared", "connected_team_id": with_team, "channel": channel, "event_ts": _event_ts()}]

    def unshare(self, team: Team, channel: str, *, from_team: str) -> Events:
        self._conversations.membership.ext_shared.discard(channel)
        self._conversations.membership.org_shared.discard(channel)
        return [{"type": "channel_unshared", "previously_connected_team_id": from_team, "channel": channel,
                 "is_ext_shared": False, "event_ts": _event_ts()}]

    def make_private(self, team: Team, channel: str, *, by: str) -> Events:
        """A public channel made private: its people become its private members; Slack posts the
        channel_convert_to_private message (a message event with that subtype, channel_type "group")."""
        found = self._store.channel(channel, team_id=team.team_id, create=True)
        if found is None:
            raise ValueError(f"channel {channel!r} does not belong to team {team.team_id}")
        self._store.private_members[channel] = self._people(channel)
        text = "made this channel *private*. Now, it can only be viewed or joined by invitation."
        record = self._store.post(found, text=text, blocks=None, thread_ts=None, user=by, bot_id=None)
        record.subtype = "channel_convert_to_private"
        return [{"type": "message", "subtype": "channel_convert_to_private", "user": by, "text": text, "ts": record.ts,
                 "channel": channel, "event_ts": record.ts, "channel_type": "group"}]

    def _people(self, channel: str) -> set[str]:
        if channel in self._store.private_members:
            return self._store.private_members[channel]
        return self._conversations.membership.members.setdefault(channel, set())
