"""SlackEmulator: a local Slack (Web API, files, response_url, Socket Mode) for end-to-end tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web

from . import events
from .api import WebApi, error
from .app_surfaces import AppSurfaces
from .channel_changes import ChannelChanges
from .conversations import Conversations
from .directory import Directory
from .modals import Modals, OpenedView
from .oauth import OAUTH_METHODS, SlackOAuth
from .response_urls import ResponseUrls
from .events import Delivery
from .limits import (
    DEFAULT_LIMITS,
    WORKSPACE_POST_LIMIT,
    CallFault,
    Fault,
    Incident,
    MethodLimit,
    RandomRateLimits,
    RandomShare,
    RateLimiter,
    retry_after_header,
    workspace_post_cap,
)
from .socket import EnvelopeType, SocketHub
from .state import (
    CallRecord,
    Edit,
    EphemeralRecord,
    JsonDict,
    MessageRecord,
    SocketAck,
    AssistantRecord,
    StatusRecord,
    Team,
    User,
    ViewRecord,
)
from .store import SlackStore

DEFAULT_TEAM_ID = "T0000EMU1"
DEFAULT_APP_ID = "A0000EMU1"
DEFAULT_SIGNING_SECRET = "emulator-signing-secret"
DEFAULT_APP_TOKEN = "xapp-1-A0000EMU1-emulator-app-token"
DELIVERY_TIMEOUT_S = 10.0
SOCKET_ACK_TIMEOUT_S = 5.0
# Slack redelivers an event the app did not take (no 2xx over HTTP, no Socket Mode ack) three times:
# at once, after a minute, after five (Slack time; the emulator scales it).
EVENT_RETRY_DELAYS_S = (0.0, 60.0, 300.0)

_LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


class SlackEmulator:
    """`async with SlackEmulator(time_scale=0.05) as slack:` serves Slack on 127.0.0.1.

    Rate windows are multiplied by `time_scale` (0.05 turns a minute into 3 s), and so is a rate limit's `Retry-After`:
    whole Slack seconds, at least one, sent in real seconds (fractional when scaled; the bot parses a float). `limits=False` turns rate limiting off; a dict replaces limits per method.
    Unknown but well-formed channel ids (C…, D…, G…) are created on first use unless
    `strict_channels=True`.

    `workspace_post_cap` (calls a minute, or a MethodLimit) caps chat.postMessage across all
    channels of a workspace, besides the per-channel limit; it applies even with `limits=False`.
    `rate_limit_randomly` answers a seeded share of calls 429 (see there).
    """

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        limits: bool | dict[str, MethodLimit] = True,
        strict_channels: bool = False,
        team_id: str = DEFAULT_TEAM_ID,
        team_name: str = "Emulator",
        app_id: str = DEFAULT_APP_ID,
        app_token: str = DEFAULT_APP_TOKEN,
        signing_secret: str = DEFAULT_SIGNING_SECRET,
        workspace_post_cap: int | MethodLimit | None = None,
        stream_timeout_s: float | None = None,
    ) -> None:
        self.time_scale = time_scale
        self.limits: dict[str, MethodLimit] = (
            {**DEFAULT_LIMITS, **limits} if isinstance(limits, dict) else dict(DEFAULT_LIMITS)
        )
        if workspace_post_cap is not None:
            self.cap_workspace_posts(workspace_post_cap)
        self.limits_enabled = limits is not False
        self.app_id = app_id
        self.app_token = app_token
        self.signing_secret = signing_secret
        self._store = SlackStore(strict_channels=strict_channels)
        self._default_team = self._store.add_team(team_id=team_id, name=team_name, app_id=app_id)
        self._api = WebApi(self._store)
        self._surfaces = AppSurfaces(self._store, time_scale=time_scale, stream_timeout_s=stream_timeout_s)
        self._api.handlers.update(self._surfaces.handlers())
        self._modals = Modals(self._store)
        self._api.handlers.update(self._modals.handlers())
        # Commands' and shortcuts' response_urls: 5 posts within 30 minutes each; conversations.open for DMs.
        self._response_urls = ResponseUrls(self._store, time_scale=time_scale)
        self._api.handlers.update(self._response_urls.handlers())
        self._directory = Directory(self._store)
        self._api.handlers.update(self._directory.handlers())
        # Who is in which channel (info, members, users.conversations), and what people do to channels and messages.
        self._conversations = Conversations(self._store, self._directory)
        self._api.handlers.update(self._conversations.handlers())
        self._changes = ChannelChanges(self._store, self._directory, self._conversations)
        # "Add to Slack": the consent page, oauth.v2.access (rotation, org-wide installs), auth.revoke, uninstalls.
        self.oauth = SlackOAuth(self._store, app_id=app_id)
        self._limiter = RateLimiter(time_scale=time_scale, limits=self.limits)
        self._faults: dict[str, list[Fault]] = {}
        self._lost_replies: dict[str, int] = {}
        self._random_429s: RandomRateLimits | None = None
        # Consulted on every call of a known team with its method and params (tests/support/fault_schedule.py).
        self.fault_plan: Callable[[str, JsonDict], CallFault | None] | None = None
        self._random_lost: RandomShare | None = None
        self._incident: Incident | None = None
        self._socket = SocketHub(app_id=app_id)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0
        self.response_url_posts: list[JsonDict] = []
        # Every delivery deliver_event_until_taken made (redeliveries too), in order.
        self.event_deliveries: list[Delivery] = []

    # --- lifecycle ---
    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_get("/files-pri/{key}/download/{name}", self._handle_file)
        app.router.add_get("/files-pri/{key}/{name}", self._handle_file)
        app.router.add_post("/response-url/{team}/{channel}/{ts}/{user}", self._handle_response_url)
        app.router.add_post("/command-response/{team}/{channel}/{user}", self._handle_command_response)
        app.router.add_get("/socket", self._socket.handle)
        app.router.add_get("/oauth/v2/authorize", self.oauth.handle_authorize)
        # A reply still held back when the emulator stops (a slow_reply fault) is cut off this soon: aiohttp's
        # default waits a minute for it.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        # Slack delivers events to an app concurrently without a cap of its own: aiohttp's default of 100
        # connections would make a burst of deliveries wait on the emulator's side, not the bot's.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> SlackEmulator:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def api_url(self) -> str:
        """For `AsyncWebClient(base_url=...)`; the trailing slash matters."""
        return f"{self.base_url}api/"

    # --- identities ---
    @property
    def team_id(self) -> str:
        return self._default_team.team_id

    @property
    def bot_token(self) -> str:
        return self._default_team.bot_token

    @property
    def bot_user_id(self) -> str:
        return self._default_team.bot_user_id

    @property
    def bot_id(self) -> str:
        return self._default_team.bot_id

    def add_team(self, team_id: str, *, name: str | None = None, enterprise_id: str | None = None) -> Team:
        """Another workspace with the app installed (its own bot token); `enterprise_id`: inside that Grid org."""
        return self._store.add_team(team_id=team_id, name=name or team_id, app_id=self.app_id,
                                    enterprise_id=enterprise_id)

    def grant_token(self, token: str, team_id: str | None, enterprise_id: str | None = None) -> None:
        """`token` becomes a bot token of `team_id`, or (team_id None) of every workspace of `enterprise_id`."""
        self._store.grant_token(token, team_id=team_id, enterprise_id=enterprise_id)

    def revoke_token(self, token: str) -> None:
        """Calls with `token` get invalid_auth from now on (and files.slack.com refuses it)."""
        self._store.revoke_token(token)

    def calls_by_token(self, token: str) -> list[CallRecord]:
        """The Web API calls made with `token`, in order."""
        return [c for c in self._store.calls if c.token == token]

    def team(self, team_id: str | None = None) -> Team:
        return self._store.teams[team_id or self.team_id]

    def add_user(self, user_id: str, *, name: str | None = None, real_name: str | None = None,
                 team_id: str | None = None, display_name: str | None = None, guest: str | None = None) -> User:
        """A person; `display_name` as their profile shows it; `guest` "multi" (is_restricted) or "single"
        (is_ultra_restricted too) for a guest account."""
        user = self._store.add_user(user_id=user_id, team_id=team_id or self.team_id, name=name, real_name=real_name)
        user = replace(user, display_name=display_name, is_restricted=guest is not None,
                       is_ultra_restricted=guest == "single")
        self._store.users[user_id] = user
        return user

    # --- test input ---
    def add_user_message(self, channel: str, text: str, user: str, thread_ts: str | None = None, *,
                         files: list[JsonDict] | None = None, team_id: str | None = None, at: float | None = None) -> str:
        """Records a message a person wrote (registering the user if new); returns its ts. `at` (epoch seconds):
        written then, in the channel's past (its ts near it), for tests of history."""
        team = team_id or self.team_id
        if user not in self._store.users:
            self._store.add_user(user_id=user, team_id=team, name=None, real_name=None)
        found = self._store.channel(channel, team_id=team, create=True)
        if found is None:
            raise ValueError(f"channel {channel!r} does not belong to team {team}")
        root = self._store.thread_root_ts(found, thread_ts) if thread_ts is not None else None
        if thread_ts is not None and root is None:
            raise ValueError(f"no thread {thread_ts} in {channel}")
        return self._store.post(found, text=text, blocks=None, thread_ts=root, user=user, bot_id=None,
                                files=files, at=at).ts

    def add_bot_message(self, channel: str, text: str, *, bot_id: str, username: str | None = None,
                        thread_ts: str | None = None, team_id: str | None = None, at: float | None = None) -> str:
        """Records a message of another app, bot or incoming webhook (subtype `bot_message`, a
        `bot_id`, no user); returns its ts."""
        team = team_id or self.team_id
        found = self._store.channel(channel, team_id=team, create=True)
        if found is None:
            raise ValueError(f"channel {channel!r} does not belong to team {team}")
        root = self._store.thread_root_ts(found, thread_ts) if thread_ts is not None else None
        if thread_ts is not None and root is None:
            raise ValueError(f"no thread {thread_ts} in {channel}")
        record = self._store.post(found, text=text, blocks=None, thread_ts=root, user=None, bot_id=bot_id, at=at)
        record.subtype, record.username = "bot_message", username
        return record.ts

    def add_file(self, name: str, content: bytes, mimetype: str, *, team_id: str | None = None,
                 filetype: str | None = None) -> JsonDict:
        """A Slack file object; its url_private(_download) needs the team's bot token as Bearer."""
        record = self._store.add_file(team_id=team_id or self.team_id, name=name, content=content,
                                      mimetype=mimetype,
                                      filetype=filetype or name.rsplit(".", 1)[-1].lower(),
                                      base_url=self.base_url)
        return dict(record.info)

    def fail_next(self, method: str, *, error: str = "ratelimited", http_status: int | None = None,
                  times: int = 1, retry_after_s: int = 1) -> None:
        """The next `times` calls of `method` fail: "ratelimited" → 429, else ok=false (or http_status)."""
        status = http_status or (429 if error == "ratelimited" else 200)
        self._faults.setdefault(method, []).append(
            Fault(error=error, http_status=status, times=times, retry_after_s=retry_after_s))

    def add_channel(self, channel: str, *, name: str, private: bool = False, members: list[str] | None = None,
                    archived: bool = False, team_id: str | None = None, shared: str | None = None,
                    mpim: bool = False) -> str:
        """A channel with a name (conversations.list lists it by that name) and its people `members` (the bot is
        a member unless remove_bot_from says otherwise); private, or a group DM (`mpim`, a G… id); `shared`
        "external" (Slack Connect, is_ext_shared) or "org" (is_org_shared). Returns its id."""
        if self._store.channel(channel, team_id=team_id or self.team_id, create=True) is None:
            raise ValueError(f"channel {channel!r} does not belong to team {team_id or self.team_id}")
        self._directory.names[channel] = name
        for user in members or ():
            if user not in self._store.users:
                self._store.add_user(user_id=user, team_id=team_id or self.team_id, name=None, real_name=None)
        if private or mpim:
            self._store.private_members[channel] = set(members or ())
        else:
            self._conversations.membership.members[channel] = set(members or ())
        if mpim:
            self._conversations.membership.mpims.add(channel)
        if shared is not None:
            membership = self._conversations.membership
            (membership.ext_shared if shared == "external" else membership.org_shared).add(channel)
        if archived:
            self._directory.archived.add(channel)
        return channel

    # --- what people do to channels and messages: each returns the events Slack sends the app for it ---
    def edit_message(self, channel: str, ts: str, text: str, *, team_id: str | None = None) -> list[JsonDict]:
        """The author edits it: message_changed (`message` as edited, `previous_message` as it was)."""
        return self._changes.edit_message(self.team(team_id), channel, ts, text)

    def delete_message(self, channel: str, ts: str, *, team_id: str | None = None) -> list[JsonDict]:
        """The author deletes it: message_deleted (`deleted_ts`)."""
        return self._changes.delete_message(self.team(team_id), channel, ts)

    def rename_channel(self, channel: str, name: str, *, team_id: str | None = None) -> list[JsonDict]:
        """channel_rename (group_rename for a private channel)."""
        return self._changes.rename(self.team(team_id), channel, name)

    def archive_channel(self, channel: str, *, by: str, team_id: str | None = None) -> list[JsonDict]:
        """channel_archive (group_archive)."""
        return self._changes.archive(self.team(team_id), channel, by=by)

    def delete_channel(self, channel: str, *, team_id: str | None = None) -> list[JsonDict]:
        """channel_deleted (group_deleted)."""
        return self._changes.delete_channel(self.team(team_id), channel)

    def join_channel(self, channel: str, user: str, *, inviter: str | None = None,
                     team_id: str | None = None) -> list[JsonDict]:
        """member_joined_channel (the bot's own user id: the bot is invited)."""
        return self._changes.join(self.team(team_id), channel, user, inviter=inviter)

    def leave_channel(self, channel: str, user: str, *, by: str | None = None,
                      team_id: str | None = None) -> list[JsonDict]:
        """member_left_channel; the bot removed: that and channel_left (group_left)."""
        return self._changes.leave(self.team(team_id), channel, user, by=by)

    def share_channel(self, channel: str, *, with_team: str, external: bool = True,
                      team_id: str | None = None) -> list[JsonDict]:
        """channel_shared: Slack Connect (is_ext_shared), or with another workspace of the org."""
        return self._changes.share(self.team(team_id), channel, with_team=with_team, external=external)

    def unshare_channel(self, channel: str, *, from_team: str, team_id: str | None = None) -> list[JsonDict]:
        return self._changes.unshare(self.team(team_id), channel, from_team=from_team)

    def make_channel_private(self, channel: str, *, by: str, team_id: str | None = None) -> list[JsonDict]:
        """The channel_convert_to_private message (a `message` event with that subtype)."""
        return self._changes.make_private(self.team(team_id), channel, by=by)

    async def deliver_events(self, url: str, events_: list[JsonDict], *, team_id: str | None = None) -> list[Delivery]:
        """Each event delivered as Slack does (deliver_event_until_taken), in order; the last delivery of each."""
        return [(await self.deliver_event_until_taken(url, event, team_id=team_id))[-1] for event in events_]

    def set_private_members(self, channel: str, users: list[str]) -> None:
        """`channel` is private, with these members (conversations.info says is_private; conversations.members lists them)."""
        self._store.private_members[channel] = set(users)

    def set_dm_user(self, channel: str, user: str) -> None:
        """`channel` is the bot's DM with `user` (conversations.info names them)."""
        self._store.dm_users[channel] = user

    def lose_reply_next(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` are performed, then the connection is dropped before the reply: the
        work is done and the caller never learns it (an ambiguous failure)."""
        self._lost_replies[method] = self._lost_replies.get(method, 0) + times

    def history_page_calls(self) -> int:
        """conversations.history and conversations.replies calls answered so far (429s included)."""
        return sum(1 for c in self._store.calls if c.method in ("conversations.history", "conversations.replies"))

    def limit_history(self, tier: str = "limited") -> None:
        """Slack's read limits for commercially distributed apps outside the Marketplace ("limited"): one
        conversations.replies / history call a minute each, 15 messages a page; "internal" restores Tier 3."""
        limited = tier == "limited"
        self._api.page_max = 15 if limited else None
        for method in ("conversations.replies", "conversations.history"):
            self.limits[method] = MethodLimit(calls=1, window_s=60.0, burst=1) if limited else DEFAULT_LIMITS[method]
        self._limiter = RateLimiter(time_scale=self.time_scale, limits=self.limits)

    def remove_bot_from(self, channel: str) -> None:
        """The bot is not a member of `channel` (never invited, or removed): posting there, and reading it
        (conversations.replies / history), gets not_in_channel."""
        self._store.bot_not_member.add(channel)

    def refuse(self, method: str, error: str | None = "missing_scope") -> None:
        """Every call of `method` (assistant.threads.setStatus, reactions.add, reactions.remove) answers `error`,
        as for an app without the scope; None takes the refusal back."""
        if error is None:
            self._store.refusals.pop(method, None)
        else:
            self._store.refusals[method] = error

    def status_shown(self, channel: str, thread_ts: str) -> StatusRecord | None:
        """The status the thread shows now (the bot's last setStatus there, unless cleared or replied after)."""
        return self._store.shown_status.get((channel, thread_ts))

    def reactions_on(self, channel: str, ts: str) -> dict[str, list[str]]:
        """The message's reactions now: emoji name → who reacted."""
        return {name: list(users) for name, users in self.message(channel, ts).reactions.items()}

    def refuse_streaming(self, refused: bool = True) -> None:
        """Every chat.*Stream call answers `method_not_supported`, as where the workspace lacks them."""
        self._surfaces.streaming_supported = not refused

    def start_assistant_thread(self, channel: str, *, team_id: str | None = None) -> str:
        """The root message Slack makes when a user opens a thread in the AI-app pane; returns its ts."""
        team = self.team(team_id)
        found = self._store.channel(channel, team_id=team.team_id, create=True)
        if found is None:
            raise ValueError(f"channel {channel!r} does not belong to team {team.team_id}")
        record = self._store.post(found, text="", blocks=None, thread_ts=None, user=team.bot_user_id, bot_id=team.bot_id)
        record.subtype = "assistant_app_thread"
        return record.ts

    def clear_faults(self) -> None:
        """Forget every fault still queued by fail_next."""
        self._faults.clear()

    def cap_workspace_posts(self, cap: int | MethodLimit | None) -> None:
        """chat.postMessage calls a minute (Slack time) across all channels of each workspace, or a
        MethodLimit for its burst too; None lifts the cap. A call over it gets 429 with Retry-After."""
        if cap is None:
            self.limits.pop(WORKSPACE_POST_LIMIT, None)
        else:
            limit = cap if isinstance(cap, MethodLimit) else workspace_post_cap(cap)
            self.limits[WORKSPACE_POST_LIMIT] = MethodLimit(calls=limit.calls, window_s=limit.window_s, burst=limit.burst)

    def rate_limit_randomly(self, fraction: float, *, retry_after_s: tuple[int, int] = (1, 3), seed: int = 0,
                            methods: list[str] | None = None) -> None:
        """From now on a seeded random `fraction` of calls (to `methods`, default every Web API method)
        gets 429 `ratelimited` with a Retry-After of whole real seconds drawn from `retry_after_s`.
        `fraction=0` turns it off."""
        self._random_429s = RandomRateLimits(
            fraction=fraction, retry_after_s=retry_after_s, seed=seed,
            methods=frozenset(methods) if methods is not None else None,
        ) if fraction > 0 else None

    def lose_replies_randomly(self, fraction: float, *, methods: list[str] | None = None, seed: int = 0) -> None:
        """From now on a seeded random `fraction` of the successful calls (to `methods`, default every method) is
        performed and its reply lost, as lose_reply_next does; `fraction=0` turns it off."""
        self._random_lost = RandomShare(
            fraction=fraction, seed=seed, methods=frozenset(methods) if methods is not None else None,
        ) if fraction > 0 else None

    @property
    def random_lost_reply_count(self) -> int:
        """How many replies lose_replies_randomly has dropped so far."""
        return self._random_lost.count if self._random_lost is not None else 0

    def start_incident(self, *, share_503: float = 0.5, retry_after_s: tuple[int, int] = (1, 10), seed: int = 0) -> Incident:
        """From now until end_incident every Web API call fails: 503 or 429 with Retry-After (see Incident)."""
        self._incident = Incident(share_503=share_503, retry_after_s=retry_after_s, seed=seed)
        return self._incident

    def end_incident(self) -> None:
        self._incident = None

    @property
    def random_429_count(self) -> int:
        """How many calls rate_limit_randomly has answered 429 so far."""
        return self._random_429s.count if self._random_429s is not None else 0

    # --- recording API ---
    def messages(self, channel: str, *, include_deleted: bool = False) -> list[MessageRecord]:
        """Every message in the channel (threads included) in ts order."""
        found = self._store.channels.get(channel)
        if found is None:
            return []
        return [m for m in found.messages.values() if include_deleted or not m.deleted]

    @property
    def channel_ids(self) -> list[str]:
        """Every channel the emulator knows (made by a test, or on first use), in creation order."""
        return list(self._store.channels)

    def message(self, channel: str, ts: str) -> MessageRecord:
        return self._store.channels[channel].messages[ts]

    def thread(self, channel: str, thread_ts: str) -> list[MessageRecord]:
        """The thread's root and replies in ts order (empty if there is no such thread)."""
        found = self._store.channels.get(channel)
        if found is None:
            return []
        root = self._store.thread_root_ts(found, thread_ts)
        return self._store.thread(found, root) if root is not None else []

    def message_json(self, channel: str, ts: str) -> JsonDict:
        """The message as Slack would include it in an interaction payload."""
        found = self._store.channels[channel]
        record = found.messages[ts]
        return record.to_api(reply_count=self._store.reply_count(found, record))

    @property
    def ephemerals(self) -> list[EphemeralRecord]:
        return list(self._store.ephemerals)

    def ephemerals_for(self, user: str) -> list[EphemeralRecord]:
        """What only `user` sees: the ephemerals shown to them and not taken away (each as last replaced)."""
        return [e for e in self._store.ephemerals if e.user == user and not e.deleted]

    def spend_response_url(self, url: str, *, left: int = 0) -> None:
        """A command's or shortcut's response_url has only `left` of its 5 posts left."""
        self._response_urls.spend(_nonce(url), left=left)

    def expire_response_url(self, url: str) -> None:
        """A command's or shortcut's response_url is past its 30 minutes."""
        self._response_urls.expire(_nonce(url))

    def response_url_uses(self, url: str) -> int:
        """How many posts a command's or shortcut's response_url has taken."""
        return self._response_urls.posts(_nonce(url))

    @property
    def statuses(self) -> list[StatusRecord]:
        return list(self._store.statuses)

    @property
    def views(self) -> list[ViewRecord]:
        """Every views.publish accepted, in order."""
        return list(self._store.views)

    @property
    def assistant_calls(self) -> list[AssistantRecord]:
        """Every assistant.threads.setTitle / setSuggestedPrompts accepted, in order."""
        return list(self._store.assistant_calls)

    @property
    def calls(self) -> list[CallRecord]:
        return list(self._store.calls)

    def call_names(self) -> list[str]:
        return [c.method for c in self._store.calls]

    @property
    def count_429(self) -> dict[str, int]:
        return dict(self._store.count_429)

    @property
    def socket_acks(self) -> list[SocketAck]:
        return list(self._socket.acks)

    # --- HTTP: Web API ---
    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        token = token or str(params.pop("token", "") or "")
        params.pop("token", None)
        if method in OAUTH_METHODS:
            # The app's client credentials (or the token to revoke) instead of a bot token of a team.
            body = await self.oauth.answer(method, params, request.headers, token)
            self._store.calls.append(CallRecord(
                method=method, at_s=time.monotonic(), team_id=None, params=params, status=200,
                error=None if body.get("ok") else str(body.get("error")), connection=_peer(request), token=token,
            ))
            return web.json_response(body)
        team = self._store.team_by_bot_token(token, params)
        planned = self.fault_plan(method, params) if self.fault_plan is not None and team is not None else None
        if planned is not None and planned.kind == "dropped":
            # Never done: the connection drops before Slack reads the call.
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError(f"{method}: connection dropped on purpose")
        if planned is not None and planned.kind == "ratelimited":
            status, body, headers = 429, error("ratelimited"), {"Retry-After": f"{planned.retry_after_s:g}"}
        else:
            status, body, headers = await self._answer(method, params, token, team)
        if planned is not None and planned.kind == "error_after_work" and status == 200:
            status, body, headers = 500, error("internal_error"), {}
        self._store.calls.append(CallRecord(
            method=method, at_s=time.monotonic(), team_id=team.team_id if team else None,
            params=params, status=status, error=None if body.get("ok") else str(body.get("error")),
            connection=_peer(request), token=token,
        ))
        if status == 429:
            self._store.count_429[method] = self._store.count_429.get(method, 0) + 1
        if planned is not None and planned.kind == "slow_reply":
            await asyncio.sleep(planned.delay_s)
        if planned is not None and planned.kind == "lost" and status == 200:
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError(f"{method}: reply lost on purpose")
        armed = self._lost_replies.get(method, 0) > 0 and status == 200
        if armed:
            self._lost_replies[method] -= 1
        if armed or (status == 200 and body.get("ok") and self._random_lost is not None and self._random_lost.draw(method)):
            # Done, but the reply never arrives: the connection drops before it is written.
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError(f"{method}: reply lost on purpose")
        return web.json_response(body, status=status, headers=headers)

    async def _answer(self, method: str, params: JsonDict, token: str,
                      team: Team | None) -> tuple[int, JsonDict, dict[str, str]]:
        if not token:
            return 200, error("not_authed"), {}
        if method == "apps.connections.open":
            if token != self.app_token:
                return 200, error("not_allowed_token_type" if team else "invalid_auth"), {}
            team = self._default_team
        elif team is None:
            return 200, error("not_allowed_token_type" if token == self.app_token else "invalid_auth"), {}
        if self._incident is not None:
            status, code, headers = self._incident.draw()
            return status, error(code), headers
        fault = self._take_fault(method)
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after_s)} if fault.http_status == 429 else {}
            return fault.http_status, error(fault.error), headers
        if self._random_429s is not None:
            drawn = self._random_429s.draw(method)
            if drawn is not None:
                return 429, error("ratelimited"), {"Retry-After": str(drawn)}
        names = (method,) if self.limits_enabled else ()
        if method == "chat.postMessage" and WORKSPACE_POST_LIMIT in self.limits:
            names += (WORKSPACE_POST_LIMIT,)
        if names:
            channel = params.get("channel") or params.get("channel_id")
            wait_s = self._limiter.try_acquire_all(names, team_id=team.team_id,
                                                   channel=str(channel) if channel else None)
            if wait_s is not None:
                return 429, error("ratelimited"), {"Retry-After": retry_after_header(wait_s, time_scale=self.time_scale)}
        if method == "apps.connections.open":
            return 200, {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket?ticket="
                                            f"{self._socket.issue_ticket()}"}, {}
        handler = self._api.handlers.get(method)
        if handler is None:
            return 200, error("unknown_method"), {}
        return 200, await handler(team, params), {}

    def _take_fault(self, method: str) -> Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.pop(0)
        return fault

    # --- HTTP: files and response_url ---
    async def _handle_file(self, request: web.Request) -> web.Response:
        team_id, _, file_id = request.match_info["key"].partition("-")
        record = self._store.files.get(file_id)
        team = self._store.teams.get(team_id)
        if record is None or team is None or record.team_id != team_id:
            return web.Response(status=404, text="file not found")
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not self._store.speaks_for(header.removeprefix("Bearer "), team_id):
            # Slack answers an unauthenticated file URL with its HTML sign-in page, status 200.
            return web.Response(text=_LOGIN_PAGE, content_type="text/html")
        return web.Response(body=record.content, content_type=record.mimetype,
                            headers={"Content-Disposition": f'attachment; filename="{record.name}"'})

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        """Bolt's respond(): replace/delete the original message, or post (ephemeral by default)."""
        body = await request.json()
        self.response_url_posts.append(body)
        refused = self._response_urls.take(request.query.get("n", ""))
        if refused is not None:
            return web.Response(status=404, text=refused)
        team_id, channel_id = request.match_info["team"], request.match_info["channel"]
        ts, user = request.match_info["ts"], request.match_info["user"]
        channel = self._store.channel(channel_id, team_id=team_id, create=False)
        record = channel.messages.get(ts) if channel is not None else None
        if channel is None or record is None:
            return web.json_response(error("expired_url"), status=404)
        text, blocks = str(body.get("text") or ""), body.get("blocks")
        if body.get("delete_original"):
            record.deleted = True
        elif body.get("replace_original"):
            record.text, record.blocks = text, blocks
            record.edits.append(Edit(text=text, blocks=blocks, edited_ts=self._store.clock.next(),
                                     at_s=time.monotonic()))
        elif body.get("response_type") == "in_channel":
            team = self._store.teams[team_id]
            self._store.post(channel, text=text, blocks=blocks, thread_ts=body.get("thread_ts"),
                             user=team.bot_user_id, bot_id=team.bot_id)
        else:
            self._store.ephemerals.append(EphemeralRecord(
                channel=channel_id, team_id=team_id, user=user, text=text, blocks=blocks,
                thread_ts=record.thread_ts, message_ts=self._store.clock.next(), via=request.query.get("n", "")))
        return web.json_response({"ok": True})

    async def _handle_command_response(self, request: web.Request) -> web.Response:
        """A slash command's response_url: an ephemeral reply by default, or `in_channel`; `replace_original` rewrites
        (`delete_original` takes away) the last ephemeral this URL posted; 5 posts within 30 minutes."""
        body = await request.json()
        self.response_url_posts.append(body)
        nonce = request.query.get("n", "")
        refused = self._response_urls.take(nonce)
        if refused is not None:
            return web.Response(status=404, text=refused)
        team_id, channel_id, user = request.match_info["team"], request.match_info["channel"], request.match_info["user"]
        channel = self._store.channel(channel_id, team_id=team_id, create=True)
        if channel is None:
            return web.json_response(error("channel_not_found"), status=404)
        text, blocks = str(body.get("text") or ""), body.get("blocks")
        earlier = [i for i, e in enumerate(self._store.ephemerals) if nonce and e.via == nonce and not e.deleted]
        if earlier and (body.get("replace_original") or body.get("delete_original")):
            old = self._store.ephemerals[earlier[-1]]
            self._store.ephemerals[earlier[-1]] = (
                replace(old, deleted=True) if body.get("delete_original")
                else replace(old, text=text, blocks=blocks, replaced=old.replaced + 1))
        elif body.get("response_type") == "in_channel":
            team = self._store.teams[team_id]
            self._store.post(channel, text=text, blocks=blocks, thread_ts=None, user=team.bot_user_id, bot_id=team.bot_id)
        else:
            self._store.ephemerals.append(EphemeralRecord(
                channel=channel_id, team_id=team_id, user=user, text=text, blocks=blocks, thread_ts=None,
                message_ts=self._store.clock.next(), via=nonce))
        return web.json_response({"ok": True})

    def slash_command(self, command: str, text: str, *, user: str, channel: str, team_id: str | None = None) -> JsonDict:
        """A slash command's payload, with a working response_url."""
        team = self.team(team_id)
        if user not in self._store.users:
            self._store.add_user(user_id=user, team_id=team.team_id, name=None, real_name=None)
        payload = events.slash_command_payload(
            command=command, text=text, user=user, channel=channel, team_id=team.team_id, api_app_id=self.app_id,
            response_url=f"{self.base_url}command-response/{team.team_id}/{channel}/{user}?n={self._response_urls.issue()}",
            team_domain=team.domain,
        )
        # Its trigger_id may open one modal within 3 s (views.open).
        self._modals.issue(payload["trigger_id"], user_id=user, team_id=team.team_id)
        return payload

    def make_admin(self, user: str, *, owner: bool = False) -> None:
        """The user becomes a workspace admin (or owner): users.info says `is_admin` (`is_owner`)."""
        if user not in self._store.users:
            self._store.add_user(user_id=user, team_id=self.team_id, name=None, real_name=None)
        self._store.users[user] = replace(self._store.users[user], is_admin=not owner, is_owner=owner)

    @property
    def opened_views(self) -> list[OpenedView]:
        """Modals views.open accepted, oldest first."""
        return list(self._modals.opened)

    def view_submission(self, view_id: str, values: dict[str, Any] | None = None) -> JsonDict:
        """What Slack sends when the user presses the modal's submit button (see Modals.submission)."""
        return self._modals.submission(view_id, values or {}, api_app_id=self.app_id, domain=self.team().domain)

    def home_block_actions(self, user: str, *, action_id: str, value: str, team_id: str | None = None) -> JsonDict:
        """A click on a button of the Home tab last published for `user` (container type "view")."""
        team = self.team(team_id)
        view = next((v.view for v in reversed(self._store.views) if v.user_id == user), None)
        if view is None:
            raise ValueError(f"no Home tab published for {user}")
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team.team_id},
            "api_app_id": self.app_id, "token": "emulator-verification-token",
            "container": {"type": "view", "view_id": "V00000HOME"},
            "trigger_id": f"{int(time.time())}.12345", "team": {"id": team.team_id, "domain": team.domain},
            "enterprise": None, "is_enterprise_install": False,
            "view": {"id": "V00000HOME", "type": "home", "team_id": team.team_id, **view},
            "actions": [{"action_id": action_id, "block_id": "home", "value": value, "type": "button",
                         "text": {"type": "plain_text", "text": action_id}, "action_ts": f"{time.time():.6f}"}],
        }

    async def deliver_command(self, url: str, payload: JsonDict, *, signing_secret: str | None = None,
                              sign: bool = True) -> Delivery:
        """POSTs a slash command form-encoded, as Slack does (the app must answer within 3 s)."""
        return await self._post(url, events.command_body(payload), "application/x-www-form-urlencoded",
                                signing_secret=signing_secret, timestamp=None, sign=sign, extra={})

    # --- delivering to the app over HTTP ---
    def event_envelope(self, event: JsonDict, *, team_id: str | None = None,
                       event_id: str | None = None) -> JsonDict:
        team = self.team(team_id)
        return events.event_envelope(event, team_id=team.team_id, api_app_id=self.app_id,
                                     bot_user_id=team.bot_user_id, event_id=event_id)

    def block_actions(self, channel: str, message_ts: str, *, user: str, action_id: str, value: str,
                      block_id: str | None = None, team_id: str | None = None,
                      user_team: str | None = None) -> JsonDict:
        """A block_actions payload for a click on a stored message, with a working response_url;
        `user_team`: the clicker's own workspace, when not the channel's (Slack Connect)."""
        team = self.team(team_id)
        message = self.message_json(channel, message_ts)
        # The element the message shows under that action_id gives the action its type, block and text (a
        # feedback_buttons element sends the clicked button's value, type "feedback_buttons"); an action_id the
        # message does not show is sent as a plain button, as a forged or stale payload would be.
        found = _clicked_element(message.get("blocks") or [], action_id, value)
        payload = events.block_actions_payload(
            user=user, action_id=action_id, value=value, message=message,
            channel=channel, team_id=team.team_id, api_app_id=self.app_id,
            block_id=block_id or (found[0] if found else None),
            response_url=f"{self.base_url}response-url/{team.team_id}/{channel}/{message_ts}/{user}",
            team_domain=team.domain, user_team=user_team,
            element_type=found[1] if found else "button", text=found[2] if found else None,
        )
        # Its trigger_id may open one modal within 3 s (views.open), as any block_actions' may.
        self._modals.issue(payload["trigger_id"], user_id=user, team_id=team.team_id)
        return payload

    def message_shortcut(self, channel: str, message_ts: str, *, user: str, callback_id: str,
                         team_id: str | None = None, user_team: str | None = None) -> JsonDict:
        """A message shortcut chosen from a stored message's ⋯ menu (`message_action`), with a working response_url
        (an ephemeral reply to the user by default) and a trigger_id that may open one modal within 3 s."""
        team = self.team(team_id)
        payload = events.message_action_payload(
            user=user, callback_id=callback_id, message=self.message_json(channel, message_ts), channel=channel,
            team_id=team.team_id, api_app_id=self.app_id,
            response_url=f"{self.base_url}response-url/{team.team_id}/{channel}/{message_ts}/{user}"
                         f"?n={self._response_urls.issue()}",
            team_domain=team.domain, user_team=user_team,
        )
        self._modals.issue(payload["trigger_id"], user_id=user, team_id=team.team_id)
        return payload

    def feedback_click(self, channel: str, message_ts: str, *, user: str, positive: bool,
                       team_id: str | None = None) -> JsonDict:
        """A click on the 👍 (positive) or 👎 of the message's feedback_buttons element."""
        message = self.message_json(channel, message_ts)
        for block in message.get("blocks") or []:
            if block.get("type") != "context_actions":
                continue
            for element in block.get("elements") or []:
                if element.get("type") == "feedback_buttons":
                    button = element["positive_button" if positive else "negative_button"]
                    return self.block_actions(channel, message_ts, user=user, action_id=str(element.get("action_id") or ""),
                                              value=str(button["value"]), team_id=team_id)
        raise ValueError(f"message {message_ts} in {channel} shows no feedback buttons")

    async def deliver_event(
        self, url: str, event: JsonDict, *, team_id: str | None = None, event_id: str | None = None,
        retry_num: int | None = None, retry_reason: str | None = None,
        signing_secret: str | None = None, timestamp: int | None = None, sign: bool = True,
    ) -> Delivery:
        """POSTs a signed event_callback (with X-Slack-Retry-* when retry_num is given)."""
        envelope = self.event_envelope(event, team_id=team_id, event_id=event_id)
        extra: dict[str, str] = {}
        if retry_num is not None:
            extra["X-Slack-Retry-Num"] = str(retry_num)
            extra["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        return await self._post(url, events.event_body(envelope), "application/json",
                                signing_secret=signing_secret, timestamp=timestamp, sign=sign, extra=extra)

    async def deliver_event_until_taken(
        self, url: str, event: JsonDict, *, team_id: str | None = None, event_id: str | None = None,
        retry_delays_s: tuple[float, ...] = EVENT_RETRY_DELAYS_S,
    ) -> list[Delivery]:
        """Delivers an event as Slack does: the same envelope again (X-Slack-Retry-Num 1, 2, 3) after each
        answer that is not a 2xx (or none in time: status 0), until one is; every delivery, in order."""
        envelope = self.event_envelope(event, team_id=team_id, event_id=event_id)
        deliveries: list[Delivery] = []
        reason = ""
        for attempt in range(len(retry_delays_s) + 1):
            extra: dict[str, str] = {}
            if attempt:
                await asyncio.sleep(retry_delays_s[attempt - 1] * self.time_scale)
                extra = {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": reason}
            started = time.perf_counter()
            try:
                delivery = await self._post(url, events.event_body(envelope), "application/json",
                                            signing_secret=None, timestamp=None, sign=True, extra=extra)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                delivery = Delivery(status=0, latency_s=time.perf_counter() - started, body="")
            deliveries.append(delivery)
            self.event_deliveries.append(delivery)
            if 200 <= delivery.status < 300:
                break
            reason = "http_timeout" if delivery.status == 0 else "http_error"
        return deliveries

    async def deliver_envelope(self, url: str, envelope: JsonDict, *, signing_secret: str | None = None,
                               timestamp: int | None = None, sign: bool = True,
                               extra_headers: dict[str, str] | None = None) -> Delivery:
        """POSTs an already-built envelope as-is (to redeliver the very same event_id)."""
        return await self._post(url, events.event_body(envelope), "application/json",
                                signing_secret=signing_secret, timestamp=timestamp, sign=sign,
                                extra=extra_headers or {})

    async def deliver_interaction(self, url: str, payload: JsonDict, *, signing_secret: str | None = None,
                                  timestamp: int | None = None, sign: bool = True) -> Delivery:
        """POSTs `payload=<json>` form-encoded, as Slack sends block_actions and message_action."""
        return await self._post(url, events.interaction_body(payload), "application/x-www-form-urlencoded",
                                signing_secret=signing_secret, timestamp=timestamp, sign=sign, extra={})

    async def deliver_raw(self, url: str, body: bytes, *, content_type: str = "application/json",
                          signing_secret: str | None = None, timestamp: int | None = None, sign: bool = True,
                          extra_headers: dict[str, str] | None = None) -> Delivery:
        """POSTs any bytes, signed as Slack signs a body (malformed JSON, forged payloads), or wrongly signed."""
        return await self._post(url, body, content_type, signing_secret=signing_secret, timestamp=timestamp,
                                sign=sign, extra=extra_headers or {})

    async def deliver_url_verification(self, url: str, *, challenge: str = "emulator-challenge",
                                       signing_secret: str | None = None, sign: bool = True) -> Delivery:
        body = json.dumps({"token": "emulator-verification-token", "challenge": challenge,
                           "type": "url_verification"}).encode()
        return await self._post(url, body, "application/json", signing_secret=signing_secret,
                                timestamp=None, sign=sign, extra={})

    async def _post(self, url: str, body: bytes, content_type: str, *, signing_secret: str | None,
                    timestamp: int | None, sign: bool, extra: dict[str, str]) -> Delivery:
        assert self._session is not None, "start the emulator first"
        return await events.post_signed(
            self._session, url, body=body, content_type=content_type,
            signing_secret=signing_secret or self.signing_secret, timestamp=timestamp, sign=sign,
            extra_headers=extra, timeout_s=DELIVERY_TIMEOUT_S)

    # --- Socket Mode ---
    async def wait_socket_connected(self, *, timeout_s: float = SOCKET_ACK_TIMEOUT_S) -> bool:
        return await self._socket.wait_connected(timeout_s=timeout_s)

    @property
    def socket_connection_count(self) -> int:
        return self._socket.connection_count

    async def push_socket_event(
        self, payload: JsonDict, *, type: EnvelopeType = "events_api",
        timeout_s: float = SOCKET_ACK_TIMEOUT_S, retry_attempt: int = 0, retry_reason: str = "",
        accepts_response_payload: bool | None = None,
    ) -> SocketAck | None:
        """Sends an envelope around `payload` (an event_callback or an interaction payload).

        Waits up to `timeout_s` for a connection and the client's ack; None when none came.
        """
        return await self._socket.push(
            payload, envelope_type=type, timeout_s=timeout_s, retry_attempt=retry_attempt,
            retry_reason=retry_reason,
            accepts_response_payload=(type != "events_api") if accepts_response_payload is None
            else accepts_response_payload,
        )

    async def push_socket_event_until_acked(
        self, payload: JsonDict, *, timeout_s: float = SOCKET_ACK_TIMEOUT_S,
        retry_delays_s: tuple[float, ...] = EVENT_RETRY_DELAYS_S,
    ) -> list[SocketAck | None]:
        """An events_api envelope pushed as Slack does: again (retry_attempt 1, 2, 3, reason "timeout") while
        no ack comes within `timeout_s`; every push's ack or None, in order."""
        acks: list[SocketAck | None] = []
        for attempt in range(len(retry_delays_s) + 1):
            if attempt:
                await asyncio.sleep(retry_delays_s[attempt - 1] * self.time_scale)
            ack = await self.push_socket_event(payload, timeout_s=timeout_s, retry_attempt=attempt,
                                               retry_reason="timeout" if attempt else "")
            acks.append(ack)
            if ack is not None:
                break
        return acks

    async def request_socket_refresh(self) -> None:
        await self._socket.request_refresh()


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Query string, then form or JSON body: slack_sdk uses all three depending on the method."""
    params: dict[str, Any] = dict(request.query)
    if not request.can_read_body:
        return params
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return params
        if isinstance(body, dict):
            params.update(body)
    else:
        form = await request.post()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


def _clicked_element(blocks: list[JsonDict], action_id: str, value: str) -> tuple[str | None, str, JsonDict | None] | None:
    """(block_id, element type, the clicked text) of the element a click on `action_id` with `value` hits."""
    for block in blocks:
        for element in block.get("elements") or []:
            if not isinstance(element, dict) or element.get("action_id") != action_id:
                continue
            if element.get("type") == "feedback_buttons":
                side = next((element[s] for s in ("positive_button", "negative_button")
                             if isinstance(element.get(s), dict) and element[s].get("value") == value), None)
                return block.get("block_id"), "feedback_buttons", (side or {}).get("text")
            return block.get("block_id"), str(element.get("type") or "button"), element.get("text")
    return None


def _nonce(url: str) -> str:
    """The nonce a response_url the emulator issued carries (its `n` query parameter)."""
    return parse_qs(urlsplit(url).query).get("n", [""])[0]


def _peer(request: web.Request) -> str:
    """The client's end of the request's TCP connection."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""
