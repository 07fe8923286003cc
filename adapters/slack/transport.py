"""The one door to Slack's Web API: every call the bot makes goes through `SlackWeb` (paced on the bot's
own rate budgets, errors translated into retry signals by one rule, posts never re-sent blindly)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import Priority, RateBudget, RateLimited
from adapters.streaming.send import send_paced as paced
from adapters.streaming.transport import PermanentSendError

from .budgets import ScaledClock, SlackBudgets
from .failures import translate_error
from .metadata import is_part, part_metadata, post_metadata
from .render import markdown_text
from .team_clients import SlackTeam, TeamClients
from .team_tokens import TeamKey

# ScaledClock, SlackBudgets and is_part live in budgets.py and metadata.py; surface.py and adapter.py import them here.
__all__ = ["ScaledClock", "SlackBudgets", "SlackTransport", "SlackWeb", "is_part", "send_paced"]

T = TypeVar("T")
# A look-up of a post whose outcome was not seen reads from its attempt less this much: Slack's clock
# (a message's ts) and ours may disagree a little.
LOOKUP_SKEW_S = 60.0
# Pages of one look-up at most: the window starts just before the attempt, so a few pages reach now.
LOOKUP_MAX_PAGES = 20
# Tokens whose auth.test answer is kept (a rotation makes a new token a team every 12 hours): the oldest go first.
IDENTITIES_KEPT = 1024


async def send_paced(
    call: Callable[[], Awaitable[T]], *, budget: RateBudget, clock: ScaledClock, key: Hashable = None,
    priority: Priority = Priority.FINAL, look_up: Callable[[], Awaitable[T | None]] | None = None,
) -> T:
    """One Slack call outside a stream (approval, sources, notice, repair), paced by `budget` and retried."""
    return await paced(
        call, budget=budget, clock=clock, key=key, priority=priority, look_up=look_up,
        translate=lambda exc: translate_error(exc, time_scale=clock.time_scale),
    )


def team_id_of(team: SlackTeam) -> str:
    return team.team_id if isinstance(team, TeamKey) else team


class SlackWeb:
    """The one door to Slack's Web API; nothing else calls the AsyncWebClient (tests/test_architecture.py,
    tests/support/platform_door.py). Every call names its team: it goes with that team's token (TeamClients),
    on that team's budgets.

    Three lanes: `call` paces an idempotent call on a budget and retries it; `post` is chat.postMessage, which
    carries metadata so that a failure whose outcome was not seen is looked up before it is sent again;
    `now` is the deadline lane (views.open within a trigger_id's 3 s, a note to the person who clicked): one
    try, never behind a delivery's budget, only its own 429 pause. `once` is one translated try for the
    streaming transports, which pace themselves."""

    def __init__(self, clients: TeamClients | AsyncWebClient, *, budgets: SlackBudgets, clock: ScaledClock) -> None:
        # One AsyncWebClient: its token is the only team's (a test's, a tool's).
        self.clients = clients if isinstance(clients, TeamClients) else TeamClients.of(clients)
        self.budgets = budgets
        self.clock = clock
        self._identities: dict[str, dict[str, Any]] = {}  # auth.test's answer by token

    async def once(self, team: SlackTeam, method: str, **arguments: Any) -> dict[str, Any]:
        """One try of `method` ("chat.update") with the team's token; Slack's failures translated (RateLimited,
        TransientSendError, SlackPermanentError; SlackNotInstalled when the team has no token, nothing sent).

        A token Slack refuses as revoked or expired is asked for again once: another process may have rotated it
        since this one read it."""
        client = await self.clients.client(team)
        try:
            return await self._send(client, method, arguments)
        except PermanentSendError as exc:
            if not exc.team_wide or (fresh := await self.clients.client(team)) is client:
                raise
            return await self._send(fresh, method, arguments)

    async def _send(self, client: Any, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await getattr(client, method.replace(".", "_"))(**arguments)
        except Exception as exc:
            raise translate_error(exc, time_scale=self.clock.time_scale) from exc
        return dict(response.data) if isinstance(response.data, dict) else {"ok": True}

    async def identity(self, team: SlackTeam) -> dict[str, Any]:
        """auth.test's answer for the team's token (its bot user and bot ids), asked once per token: one try, as
        Bolt's own authorization asks it (an event whose authorize fails is delivered again by Slack)."""
        token = await self.clients.token(team)
        known = self._identities.get(token)
        if known is None:
            known = self._identities[token] = await self.once(team, "auth.test")
            while len(self._identities) > IDENTITIES_KEPT:
                self._identities.pop(next(iter(self._identities)))
        return known

    async def call(
        self, team: SlackTeam, method: str, *, budget: RateBudget, priority: Priority = Priority.FINAL,
        key: Hashable = None, **arguments: Any,
    ) -> dict[str, Any]:
        """An idempotent call (an edit, a delete, a read) in `team`, on `budget` (one of that team's): 429s wait,
        transient failures retry."""
        return await send_paced(
            lambda: self.once(team, method, **arguments), budget=budget, clock=self.clock, key=key, priority=priority
        )

    async def now(self, team_id: SlackTeam, method: str, **arguments: Any) -> dict[str, Any]:
        """A call with a deadline: sent at once or not at all, never waiting behind deliveries. It takes a call of
        the method's own budget in the workspace (its tier): with none left it is not sent (RateLimited, as Slack
        would have refused it); a 429 pauses only that budget."""
        budget = self.budgets.other(team_id_of(team_id), method)
        if not budget.try_acquire(Priority.FINAL):
            raise RateLimited(1.0 / max(budget.refill_per_s, 1e-9), f"{method} is over its budget; not sent")
        try:
            return await self.once(team_id, method, **arguments)
        except RateLimited as exc:
            budget.penalize(exc.retry_after_s, wide=False)
            raise

    async def post(
        self, *, team_id: SlackTeam, channel: str, thread_ts: str | None, key: str | None = None,
        budget: RateBudget | None = None, priority: Priority = Priority.FINAL, post_key: str | None = None,
        attempted_at: float | None = None, before_send: Callable[[], Awaitable[None]] | None = None, **message: Any,
    ) -> dict[str, Any]:
        """chat.postMessage on the channel's budget (or `budget`), retried; `key` names an answer part ("<answer
        id>:<part>"), `post_key` any other post that must appear once ("reminder:<id>"), else the post gets a key
        of its own. After a failure whose outcome was not seen, the post is looked up by its key (from just before
        the attempt) before it is sent again: never twice. `attempted_at` (epoch seconds) is an earlier attempt's,
        made by another call or process: the post is looked up from then before it is sent at all. `before_send` is
        awaited before each attempt, once its budget let it go (a reminder's check that its claim is still held)."""
        metadata = part_metadata(key) if key else post_metadata(post_key or uuid.uuid4().hex)
        since = time.time() if attempted_at is None else attempted_at

        async def look_up() -> dict[str, Any] | None:
            return await self.find(team_id=team_id, channel=channel, thread_ts=thread_ts, metadata=metadata,
                                   since=since)

        if attempted_at is not None and (found := await look_up()) is not None:
            return found

        async def attempt() -> dict[str, Any]:
            if before_send is not None:
                await before_send()
            return await self.once(team_id, "chat.postMessage", channel=channel, thread_ts=thread_ts, metadata=metadata,
                                   **message)

        return await send_paced(
            attempt, budget=budget or self.budgets.post(team_id_of(team_id), channel), clock=self.clock, priority=priority,
            look_up=look_up,
        )

    async def find(
        self, *, team_id: SlackTeam, channel: str, thread_ts: str | None, metadata: dict[str, object], since: float
    ) -> dict[str, Any] | None:
        """The message carrying `metadata` posted after `since` (epoch seconds, less LOOKUP_SKEW_S), or None."""

        def carries(message: dict[str, Any]) -> bool:
            found = message.get("metadata")
            return (isinstance(found, dict) and found.get("event_type") == metadata["event_type"]
                    and found.get("event_payload") == metadata["event_payload"])

        return await self.find_where(team_id=team_id, channel=channel, thread_ts=thread_ts, since=since, match=carries)

    async def find_where(
        self, *, team_id: SlackTeam, channel: str, thread_ts: str | None, since: float,
        match: Callable[[dict[str, Any]], bool],
    ) -> dict[str, Any] | None:
        """The first message posted after `since` (epoch seconds, less LOOKUP_SKEW_S) that `match`es, or None.

        Reads forward from there on the read budget (conversations.replies in a thread, history at top level):
        never the whole thread, which has no newest-first order."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        window: dict[str, Any] = {
            "channel": channel, "include_all_metadata": True, "oldest": f"{max(0.0, since - LOOKUP_SKEW_S):.6f}",
            "limit": self.budgets.page_messages, **({"ts": thread_ts} if thread_ts else {}),
        }
        cursor = ""
        for _ in range(LOOKUP_MAX_PAGES):
            page = {**window, **({"cursor": cursor} if cursor else {})}
            response = await self.call(team_id, method, budget=self.budgets.read(team_id_of(team_id), method), **page)
            for message in response.get("messages") or ():
                if match(dict(message)):
                    return dict(message)
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return None
        return None


class SlackTransport:
    """Posts and edits the messages of one answer (the streamer's transport): in one channel, in one thread (or
    top level), as Markdown Slack renders itself (`markdown_text`). The streamer paces and retries; a keyed post
    whose outcome was not seen (a dropped connection, a timeout, a 5xx) is looked up before it is sent again."""

    def __init__(self, web: SlackWeb, *, team_id: str, channel: str, thread_ts: str | None) -> None:
        self._web = web
        self._team_id = team_id
        self._channel = channel
        self._thread_ts = thread_ts
        self._unseen: dict[str, float] = {}  # key → when a post of it was sent without seeing the outcome

    def attempted_at(self, key: str) -> float | None:
        """When a post of `key` was sent and its outcome not seen (epoch seconds), or None."""
        return self._unseen.get(key)

    async def post(self, text: str, *, key: str | None = None) -> str:
        if key is not None and key in self._unseen:
            found = await self._web.find(
                team_id=self._team_id, channel=self._channel, thread_ts=self._thread_ts, metadata=part_metadata(key),
                since=self._unseen[key],
            )
            if found is not None:
                # It shows the text of that earlier try: it is given this one (kept unseen until it is).
                await self.edit(str(found["ts"]), text)
                self._unseen.pop(key)
                return str(found["ts"])
        first = key is not None and key not in self._unseen
        if key is not None:
            self._unseen.setdefault(key, time.time())
        try:
            response = await self._web.once(
                self._team_id, "chat.postMessage", channel=self._channel, thread_ts=self._thread_ts, **self.content(None, text),
                unfurl_links=False, unfurl_media=False, **({"metadata": part_metadata(key)} if key else {}),
            )
        except (RateLimited, PermanentSendError):
            if first:
                self._unseen.pop(key, None)  # Slack did nothing, and nothing before: the next try needs no look-up
            raise
        if key is not None:
            self._unseen.pop(key, None)
        return str(response["ts"])

    async def edit(self, message_id: str, text: str) -> None:
        await self._web.once(self._team_id, "chat.update", channel=self._channel, ts=message_id,
                             **self.content(message_id, text))

    def content(self, message_id: str | None, text: str) -> dict[str, Any]:
        """What a post (`message_id` None) or an edit of `text` sends: the Markdown alone here; a subclass may add
        the answer's buttons (adapters/slack/controls.py)."""
        return {"markdown_text": markdown_text(text)}
