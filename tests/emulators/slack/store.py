"""The emulator's in-memory workspaces: teams, users, channels and their messages in ts order."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from .state import (
    AssistantRecord,
    CallRecord,
    EphemeralRecord,
    FileRecord,
    Grant,
    JsonDict,
    MessageRecord,
    StatusRecord,
    Team,
    TsClock,
    User,
    ViewRecord,
    new_id,
)

# Conversation ids Slack hands out: C (public), G (private/mpim), D (direct message).
CHANNEL_ID_RE = re.compile(r"^[CDG][A-Z0-9]{2,}$")


@dataclass(kw_only=True)
class Channel:
    channel_id: str
    team_id: str
    messages: dict[str, MessageRecord] = field(default_factory=dict)  # insertion = ts order
    # Each thread's replies' ts by its root's, in ts order: history and replies read threads without a scan.
    replies: dict[str, list[str]] = field(default_factory=dict)

    def insert(self, record: MessageRecord) -> None:
        """Kept in ts order: a back-dated message (a test's history) goes where its ts puts it."""
        newest = next(reversed(self.messages), None) if self.messages else None
        self.messages[record.ts] = record
        if newest is not None and float(newest) > float(record.ts):
            self.messages = dict(sorted(self.messages.items(), key=lambda item: float(item[0])))
        if record.thread_ts is not None and record.thread_ts != record.ts:
            thread = self.replies.setdefault(record.thread_ts, [])
            thread.append(record.ts)
            if len(thread) > 1 and float(thread[-2]) > float(record.ts):
                thread.sort(key=float)


class SlackStore:
    """State shared by the Web API handlers and the test-facing recording API."""

    def __init__(self, *, strict_channels: bool) -> None:
        self.strict_channels = strict_channels
        self.clock = TsClock()
        self.teams: dict[str, Team] = {}
        # Every bot token Slack would accept, and whom it speaks for (a team's own, or an org-wide install's).
        self.grants: dict[str, Grant] = {}
        self.users: dict[str, User] = {}
        self.channels: dict[str, Channel] = {}
        self.ephemerals: list[EphemeralRecord] = []
        self.statuses: list[StatusRecord] = []
        # The status each thread shows now, by (channel, thread root): set by setStatus, gone with "" or the
        # bot's reply in that thread (as Slack clears it when the app answers).
        self.shown_status: dict[tuple[str, str], StatusRecord] = {}
        # An error setStatus / reactions.* answer for every call (e.g. "missing_scope"), as without the scope.
        self.refusals: dict[str, str] = {}
        self.files: dict[str, FileRecord] = {}
        self.calls: list[CallRecord] = []
        self.count_429: dict[str, int] = {}
        self.views: list[ViewRecord] = []
        self.assistant_calls: list[AssistantRecord] = []
        # Channels the bot is not a member of: posting there is refused with not_in_channel.
        self.bot_not_member: set[str] = set()
        # Private channels' members (a channel listed here is private), and each DM's person.
        self.private_members: dict[str, set[str]] = {}
        self.dm_users: dict[str, str] = {}

    # --- identities ---
    def add_team(self, *, team_id: str, name: str, app_id: str, enterprise_id: str | None = None) -> Team:
        suffix = team_id[-6:].lower()
        team = Team(
            team_id=team_id,
            name=name,
            domain=name.lower().replace(" ", "-"),
            bot_token=f"xoxb-{suffix}-emulator-bot-token",
            bot_user_id=f"UB{team_id[1:]}",
            bot_id=f"B{team_id[1:]}",
            app_id=app_id,
            enterprise_id=enterprise_id,
        )
        self.teams[team_id] = team
        self.grants[team.bot_token] = Grant(team_id=team_id, enterprise_id=enterprise_id)
        self.users[team.bot_user_id] = User(
            user_id=team.bot_user_id, team_id=team_id, name="relaybot", real_name="Relaybot", is_bot=True
        )
        return team

    def grant_token(self, token: str, *, team_id: str | None, enterprise_id: str | None = None) -> None:
        """`token` becomes a bot token for `team_id` (an install's), or with team_id None for every workspace of
        `enterprise_id` (an org-wide install's); the OAuth exchange (oauth.py) registers what it issues here."""
        if team_id is None and enterprise_id is None:
            raise ValueError("a token speaks for a team or an enterprise")
        self.grants[token] = Grant(team_id=team_id, enterprise_id=enterprise_id)

    def revoke_token(self, token: str) -> None:
        """Slack refuses `token` from now on (auth.revoke, an uninstall, a rotated-out token)."""
        self.grants.pop(token, None)

    def team_by_bot_token(self, token: str, params: JsonDict | None = None) -> Team | None:
        """The workspace a call with `token` acts in: the token's own team, or for an org-wide token the org's
        workspace that holds the call's channel (else the one its `team_id` names, else the org's first)."""
        grant = self.grants.get(token)
        if grant is None:
            return None
        if grant.team_id is not None:
            return self.teams.get(grant.team_id)
        in_org = [t for t in self.teams.values() if t.enterprise_id == grant.enterprise_id]
        params = params or {}
        channel = self.channels.get(str(params.get("channel") or params.get("channel_id") or ""))
        named = channel.team_id if channel is not None else str(params.get("team_id") or "")
        return next((t for t in in_org if t.team_id == named), in_org[0] if in_org else None)

    def speaks_for(self, token: str, team_id: str) -> bool:
        """`token` may act in `team_id` (its own token, or its org's org-wide one): files.slack.com asks this."""
        grant = self.grants.get(token)
        team = self.teams.get(team_id)
        if grant is None or team is None:
            return False
        if grant.team_id is not None:
            return grant.team_id == team_id
        return team.enterprise_id is not None and team.enterprise_id == grant.enterprise_id

    def sees(self, team: Team, user: User) -> bool:
        """Whether `team`'s bot may look `user` up: a person of its own workspace or org, or of a team this emulator
        does not model (a Slack Connect guest's); another modelled workspace's people are not found."""
        other = self.teams.get(user.team_id)
        return (other is None or other.team_id == team.team_id
                or (team.enterprise_id is not None and other.enterprise_id == team.enterprise_id))

    def add_user(self, *, user_id: str, team_id: str, name: str | None, real_name: str | None) -> User:
        user = User(
            user_id=user_id,
            team_id=team_id,
            name=name or user_id.lower(),
            real_name=real_name or (name or user_id.lower()).title(),
        )
        self.users[user_id] = user
        return user

    # --- channels and messages ---
    def channel(self, channel_id: str, *, team_id: str, create: bool) -> Channel | None:
        """The team's channel; unknown well-formed ids are created unless strict_channels."""
        existing = self.channels.get(channel_id)
        if existing is not None:
            return existing if existing.team_id == team_id else None
        if not create or self.strict_channels or not CHANNEL_ID_RE.match(channel_id):
            return None
        made = self.channels[channel_id] = Channel(channel_id=channel_id, team_id=team_id)
        return made

    def post(
        self, channel: Channel, *, text: str, blocks: list[JsonDict] | None, thread_ts: str | None,
        user: str | None, bot_id: str | None, files: list[JsonDict] | None = None, at: float | None = None,
    ) -> MessageRecord:
        """`at` (epoch seconds): a message of the past, as a test's channel history needs (a unique ts near it)."""
        ts = self.clock.next() if at is None else self._past_ts(channel, at)
        record = MessageRecord(
            channel=channel.channel_id,
            team_id=channel.team_id,
            ts=ts,
            text=text,
            blocks=blocks,
            thread_ts=thread_ts,
            user=user,
            bot_id=bot_id,
            files=list(files or []),
            posted_at_s=time.monotonic(),
        )
        channel.insert(record)
        if thread_ts and any(team.bot_id == bot_id for team in self.teams.values()):
            self.shown_status.pop((channel.channel_id, thread_ts), None)  # the app answered: its status goes
        return record

    def thread_root_ts(self, channel: Channel, ts: str) -> str | None:
        record = channel.messages.get(ts)
        if record is None or record.deleted:
            return None
        return record.thread_ts or record.ts

    @staticmethod
    def _past_ts(channel: Channel, at: float) -> str:
        us = int(at * 1_000_000)
        while f"{us // 1_000_000}.{us % 1_000_000:06d}" in channel.messages:
            us += 1
        return f"{us // 1_000_000}.{us % 1_000_000:06d}"

    def thread(self, channel: Channel, root_ts: str) -> list[MessageRecord]:
        root = channel.messages.get(root_ts)
        found = [root] if root is not None and not root.deleted else []
        found += [m for ts in channel.replies.get(root_ts, ()) if not (m := channel.messages[ts]).deleted]
        return found

    def live_replies(self, channel: Channel, record: MessageRecord) -> list[MessageRecord]:
        """A root's replies not deleted, oldest first (none for a reply)."""
        if record.thread_ts not in (None, record.ts):
            return []
        return [m for ts in channel.replies.get(record.ts, ()) if not (m := channel.messages[ts]).deleted]

    def reply_count(self, channel: Channel, record: MessageRecord) -> int:
        return len(self.live_replies(channel, record))

    def latest_reply(self, channel: Channel, record: MessageRecord) -> str | None:
        """A root's newest reply's ts (Slack's `latest_reply`), None without replies."""
        replies = self.live_replies(channel, record)
        return replies[-1].ts if replies else None

    def top_level(self, channel: Channel) -> list[MessageRecord]:
        return [m for m in channel.messages.values() if not m.deleted and m.thread_ts in (None, m.ts)]

    def add_file(self, *, team_id: str, name: str, content: bytes, mimetype: str, filetype: str,
                 base_url: str) -> FileRecord:
        file_id = new_id("F")
        key = f"{team_id}-{file_id}"
        info: JsonDict = {
            "id": file_id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype,
            "pretty_type": filetype.upper(),
            "user_team": team_id,
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "size": len(content),
            "url_private": f"{base_url}files-pri/{key}/{name}",
            "url_private_download": f"{base_url}files-pri/{key}/download/{name}",
            "permalink": f"{base_url}files/{key}/{name}",
        }
        record = FileRecord(file_id=file_id, team_id=team_id, name=name, content=content,
                            mimetype=mimetype, info=info)
        self.files[file_id] = record
        return record
