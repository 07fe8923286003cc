"""Slack Web API calls for answers: posts and edits through AsyncWebClient, errors as retry signals, and the
bot's own rate budgets (chat.update per workspace, chat.postMessage per channel) on Slack time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import (
    CONNECTION_ERRORS, Clock, Priority, RateBudget, TransientSendError, classify_failure, parse_retry_after,
)
from adapters.streaming.rate_budget import (
    BURST_SHARE_OF_MINUTE, LEARNED_RATE_FLOOR_PER_S, PLATFORM_BURST_RESERVE_CALLS, BudgetMap,
)
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
# conversations.replies and conversations.history (reading a thread or channel): Tier 3, about 50 calls
# a minute each, per workspace.
READ_CALLS_PER_MINUTE = 50.0
# Where the bot starts when SLACK_WORKSPACE_POSTS_PER_MINUTE is unset (Slack gives no number); 429s
# teach it the real limit. Five posts a second is far more than a team's answers need, and close
# enough to a low limit that two overloads find it.
UNKNOWN_WORKSPACE_POSTS_PER_MINUTE = 300
# An unknown limit is probed with a small burst: a burst of answers then costs a few 429s, not dozens
# sent together before the first one comes back.
UNKNOWN_WORKSPACE_POSTS_BURST = 10.0
ANSWER_PART_EVENT = "relaybot_answer_part"
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

    def __init__(self, *, clock: Clock, share: float, workspace_posts_per_minute: int | None = None) -> None:
        self._clock = clock
        self._share = share
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

    def _new_read(self, key: tuple[str, str]) -> RateBudget:
        return RateBudget.per_minute(READ_CALLS_PER_MINUTE, share=self._share, clock=self._clock)

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


def translate_error(exc: BaseException, *, time_scale: float) -> BaseException:
    """A SlackApiError or connection error as RateLimited / TransientSendError (else unchanged).

    `Retry-After` is in real seconds; budgets run on Slack time, hence the scale.
    """
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
        return signal or exc
    if isinstance(exc, CONNECTION_ERRORS):
        return TransientSendError(f"could not reach Slack: {exc!r}")
    return exc


async def send_paced(
    call: Callable[[], Awaitable[T]], *, budget: RateBudget, clock: ScaledClock, key: Hashable = None,
    priority: Priority = Priority.FINAL,
) -> T:
    """One Slack call outside a stream (approval, sources, notice, repair), paced by `budget` and retried."""
    return await paced(
        call, budget=budget, clock=clock, key=key, priority=priority,
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


class SlackTransport:
    """Posts and edits the messages of one answer: in one channel, in one thread (or top level), as Markdown
    Slack renders itself (`markdown_text`)."""

    def __init__(self, client: AsyncWebClient, *, channel: str, thread_ts: str | None, time_scale: float = 1.0) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._time_scale = time_scale

    async def post(self, text: str, *, key: str | None = None) -> str:
        try:
            response = await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, markdown_text=markdown_text(text),
                unfurl_links=False, unfurl_media=False, **({"metadata": part_metadata(key)} if key else {}),
            )
        except Exception as exc:
            raise translate_error(exc, time_scale=self._time_scale) from exc
        return str(response["ts"])

    async def edit(self, message_id: str, text: str) -> None:
        try:
            await self._client.chat_update(channel=self._channel, ts=message_id, markdown_text=markdown_text(text))
        except Exception as exc:
            raise translate_error(exc, time_scale=self._time_scale) from exc
