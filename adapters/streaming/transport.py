"""What the streamer needs from a platform: post and edit a message; errors that mean retry."""

from __future__ import annotations

from typing import Protocol


class RateLimited(Exception):
    """The platform answered 429; nothing may be sent on that budget for `retry_after_s` seconds."""

    def __init__(self, retry_after_s: float, detail: str = "rate limited") -> None:
        self.retry_after_s = max(0.0, float(retry_after_s))
        super().__init__(f"{detail} (retry after {self.retry_after_s:g} s)")


class TransientSendError(Exception):
    """A failure worth retrying as is: 5xx, connection reset, timeout."""


class MessageTransport(Protocol):
    """Creates and edits one platform's messages; renders and escapes the plain text it is given.

    Raise `RateLimited` on 429 and `TransientSendError` on other retryable failures; any other
    exception counts as a permanent failure of that one call.
    """

    async def post(self, text: str) -> str:
        """Creates a message showing `text` and returns its id."""
        ...

    async def edit(self, message_id: str, text: str) -> None:
        """Replaces the text of the message `message_id`."""
        ...
