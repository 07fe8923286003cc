"""response_url as Slack limits it (5 posts within 30 minutes of the interaction), and conversations.open for the bot's DMs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .state import JsonDict, Team
from .store import SlackStore

# Slack: "you can use a response_url up to 5 times within 30 minutes of receiving it" (Slack time; scaled).
RESPONSE_URL_MAX_POSTS = 5
RESPONSE_URL_LIFETIME_S = 30 * 60.0
# What Slack answers past them (HTTP 404 with the code as the body).
USED_URL = "used_url"
EXPIRED_URL = "expired_url"


@dataclass(kw_only=True)
class UrlUse:
    issued_at_s: float
    posts: list[float] = field(default_factory=list)  # when each accepted post came (monotonic)


class ResponseUrls:
    """The response_urls the emulator issued with a nonce (slash commands, message shortcuts): each is counted.

    A URL issued without one (a button click's) is not limited, as before."""

    def __init__(self, store: SlackStore, *, time_scale: float) -> None:
        self._store = store
        self._time_scale = time_scale
        self._uses: dict[str, UrlUse] = {}

    def issue(self) -> str:
        """A fresh nonce, counted from now: the query that makes a response_url one interaction's own."""
        nonce = uuid.uuid4().hex[:16]
        self._uses[nonce] = UrlUse(issued_at_s=time.monotonic())
        return nonce

    def take(self, nonce: str) -> str | None:
        """One post through the URL of `nonce`: None when Slack takes it, else the code it refuses it with."""
        use = self._uses.get(nonce)
        if use is None:
            return None
        if time.monotonic() - use.issued_at_s > RESPONSE_URL_LIFETIME_S * self._time_scale:
            return EXPIRED_URL
        if len(use.posts) >= RESPONSE_URL_MAX_POSTS:
            return USED_URL
        use.posts.append(time.monotonic())
        return None

    def spend(self, nonce: str, *, left: int = 0) -> None:
        """The URL has only `left` posts left (as if others had been made through it)."""
        use = self._uses[nonce]
        while len(use.posts) < RESPONSE_URL_MAX_POSTS - left:
            use.posts.append(time.monotonic())

    def expire(self, nonce: str) -> None:
        """The URL's 30 minutes are over."""
        self._uses[nonce].issued_at_s = float("-inf")

    def posts(self, nonce: str) -> int:
        use = self._uses.get(nonce)
        return len(use.posts) if use is not None else 0

    # --- conversations.open: the bot's DM with one person ---
    def handlers(self) -> dict[str, Callable[[Team, JsonDict], Awaitable[JsonDict]]]:
        return {"conversations.open": self.conversations_open}

    async def conversations_open(self, team: Team, params: JsonDict) -> JsonDict:
        """`users` with one person: their DM with the bot (the same id every time: "D" + the user id's rest)."""
        users = [u for u in str(params.get("users") or "").split(",") if u]
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        if len(users) > 1:
            return {"ok": False, "error": "not_implemented"}  # group DMs are not modelled
        user = users[0]
        if not user.startswith(("U", "W")) or len(user) < 3:
            return {"ok": False, "error": "user_not_found"}
        dm = "D" + user[1:]
        channel = self._store.channel(dm, team_id=team.team_id, create=True)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        self._store.dm_users[dm] = user
        return {"ok": True, "channel": {"id": dm, "is_im": True, "user": user}, "already_open": True}
