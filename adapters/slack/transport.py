"""Posts and edits answer messages through AsyncWebClient; Slack errors become retry signals."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import RateBudget, RateLimited, TransientSendError
from adapters.streaming.send import send_paced as paced

from .budgets import ScaledClock
from .rendering import message_text

logger = logging.getLogger(__name__)

T = TypeVar("T")
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
DEFAULT_RETRY_AFTER_S = 1.0


def translate_error(exc: BaseException, *, time_scale: float) -> BaseException:
    """A SlackApiError or connection error as RateLimited / TransientSendError (else unchanged).

    `Retry-After` is in real seconds; budgets run on Slack time, hence the scale.
    """
    if isinstance(exc, SlackApiError):
        response = exc.response
        error = str(response.get("error", "")) if response is not None else ""
        status = response.status_code if response is not None else 0
        if status == 429 or error == "ratelimited":
            headers = response.headers if response is not None else {}
            raw = headers.get("Retry-After") or headers.get("retry-after") or DEFAULT_RETRY_AFTER_S
            return RateLimited(float(raw) / time_scale, detail=f"Slack said ratelimited ({error})")
        if status >= 500 or error in TRANSIENT_ERRORS:
            return TransientSendError(f"Slack answered {status} {error}")
        return exc
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)):
        return TransientSendError(f"could not reach Slack: {exc!r}")
    return exc


class SlackTransport:
    """The MessageTransport of one answer: messages in one channel, in one thread (or top level)."""

    def __init__(
        self, client: AsyncWebClient, *, channel: str, thread_ts: str | None, time_scale: float = 1.0
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._time_scale = time_scale

    async def post(self, text: str) -> str:
        try:
            response = await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=message_text(text),
                unfurl_links=False, unfurl_media=False,
            )
        except Exception as exc:
            raise translate_error(exc, time_scale=self._time_scale) from exc
        return str(response["ts"])

    async def edit(self, message_id: str, text: str) -> None:
        try:
            await self._client.chat_update(channel=self._channel, ts=message_id, text=message_text(text))
        except Exception as exc:
            raise translate_error(exc, time_scale=self._time_scale) from exc


async def send_paced(
    call: Callable[[], Awaitable[T]],
    *,
    budget: RateBudget,
    clock: ScaledClock,
    key: Hashable = None,
) -> T:
    """One Slack call outside a stream (approval, sources, notice), paced by `budget` and retried."""
    return await paced(
        call, budget=budget, clock=clock, key=key, translate=lambda exc: translate_error(exc, time_scale=clock.time_scale)
    )
