"""The one door to Slack's Web API: every call the bot makes goes through `SlackWeb` (paced on the bot's
own rate budgets, errors translated into retry signals by one rule, posts never re-sent blindly)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Literal, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import (
    CONNECTION_ERRORS, Clock, Priority, RateBudget, RateLimited, TransientSendError, classify_failure,
    parse_retry_after,
)
from adapters.streaming.transport import PermanentSendError
from adapters.streaming.budget_map import BudgetMap
from adapters.streaming.learned_rate import LEARNED_RATE_FLOOR_PER_S
from adapters.streaming.rate_budget import BURST_SHARE_OF_MINUTE, PLATFORM_BURST_RESERVE_CALLS
from adapters.streaming.send import send_paced as paced

from .render import markdown_text

T = TypeVar("T")
# Slack's own words for "try again": its 5xx-like errors arrive as 200 with ok=false.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
# Tier 3: about 50 chat.update calls a minute for the whole workspace; Slack tolerates short
# bursts over a tier's rate (counted like a token bucket of about this many calls).
EDIT_CALLS_PER_MINUTE = 50.0
EDIT_BURST_CALLS = 10.0
# chat.postMessage: about one a second per channel, with a small burst.
POST_CALLS_PER_S = 1.0
POST_BURST_CALLS = 2.0
# conversations.replies and conversations.history (reading a thread or channel), per workspace, by
# SLACK_HISTORY_TIER: `internal` (Tier 3, about 50 calls a minute, up to 1,000 messages a page) or `limited`
# (commercially distributed apps outside the Marketplace: 1 call a minute, 15 messages a page).
HistoryTier = Literal["internal", "limited"]
READ_CALLS_PER_MINUTE: dict[HistoryTier, float] = {"internal": 50.0, "limited": 1.0}
READ_PAGE_MESSAGES: dict[HistoryTier, int] = {"internal": 200, "limited": 15}
# A look-up of a post whose outcome was not seen reads from its attempt less this much: Slack's clock
# (a message's ts) and ours may disagree a little.
LOOKUP_SKEW_S = 60.0
# Pages of one look-up at most: the window starts just before the attempt, so a few pages reach now.
LOOKUP_MAX_PAGES = 20
# Slack errors that mean "this call will never succeed as it is" (for the call, or the whole team); every
# other failure is retried, however long it takes.
PERMANENT_ERRORS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text", "thread_not_found",
    "message_not_found", "cant_update_message", "cant_delete_message", "edit_window_closed", "restricted_action",
    "restricted_action_thread_only", "restricted_action_read_only_channel", "cannot_reply_to_message",
    "invalid_blocks", "invalid_blocks_format", "invalid_metadata_format", "invalid_arguments", "too_many_attachments",
    "channel_is_archived", "user_not_found", "user_not_in_channel", "expired_trigger_id", "invalid_trigger_id",
    "exchanged_trigger_id", "method_not_supported", "not_allowed_token_type", "missing_scope", "not_authed",
    "account_inactive", "no_permission", "ekm_access_denied", "team_access_not_granted",
})
TEAM_PERMANENT_ERRORS = frozenset({"invalid_auth", "token_revoked", "token_expired", "account_inactive", "team_not_found"})
# Where the bot starts when SLACK_WORKSPACE_POSTS_PER_MINUTE is unset (Slack gives no number); 429s
# teach it the real limit. Five posts a second is far more than a team's answers need, and close
# enough to a low limit that two overloads find it.
UNKNOWN_WORKSPACE_POSTS_PER_MINUTE = 300
# An unknown limit is probed with a small burst: a burst of answers then costs a few 429s, not dozens
# sent together before the first one comes back.
UNKNOWN_WORKSPACE_POSTS_BURST = 10.0
ANSWER_PART_EVENT = "relaybot_answer_part"
POST_EVENT = "relaybot_post"
# A budget not handed out for this long (Slack seconds) is full again, so a fresh one is the same:
# it is dropped, and the maps stay as small as the channels in use.
IDLE_BUDGET_S = 600.0


class ScaledClock:
    """Slack time: `time_scale` 1.0 is real time; 0.05 makes a Slack minute last 3 real seconds.

    Matching an emulator's time scale keeps the bot's budgets and pacing in step with it.
    """

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale

    def now(self) -> float:
        return time.monotonic() / self.time_scale

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) * self.time_scale)


class SlackBudgets:
    """One budget per limit Slack counts; per process, each taking `share` of Slack's rate."""

    def __init__(
        self, *, clock: Clock, share: float, workspace_posts_per_minute: int | None = None,
        history_tier: HistoryTier = "internal",
    ) -> None:
        self._clock = clock
        self._share = share
        self.history_tier: HistoryTier = history_tier
        self._workspace_posts_per_minute = workspace_posts_per_minute
        self._edits: BudgetMap[str] = BudgetMap(self._new_edit, keep_idle_s=IDLE_BUDGET_S)
        self._posts: BudgetMap[tuple[str, str]] = BudgetMap(self._new_post, keep_idle_s=IDLE_BUDGET_S)
        self._workspace_posts: BudgetMap[str] = BudgetMap(self._new_workspace_posts, keep_idle_s=IDLE_BUDGET_S)
        self._reads: BudgetMap[tuple[str, str]] = BudgetMap(self._new_read, keep_idle_s=IDLE_BUDGET_S)

    def edit(self, team_id: str) -> RateBudget:
        return self._edits(team_id)

    def post(self, team_id: str, channel: str) -> RateBudget:
        """chat.postMessage in one channel, counted against the workspace's chat.postMessage budget too."""
        return self._posts((team_id, channel))

    def workspace_posts(self, team_id: str) -> RateBudget:
        """The workspace-wide chat.postMessage limit: configured when known, and learnt from 429s either way."""
        return self._workspace_posts(team_id)

    def read(self, team_id: str, method: str) -> RateBudget:
        """A reading method (conversations.replies, conversations.history) in one workspace."""
        return self._reads((team_id, method))

    def delete(self, team_id: str) -> RateBudget:
        """chat.delete in one workspace: Tier 3 like the reads, and never held up by chat.update's 429s."""
        return self._reads((team_id, "chat.delete"))

    def other(self, team_id: str, method: str) -> RateBudget:
        """Any other method (users.info, views.publish …): Tier 3 at least, on a budget of its own."""
        return self._reads((team_id, method))

    @property
    def page_messages(self) -> int:
        """Messages asked for in one page of conversations.replies / history (the tier's most)."""
        return READ_PAGE_MESSAGES[self.history_tier]

    def _new_read(self, key: tuple[str, str]) -> RateBudget:
        history = key[1] in ("conversations.replies", "conversations.history")
        calls = READ_CALLS_PER_MINUTE[self.history_tier] if history else READ_CALLS_PER_MINUTE["internal"]
        return RateBudget.per_minute(calls, share=self._share, clock=self._clock)

    def _new_edit(self, team_id: str) -> RateBudget:
        return RateBudget.per_minute(
            EDIT_CALLS_PER_MINUTE, share=self._share, clock=self._clock, platform_burst=EDIT_BURST_CALLS
        )

    def _new_post(self, key: tuple[str, str]) -> RateBudget:
        return RateBudget(
            capacity=POST_BURST_CALLS, refill_per_s=POST_CALLS_PER_S * self._share, clock=self._clock,
            parent=self.workspace_posts(key[0]),
        )

    def _new_workspace_posts(self, team_id: str) -> RateBudget:
        told = self._workspace_posts_per_minute
        if told:
            # The burst keeps a few calls back: one sent while the process is busy with many answers
            # reaches Slack bunched with the calls after it. Window-safe still (the refill gains them).
            burst = max(1.0, told * self._share * BURST_SHARE_OF_MINUTE - PLATFORM_BURST_RESERVE_CALLS)
            sized = RateBudget.per_minute(told, share=self._share, clock=self._clock, burst=burst)
            # Trusted at least half-way: 429s of other causes (a busy Slack) never talk it down to a trickle.
            return RateBudget(
                capacity=sized.capacity, refill_per_s=sized.refill_per_s, clock=self._clock, learns=True,
                learned_floor_per_s=sized.refill_per_s / 2, known_limit=True,
            )
        guess = RateBudget.per_minute(UNKNOWN_WORKSPACE_POSTS_PER_MINUTE, share=self._share, clock=self._clock)
        return RateBudget(
            capacity=min(guess.capacity, UNKNOWN_WORKSPACE_POSTS_BURST), refill_per_s=guess.refill_per_s,
            clock=self._clock, learns=True, learned_floor_per_s=LEARNED_RATE_FLOOR_PER_S, known_limit=False,
        )

    @property
    def kept(self) -> int:
        """How many budgets are kept now (posts and edits)."""
        return len(self._posts) + len(self._edits)


class SlackPermanentError(PermanentSendError, SlackApiError):
    """A Slack error documented as permanent for the call (or the team); still a SlackApiError for its callers."""

    def __init__(self, exc: SlackApiError, *, code: str, team_wide: bool) -> None:
        Exception.__init__(self, *exc.args)  # SlackApiError's own text, said once
        self.response = exc.response
        self.code = code
        self.team_wide = team_wide


def translate_error(exc: BaseException, *, time_scale: float) -> BaseException:
    """Slack's failures by the one rule: 429 → RateLimited, a documented permanent error → SlackPermanentError,
    everything else (5xx, an error Slack does not document as final, a dropped connection) → TransientSendError.

    `Retry-After` is in real seconds; budgets run on Slack time, hence the scale.
    """
    if isinstance(exc, (RateLimited, TransientSendError, PermanentSendError)):
        return exc
    if isinstance(exc, SlackApiError):
        response = exc.response
        error = str(response.get("error", "")) if response is not None else ""
        status = response.status_code if response is not None else 0
        if error == "ratelimited":
            status = 429
        elif error in TRANSIENT_ERRORS:
            status = max(status, 503)
        headers = response.headers if response is not None else {}
        retry_after = parse_retry_after(headers.get("Retry-After") or headers.get("retry-after"))
        signal = classify_failure(
            status=status,
            retry_after_s=retry_after / time_scale if retry_after is not None else None,
            detail=f"Slack answered {status} {error}",
        )
        if signal is not None:
            return signal
        if error in PERMANENT_ERRORS or error in TEAM_PERMANENT_ERRORS:
            return SlackPermanentError(exc, code=error, team_wide=error in TEAM_PERMANENT_ERRORS)
        return TransientSendError(f"Slack answered {status} {error or 'an error it does not document as final'}")
    if isinstance(exc, CONNECTION_ERRORS):
        return TransientSendError(f"could not reach Slack: {exc!r}")
    return exc


async def send_paced(
    call: Callable[[], Awaitable[T]], *, budget: RateBudget, clock: ScaledClock, key: Hashable = None,
    priority: Priority = Priority.FINAL, look_up: Callable[[], Awaitable[T | None]] | None = None,
) -> T:
    """One Slack call outside a stream (approval, sources, notice, repair), paced by `budget` and retried."""
    return await paced(
        call, budget=budget, clock=clock, key=key, priority=priority, look_up=look_up,
        translate=lambda exc: translate_error(exc, time_scale=clock.time_scale),
    )


def part_metadata(key: str) -> dict[str, object]:
    """Message metadata naming the answer and part a message shows (what a retry looks for)."""
    answer, _, part = key.rpartition(":")
    return {"event_type": ANSWER_PART_EVENT, "event_payload": {"answer": answer, "part": int(part or 0)}}


def is_part(message: dict[str, object], key: str) -> bool:
    """Whether a message from conversations.history/replies (asked with include_all_metadata) is that part."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != ANSWER_PART_EVENT:
        return False
    return metadata.get("event_payload") == part_metadata(key)["event_payload"]


def post_metadata(key: str) -> dict[str, object]:
    """Message metadata naming any other post (a notice, the sources, an approval), for its look-up."""
    return {"event_type": POST_EVENT, "event_payload": {"post": key}}


class SlackWeb:
    """The one door to Slack's Web API; nothing else calls the AsyncWebClient (tests/test_architecture.py,
    tests/support/platform_door.py).

    Three lanes: `call` paces an idempotent call on a budget and retries it; `post` is chat.postMessage, which
    carries metadata so that a failure whose outcome was not seen is looked up before it is sent again;
    `now` is the deadline lane (views.open within a trigger_id's 3 s, a note to the person who clicked): one
    try, never behind a delivery's budget, only its own 429 pause. `once` is one translated try for the
    streaming transports, which pace themselves."""

    def __init__(self, client: AsyncWebClient, *, budgets: SlackBudgets, clock: ScaledClock) -> None:
        self._client = client
        self.budgets = budgets
        self.clock = clock
        self._paused_until: dict[tuple[str, str], float] = {}

    async def once(self, method: str, **arguments: Any) -> dict[str, Any]:
        """One try of `method` ("chat.update"); Slack's failures translated (RateLimited, TransientSendError,
        SlackPermanentError)."""
        try:
            response = await getattr(self._client, method.replace(".", "_"))(**arguments)
        except Exception as exc:
            raise translate_error(exc, time_scale=self.clock.time_scale) from exc
        return dict(response.data) if isinstance(response.data, dict) else {"ok": True}

    async def call(
        self, method: str, *, budget: RateBudget, priority: Priority = Priority.FINAL, key: Hashable = None,
        **arguments: Any,
    ) -> dict[str, Any]:
        """An idempotent call (an edit, a delete, a read), on `budget`: 429s wait, transient failures retry."""
        return await send_paced(
            lambda: self.once(method, **arguments), budget=budget, clock=self.clock, key=key, priority=priority
        )

    async def now(self, team_id: str, method: str, **arguments: Any) -> dict[str, Any]:
        """A call with a deadline: sent at once, never waiting behind deliveries; a 429 pauses only this lane."""
        lane = (team_id, method)
        if self._paused_until.get(lane, float("-inf")) > self.clock.now():
            raise RateLimited(self._paused_until[lane] - self.clock.now(), f"{method} paused by a 429")
        try:
            return await self.once(method, **arguments)
        except RateLimited as exc:
            self._paused_until[lane] = self.clock.now() + exc.retry_after_s
            raise

    async def post(
        self, *, team_id: str, channel: str, thread_ts: str | None, key: str | None = None,
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
            return await self.once("chat.postMessage", channel=channel, thread_ts=thread_ts, metadata=metadata, **message)

        return await send_paced(
            attempt, budget=budget or self.budgets.post(team_id, channel), clock=self.clock, priority=priority,
            look_up=look_up,
        )

    async def find(
        self, *, team_id: str, channel: str, thread_ts: str | None, metadata: dict[str, object], since: float
    ) -> dict[str, Any] | None:
        """The message carrying `metadata` posted after `since` (epoch seconds, less LOOKUP_SKEW_S), or None."""

        def carries(message: dict[str, Any]) -> bool:
            found = message.get("metadata")
            return (isinstance(found, dict) and found.get("event_type") == metadata["event_type"]
                    and found.get("event_payload") == metadata["event_payload"])

        return await self.find_where(team_id=team_id, channel=channel, thread_ts=thread_ts, since=since, match=carries)

    async def find_where(
        self, *, team_id: str, channel: str, thread_ts: str | None, since: float,
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
            response = await self.call(method, budget=self.budgets.read(team_id, method), **page)
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
                "chat.postMessage", channel=self._channel, thread_ts=self._thread_ts, **self.content(None, text),
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
        await self._web.once("chat.update", channel=self._channel, ts=message_id, **self.content(message_id, text))

    def content(self, message_id: str | None, text: str) -> dict[str, Any]:
        """What a post (`message_id` None) or an edit of `text` sends: the Markdown alone here; a subclass may add
        the answer's buttons (adapters/slack/controls.py)."""
        return {"markdown_text": markdown_text(text)}
