"""conversations.list and users.list: a workspace's channels (by name) and people, cursor-paged as Slack pages them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .state import JsonDict, Team
from .store import SlackStore

# Slack's defaults and most per page: conversations.list 100 (at most 1000), users.list 0 meaning "all" —
# modelled as 100 so that every caller pages.
DEFAULT_PAGE = 100
MAX_PAGE = 1000


def _page(items: list[Any], params: JsonDict) -> tuple[list[Any], str]:
    """An opaque cursor ("offset:N") over `items`; `limit` past MAX_PAGE is cut to it."""
    try:
        limit = int(params.get("limit") or DEFAULT_PAGE)
    except (TypeError, ValueError):
        limit = DEFAULT_PAGE
    limit = max(1, min(limit, MAX_PAGE))
    cursor = str(params.get("cursor") or "")
    start = int(cursor.removeprefix("offset:")) if cursor.startswith("offset:") and cursor[7:].isdigit() else 0
    return items[start:start + limit], f"offset:{start + limit}" if start + limit < len(items) else ""


class Directory:
    """Channels named by the test (`name`, else the id lowercased) and the store's people.

    conversations.list lists public channels whatever the bot's membership, and private ones only where the
    bot is a member (as a bot token sees them); archived channels only without `exclude_archived`."""

    def __init__(self, store: SlackStore) -> None:
        self._store = store
        self.names: dict[str, str] = {}
        self.archived: set[str] = set()

    def handlers(self) -> dict[str, Callable[[Team, JsonDict], Awaitable[JsonDict]]]:
        return {"conversations.list": self.conversations_list, "users.list": self.users_list}

    def _private(self, channel_id: str) -> bool:
        return channel_id.startswith("G") or channel_id in self._store.private_members

    def _refused(self, method: str, needed: str) -> JsonDict | None:
        """SlackEmulator.refuse(method): every call answers its error, as for an app without the scope."""
        code = self._store.refusals.get(method)
        return {"ok": False, "error": code, "needed": needed, "provided": "chat:write"} if code else None

    async def conversations_list(self, team: Team, params: JsonDict) -> JsonDict:
        if refused := self._refused("conversations.list", "channels:read,groups:read"):
            return refused
        types = {t.strip() for t in str(params.get("types") or "public_channel").split(",")}
        skip_archived = str(params.get("exclude_archived", "")).lower() in ("1", "true")
        listed: list[JsonDict] = []
        for channel in self._store.channels.values():
            cid = channel.channel_id
            if channel.team_id != team.team_id or cid.startswith("D") or (skip_archived and cid in self.archived):
                continue
            private = self._private(cid)
            member = cid not in self._store.bot_not_member
            if ("private_channel" if private else "public_channel") not in types or (private and not member):
                continue
            listed.append({"id": cid, "name": self.names.get(cid, cid.lower()), "is_channel": not private,
                           "is_private": private, "is_archived": cid in self.archived, "is_member": member,
                           "context_team_id": team.team_id})
        page, cursor = _page(listed, params)
        return {"ok": True, "channels": page, "response_metadata": {"next_cursor": cursor}}

    async def users_list(self, team: Team, params: JsonDict) -> JsonDict:
        if refused := self._refused("users.list", "users:read"):
            return refused
        people = [u for u in self._store.users.values() if u.team_id == team.team_id]
        page, cursor = _page(people, params)
        members = [{
            "id": u.user_id, "team_id": u.team_id, "name": u.name, "real_name": u.real_name, "deleted": False,
            "is_bot": u.is_bot, "is_admin": u.is_admin, "is_owner": u.is_owner,
            "profile": {"real_name": u.real_name, "display_name": u.name, "team": u.team_id},
        } for u in page]
        return {"ok": True, "members": members, "response_metadata": {"next_cursor": cursor}}
