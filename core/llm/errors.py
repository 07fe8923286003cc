"""One error type for every language-model failure, with a sentence a user can act on."""

from __future__ import annotations

import json
from typing import Literal

import openai

from core import wording

LLMErrorKind = Literal[
    "timeout", "connection", "rate_limit", "server", "auth", "not_found",
    "context_length", "bad_request", "bad_response", "stall", "cut",
]


class LLMError(Exception):
    """A language-model call failed; `message` is safe to show users and never holds secrets."""

    def __init__(
        self,
        message: str,
        *,
        kind: LLMErrorKind,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind: LLMErrorKind = kind
        self.retryable = retryable
        self.status = status
        # What the provider asked us to wait before retrying (429 Retry-After), if it said.
        self.retry_after_s = retry_after_s

    def __repr__(self) -> str:
        return f"LLMError(kind={self.kind!r}, status={self.status!r}, retryable={self.retryable!r})"


def idle_timeout_error(idle_timeout_s: float) -> LLMError:
    return LLMError(wording.model_stalled(idle_timeout_s), kind="stall", retryable=True)


def request_timeout_error() -> LLMError:
    return LLMError(wording.model_timed_out(), kind="timeout", retryable=True)


def stream_cut_error() -> LLMError:
    return LLMError(wording.model_reply_cut(), kind="cut", retryable=True)


def bad_response_error() -> LLMError:
    return LLMError(wording.model_reply_unreadable(), kind="bad_response", retryable=True)


def from_exception(exc: BaseException) -> LLMError:
    """Map an openai/transport exception to an LLMError; provider text is left out on purpose."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return request_timeout_error()
    if isinstance(exc, openai.APIConnectionError):
        return LLMError(wording.model_unreachable(), kind="connection", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        return _from_status(exc)
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
        return bad_response_error()
    if isinstance(exc, openai.APIError):
        # An error event inside an otherwise healthy stream: the provider gave up mid-answer.
        return LLMError(wording.model_stream_error(), kind="server", retryable=True)
    return LLMError(wording.model_failed(), kind="server", retryable=True)


def _from_status(exc: openai.APIStatusError) -> LLMError:
    status = exc.status_code
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return LLMError(wording.model_rate_limited(),
                        kind="rate_limit", retryable=True, status=status, retry_after_s=_retry_after_s(exc))
    if status >= 500:
        return LLMError(wording.model_server_error(), kind="server", retryable=True, status=status)
    if status in (401, 403):
        return LLMError(wording.model_key_refused(), kind="auth", retryable=False, status=status)
    if status == 404:
        return LLMError(wording.model_unknown(), kind="not_found", retryable=False, status=status)
    if _error_code(exc) == "context_length_exceeded":
        return LLMError(wording.conversation_too_long(), kind="context_length", retryable=False, status=status)
    return LLMError(wording.model_rejected_request(status), kind="bad_request", retryable=False, status=status)


def _error_code(exc: openai.APIStatusError) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def _retry_after_s(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP-date Retry-After; the caller's own backoff applies
    return None
