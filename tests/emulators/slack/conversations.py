"""Who is in which conversation, as Slack answers it: conversations.info, conversations.members and users.conversations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .api import error
from .directory import Directory, _page
from .state import JsonDict, Team
from .store import SlackStore

# users.conversations' types when none are given (Slack's default).
DEFAULT_TYPES = "public_channel"


@dataclass(kw_only=True)
class Membership:
    """What a test says of channels beyond the store's: public channels' people, shared and group-DM channels."""

    members: dict[str, set[str]] = field(default_factory=dict)  # a public channel's people (private: store)
    ext_shared: set[str] = field(default_factory=set)  # Slack Connect: shared with another organisation
    org_shared: set[str] = field(default_factory=set)  # shared between workspaces of one Grid org
    mpims: set[str] = field(default_factory=set)  # group DMs (G… ids, is_mpim)


class Conversations:
    """conversations.info, conversations.members and users.conversations over the store, the directory's names and
    `membership`. A bot not in a private channel is told channel_not_found, as Slack tells it (it cannot see it); a
    public one it is not in answers with is_member false."""

    def __init__(self, store: SlackStore, directory: Directory) -> None:
        self._store = store
        self._directory = directory
        self.membership = Membership()

    def handlers(self) -> dict[str, Callable[[Team, JsonDict], Awaitable[JsonDict]]]:
        return {"conversations.info": self.info, "conversations.members": self.members,
                "users.conversations": self.users_conversations}

    def private(self, cid: str) -> bool:
        return (cid.startswith("G") or cid in self._store.private_members) and not cid.startswith("D")

    def people(self, cid: str) -> set[str]:
        """The channel's people (the bot not among them: its membership is the store's bot_not_member)."""
        if cid in self._store.private_members:
            return set(self._store.private_members[cid])
        return set(self.membership.members.get(cid, set()))

    def bot_member(self, cid: str) -> bool:
        return cid not in self._store.bot_not_member

    def _visible(self, team: Team, cid: str) -> bool:
        channel = self._store.channels.get(cid)
        return channel is not None and channel.team_id == team.team_id and (not self.private(cid) or self.bot_member(cid))

    def describe(self, team: Team, cid: str) -> JsonDict:
        """The conversation object Slack returns for `cid`."""
        im, mpim, private = cid.startswith("D"), cid in self.membership.mpims, self.private(cid)
        shared = cid in self.membership.ext_shared or cid in self.membership.org_shared
        info: JsonDict = {
            "id": cid, "name": self._directory.names.get(cid, cid.lower()), "is_channel": cid.startswith("C"),
            "is_group": private and not mpim, "is_im": im, "is_mpim": mpim, "is_private": private or im,
            "is_archived": cid in self._directory.archived, "is_member": self.bot_member(cid),
            "is_ext_shared": cid in self.membership.ext_shared, "is_org_shared": cid in self.membership.org_shared,
            "is_shared": shared, "is_pending_ext_shared": False, "context_team_id": team.team_id,
        }
        if im and cid in self._store.dm_users:
            info["user"] = self._store.dm_users[cid]
        return info

    async def info(self, team: Team, params: JsonDict) -> JsonDict:
        cid = str(params.get("channel") or "")
        if not cid:
            return error("channel_not_found")
        # A channel the emulator has never seen is made on first use (strict_channels aside), as before.
        if self._store.channel(cid, team_id=team.team_id, create=True) is None or not self._visible(team, cid):
            return error("channel_not_found")
        return {"ok": True, "channel": self.describe(team, cid)}

    async def members(self, team: Team, params: JsonDict) -> JsonDict:
        """Cursor-paged (limit 100 by default, 1000 at most); the bot is listed where it is a member."""
        cid = str(params.get("channel") or "")
        if self._store.channel(cid, team_id=team.team_id, create=True) is None or not self._visible(team, cid):
            return error("channel_not_found")
        people = self.people(cid) | ({team.bot_user_id} if self.bot_member(cid) and not cid.startswith("D") else set())
        page, cursor = _page(sorted(people), params)
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    async def users_conversations(self, team: Team, params: JsonDict) -> JsonDict:
        """The conversations `user` (the bot when none is named) is in, of `types`; with a bot token, private ones
        only where the bot is in them too. Archived ones only without exclude_archived."""
        user = str(params.get("user") or team.bot_user_id)
        if user != team.bot_user_id and user not in self._store.users:
            return error("user_not_found")
        types = {t.strip() for t in str(params.get("types") or DEFAULT_TYPES).split(",")}
        skip_archived = str(params.get("exclude_archived", "")).lower() in ("1", "true")
        listed: list[JsonDict] = []
        for cid, channel in self._store.channels.items():
            if channel.team_id != team.team_id or cid.startswith("D") or (skip_archived and cid in self._directory.archived):
                continue
            kind = "mpim" if cid in self.membership.mpims else "private_channel" if self.private(cid) else "public_channel"
            inside = self.bot_member(cid) if user == team.bot_user_id else user in self.people(cid)
            if kind not in types or not inside or (kind != "public_channel" and not self.bot_member(cid)):
                continue
            listed.append(self.describe(team, cid))
        page, cursor = _page(listed, params)
        return {"ok": True, "channels": page, "response_metadata": {"next_cursor": cursor}}
