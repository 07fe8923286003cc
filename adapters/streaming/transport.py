"""What the streamer needs from a platform: post and edit a message; which failures mean "retry"."""

from __future__ import annotations

import asyncio
from typing import Protocol

import aiohttp

DEFAULT_RETRY_AFTER_S = 1.0
# Failures of the connection itself: worth the same call again, like a 5xx.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError)


class RateLimited(Exception):
    """The platform answered 429; nothing may be sent on that budget for `retry_after_s` seconds.

    `wide`: the limit may be wider than the call's own budget (unknown scope, or said to be global);
    False only when the platform said the limit was the route's own."""

    def __init__(self, retry_after_s: float, detail: str = "rate limited", *, wide: bool = True) -> None:
        self.retry_after_s = max(0.0, float(retry_after_s))
        self.wide = wide
        super().__init__(f"{detail} (retry after {self.retry_after_s:g} s)")


class TransientSendError(Exception):
    """A failure worth retrying as is: 5xx, connection reset, timeout."""


class PermanentSendError(Exception):
    """A failure the platform documents as final for this call (`code`: the platform's name for it), or, with
    `team_wide`, for every call to that workspace or bot (a revoked token).

    The one place "permanent" is decided for every platform: each transport raises this (or a subclass that
    also keeps its SDK's exception type) for its documented codes only; `is_permanent` is the rule callers use.
    """

    def __init__(self, detail: str, *, code: str, team_wide: bool = False) -> None:
        self.code = code
        self.team_wide = team_wide
        super().__init__(detail)


def is_permanent(error: BaseException) -> bool:
    """Whether a failed delivery may be given up: only a documented permanent error; a 429, a 5xx, a dropped
    connection or an exception nobody documented are all "later"."""
    return isinstance(error, PermanentSendError)


def classify_failure(
    *, status: int, retry_after_s: float | None, detail: str, wide: bool = True
) -> RateLimited | TransientSendError | None:
    """The one rule for every platform: 429 → RateLimited (Retry-After, else a second), 5xx → retry as is, else None (permanent)."""
    if status == 429:
        return RateLimited(DEFAULT_RETRY_AFTER_S if retry_after_s is None else retry_after_s, detail, wide=wide)
    if status >= 500:
        return TransientSendError(detail)
    return None


def parse_retry_after(raw: object) -> float | None:
    """A Retry-After header value in seconds, or None when absent or unreadable."""
    try:
        return max(0.0, float(raw)) if raw is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


class LiveText(str):
    """A streaming update as shown (the str: text, cursor and status line) that also says what it is made
    of, for a transport that sends only what is new (Slack's native streams append text and show the
    status as a task). Final texts are plain str: a transport tells them apart by this type."""

    body: str  # the message's answer text so far, without cursor or status ("" while only the placeholder shows)
    status: str | None

    def __new__(cls, shown: str, *, body: str, status: str | None) -> LiveText:
        text = super().__new__(cls, shown)
        text.body = body
        text.status = status
        return text


class MessageTransport(Protocol):
    """Creates and edits one platform's messages; renders and escapes the plain text it is given.

    Raise `RateLimited` on 429 and `TransientSendError` on other retryable failures; any other
    exception counts as a permanent failure of that one call.
    """

    async def post(self, text: str, *, key: str | None = None) -> str:
        """Creates a message showing `text` and returns its id.

        `key` marks the message as one part of one answer ("<answer id>:<part>"), so that a retry after
        a crash finds it on the platform instead of posting it twice (Slack message metadata, Discord
        message nonce); None where no retry will look for it."""
        ...

    async def edit(self, message_id: str, text: str) -> None:
        """Replaces the text of the message `message_id`."""
        ...
