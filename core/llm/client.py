"""Calls an OpenAI-compatible chat API: streams text, assembles tool calls, maps failures to LLMError."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
from openai.types.chat import ChatCompletion

from core.events import Usage
from core.llm.errors import (
    LLMError,
    bad_response_error,
    from_exception,
    idle_timeout_error,
    request_timeout_error,
    stream_cut_error,
)
from core.llm.models import ModelInfo
from core.llm.results import Completion, TextPiece, ToolCallRequest
from core.text_safety import storable

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.25
# A provider's Retry-After is honoured up to this; longer waits are better reported to the user.
MAX_RETRY_AFTER_S = 5.0
# Local servers (Ollama, vLLM) need no key, but the client insists on one.
NO_API_KEY = "none"
# The SDK's typed create() walks every message and part in Python (its TypedDict transform), on the event loop:
# thousands of history messages stalled it. Our params are JSON already, so they are posted as they are.
CHAT_COMPLETIONS_PATH = "/chat/completions"
_POST_OPTIONS: dict[str, Any] = {"security": {"bearer_auth": True}}
# Reasoning models take `max_completion_tokens` and refuse a custom temperature.
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


class LLMClient:
    """One connection pool to one OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        request_timeout_s: float,
        idle_timeout_s: float,
        max_retries: int = 2,
        retry_backoff_s: float = RETRY_BACKOFF_S,
    ) -> None:
        self._request_timeout_s = request_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._max_retries = max(0, max_retries)
        self._retry_backoff_s = retry_backoff_s
        self._display_url = _display_url(base_url)
        # The SDK's own retries and timeouts are off/loose: ours know whether text already streamed.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or NO_API_KEY,
            max_retries=0,
            timeout=max(request_timeout_s, idle_timeout_s) * 2,
        )

    async def stream(
        self,
        *,
        model: ModelInfo,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[TextPiece | Completion]:
        """Yield TextPieces as text arrives, then exactly one Completion; raise LLMError on failure."""
        params = _params(model, messages, tools, response_format, temperature, max_tokens)
        attempt = 0
        while True:
            assembly = _Assembly()
            try:
                async for piece in self._stream_once(params, assembly):
                    yield piece
                yield assembly.completion()
                return
            except LLMError as error:
                # Once the user has seen text (or a tool call began), a retry would duplicate it.
                if assembly.received_output or not error.retryable or attempt >= self._max_retries:
                    raise
                attempt += 1
                await self._wait_before_retry(attempt, error)

    async def complete(
        self,
        *,
        model: ModelInfo,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One non-streamed call (used for structured output); retried on transient failures."""
        params = _params(model, messages, tools, response_format, temperature, max_tokens)
        attempt = 0
        while True:
            try:
                return await self._complete_once(params)
            except LLMError as error:
                if not error.retryable or attempt >= self._max_retries:
                    raise
                attempt += 1
                await self._wait_before_retry(attempt, error)

    async def check(self) -> str:
        """A one-line status for `doctor`; raises LLMError when the endpoint does not answer."""
        try:
            async with asyncio.timeout(self._request_timeout_s):
                page = await self._client.models.list()
        except TimeoutError:
            raise request_timeout_error() from None
        except openai.NotFoundError:
            return f"LLM endpoint {self._display_url} answers (it does not list models)"
        except Exception as exc:
            raise from_exception(exc) from exc
        return f"LLM endpoint {self._display_url} answers ({len(page.data)} models listed)"

    async def aclose(self) -> None:
        await self._client.close()

    # --- one attempt ------------------------------------------------------------------------

    async def _stream_once(self, params: dict[str, Any], assembly: _Assembly) -> AsyncIterator[TextPiece]:
        try:
            async with asyncio.timeout(self._request_timeout_s):
                stream = await self._client.post(
                    CHAT_COMPLETIONS_PATH, cast_to=ChatCompletion, options=_POST_OPTIONS,
                    body={**params, "stream": True, "stream_options": {"include_usage": True}},
                    # Chunks as parsed JSON (`object`): the SDK's model building took ~160 µs of the loop per chunk.
                    stream=True, stream_cls=openai.AsyncStream[object],
                )
        except TimeoutError:
            raise request_timeout_error() from None
        except Exception as exc:
            raise from_exception(exc) from exc
        try:
            while True:
                try:
                    # Per chunk, so a stream that goes quiet fails after the idle timeout.
                    async with asyncio.timeout(self._idle_timeout_s):
                        chunk = await stream.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise idle_timeout_error(self._idle_timeout_s) from None
                except openai.APIConnectionError as exc:
                    # The request was answered and the body broke off: a cut stream, not an unreachable service.
                    raise stream_cut_error() from exc
                except Exception as exc:
                    raise from_exception(exc) from exc
                text = assembly.add(chunk)
                if text:
                    yield TextPiece(text=text)
        finally:
            await stream.close()
        if assembly.finish_reason is None:
            # The body ended without a finish reason: the connection was dropped mid-answer.
            raise stream_cut_error()

    async def _complete_once(self, params: dict[str, Any]) -> Completion:
        try:
            async with asyncio.timeout(self._request_timeout_s):
                response = await self._client.post(
                    CHAT_COMPLETIONS_PATH, cast_to=ChatCompletion, options=_POST_OPTIONS, body=params
                )
        except TimeoutError:
            raise request_timeout_error() from None
        except Exception as exc:
            raise from_exception(exc) from exc
        if not response.choices:
            raise bad_response_error()
        choice = response.choices[0]
        calls = tuple(
            ToolCallRequest(
                id=call.id or _new_call_id(),
                name=storable(call.function.name or ""),
                arguments=storable(call.function.arguments or ""),
            )
            for call in choice.message.tool_calls or ()
            if getattr(call, "function", None) is not None
        )
        return Completion(
            text=storable(choice.message.content or ""),
            tool_calls=calls,
            usage=_usage(response.usage),
            finish_reason=choice.finish_reason,
        )

    async def _wait_before_retry(self, attempt: int, error: LLMError) -> None:
        delay_s = self._retry_backoff_s * 2 ** (attempt - 1)
        if error.retry_after_s is not None:
            delay_s = max(delay_s, min(error.retry_after_s, MAX_RETRY_AFTER_S))
        log.warning("LLM call failed (%s, status %s); retry %d in %.2fs", error.kind, error.status, attempt, delay_s)
        await asyncio.sleep(delay_s)


@dataclass
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _Assembly:
    """Accumulates one streamed reply: text, tool-call deltas by index, usage, finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _ToolCallParts] = {}
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.received_output = False

    def add(self, chunk: Any) -> str:
        """Take in one chunk (its JSON as parsed); return the new answer text it carried (maybe empty)."""
        if not isinstance(chunk, dict):
            return ""
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage_of(chunk["usage"])
        new_text = ""
        for choice in _dicts(chunk.get("choices")):
            if choice.get("index") not in (0, None):
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            for call in _dicts(delta.get("tool_calls")):
                self._add_call_delta(call)
            content = delta.get("content")
            if content and isinstance(content, str):
                # The model's words are stored and shown like any outside text (a page can make it echo a NUL).
                content = storable(content)
                self.text.append(content)
                self.received_output = True
                new_text += content
        return new_text

    def _add_call_delta(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            # Some servers omit the index: a delta with an id starts a new call, else continues the last.
            index = len(self.calls) if delta.get("id") or not self.calls else max(self.calls)
        parts = self.calls.setdefault(index, _ToolCallParts())
        self.received_output = True
        if delta.get("id"):
            parts.id = str(delta["id"])
        function = delta.get("function")
        if not isinstance(function, dict):
            return
        name, arguments = function.get("name"), function.get("arguments")
        if name and isinstance(name, str) and name != parts.name:
            parts.name = name if not parts.name else parts.name + name
        if arguments and isinstance(arguments, str):
            parts.arguments.append(arguments)

    def completion(self) -> Completion:
        calls = tuple(
            ToolCallRequest(id=storable(parts.id) or _new_call_id(), name=storable(parts.name),
                            arguments=storable("".join(parts.arguments)))
            for _, parts in sorted(self.calls.items())
        )
        return Completion(text="".join(self.text), tool_calls=calls, usage=self.usage, finish_reason=self.finish_reason)


def _params(
    model: ModelInfo,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    response_format: dict[str, Any] | None,
    temperature: float | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    reasoning = bool(_REASONING_MODEL.match(model.upstream_id.rsplit("/", 1)[-1].lower()))
    params: dict[str, Any] = {"model": model.upstream_id, "messages": list(messages)}
    if tools:
        params["tools"] = list(tools)
    if response_format is not None:
        params["response_format"] = response_format
    if temperature is not None and not reasoning:
        params["temperature"] = temperature
    if max_tokens is not None and max_tokens > 0:
        params["max_completion_tokens" if reasoning else "max_tokens"] = max_tokens
    return params


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _usage_of(usage: dict[str, Any]) -> Usage:
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Usage(prompt_tokens=prompt if isinstance(prompt, int) else 0,
                 completion_tokens=completion if isinstance(completion, int) else 0)


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0)


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _display_url(base_url: str) -> str:
    """The base URL without credentials or query, safe to print."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
