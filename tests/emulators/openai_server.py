"""A scriptable OpenAI-compatible HTTP server on 127.0.0.1 for tests (chat, embeddings, models)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, Union

from aiohttp import web

DEFAULT_REPLY_TEXT = "ok"
DEFAULT_EMBEDDING_DIM = 384
# A stalled reply waits at most this long for the client to give up, so nothing can hang forever.
STALL_MAX_S = 30.0
# aiohttp waits this long for running handlers when the emulator stops.
SHUTDOWN_TIMEOUT_S = 1.0
ARGUMENT_PIECE_CHARS = 5
CHARS_PER_TOKEN = 4

FaultKind = Literal["500", "429", "stall", "cut"]


@dataclass(frozen=True)
class Text:
    """A plain text reply, streamed in pieces of `chunk_chars` characters."""

    text: str
    _: KW_ONLY
    chunk_chars: int = 8
    delay_s: float = 0.0


@dataclass(frozen=True)
class Call:
    """One tool call; `arguments` is the raw JSON string sent, malformed on purpose if a test wants."""

    name: str
    arguments: str = "{}"
    _: KW_ONLY
    id: str | None = None


@dataclass(frozen=True)
class ToolCalls:
    """A reply asking for tool calls, optionally preceded by some text."""

    calls: Sequence[Call]
    _: KW_ONLY
    text: str = ""


@dataclass(frozen=True)
class JSON:
    """A structured-output reply: the content is `json.dumps(obj)`."""

    obj: Any
    _: KW_ONLY
    chunk_chars: int = 8


@dataclass(frozen=True)
class Fault:
    """A failure: HTTP 500, HTTP 429 with Retry-After, a stall after `text`, or a cut after `text`."""

    kind: FaultKind
    _: KW_ONLY
    text: str = "Partial answer "
    retry_after_s: float = 0.05


Reply = Union[Text, ToolCalls, JSON, Fault]
ReplyFn = Callable[[dict[str, Any]], Reply]


class OpenAIEmulator:
    """Serves the OpenAI chat/embeddings/models API from scripted replies; records what it receives."""

    def __init__(self, *, embedding_dim: int = DEFAULT_EMBEDDING_DIM, api_key: str | None = None) -> None:
        self.embedding_dim = embedding_dim
        # When set, requests must carry this bearer token (lets tests exercise auth failures).
        self.api_key = api_key
        self.models: list[str] = ["gpt-4o-mini", "text-embedding-3-small"]
        self.chat_requests: list[dict[str, Any]] = []
        self.embedding_calls = 0
        self.embedding_inputs: list[list[str]] = []
        self._queue: deque[Reply] = deque()
        self._reply_fn: ReplyFn | None = None
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next chat requests, consumed in order."""
        self._queue.extend(replies)

    def script_fn(self, fn: ReplyFn) -> None:
        """Answer with `fn(request_body)` whenever the queue is empty."""
        self._reply_fn = fn

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        # Release stalled handlers first so the runner's cleanup does not wait on them.
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> OpenAIEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- request handling -------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        if self._queue:
            return self._queue.popleft()
        if self._reply_fn is not None:
            return self._reply_fn(body)
        return Text(DEFAULT_REPLY_TEXT)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        body = await request.json()
        self.chat_requests.append(body)
        reply = self._next_reply(body)
        if isinstance(reply, Fault) and reply.kind == "500":
            return _error(500, "The server had an error while processing your request.", "server_error")
        if isinstance(reply, Fault) and reply.kind == "429":
            headers = {
                "Retry-After": str(max(1, math.ceil(reply.retry_after_s))),
                "retry-after-ms": str(int(reply.retry_after_s * 1000)),
            }
            return _error(429, "Rate limit reached.", "rate_limit_exceeded", headers=headers)
        if body.get("stream"):
            return await self._stream_chat(request, body, reply)
        return await self._plain_chat(request, body, reply)

    async def _plain_chat(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        if isinstance(reply, Fault):
            if reply.kind == "stall":
                await self._stall()
            _cut(request)
            return web.Response(status=500)
        text, calls = _content(reply)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {"id": _call_id(call, i), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for i, call in enumerate(calls)
            ]
        completion = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
            "usage": _usage(body, max(1, -(-len(text) // CHARS_PER_TOKEN)) + len(calls)),
        }
        return web.json_response(completion)

    async def _stream_chat(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        model = str(body.get("model", ""))
        sent = 0

        async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            nonlocal sent
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            sent += 1

        await send({"role": "assistant", "content": ""})
        text, calls = _content(reply)
        chunk_chars, delay_s = _pacing(reply)
        for piece in _pieces(text, chunk_chars):
            if delay_s:
                await asyncio.sleep(delay_s)
            await send({"content": piece})

        if isinstance(reply, Fault):
            if reply.kind == "stall":
                await self._stall()
            _cut(request)
            return response

        for index, call in enumerate(calls):
            await send({"tool_calls": [{"index": index, "id": _call_id(call, index), "type": "function",
                                        "function": {"name": call.name, "arguments": ""}}]})
            for piece in _pieces(call.arguments, ARGUMENT_PIECE_CHARS):
                await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        await send({}, "tool_calls" if calls else "stop")

        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": model, "choices": [], "usage": _usage(body, sent)}
            await response.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _stall(self) -> None:
        try:
            await asyncio.wait_for(self._closing.wait(), STALL_MAX_S)
        except TimeoutError:
            pass

    async def _embeddings(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        body = await request.json()
        raw = body.get("input", [])
        inputs = [raw] if isinstance(raw, str) else [str(item) for item in raw]
        self.embedding_calls += 1
        self.embedding_inputs.append(inputs)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector = embed_text(text, self.embedding_dim)
            encoded: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(-(-len(text) // CHARS_PER_TOKEN) for text in inputs)
        return web.json_response({
            "object": "list",
            "data": data,
            "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        return web.json_response({
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "emulator"} for name in self.models],
        })


def embed_text(text: str, dim: int) -> list[float]:
    """Hashed bag-of-words, L2-normalised: texts sharing words get a high cosine similarity."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "little") % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        # An empty text still gets a valid unit vector so cosine distance stays defined.
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


def _content(reply: Reply) -> tuple[str, Sequence[Call]]:
    if isinstance(reply, ToolCalls):
        return reply.text, reply.calls
    if isinstance(reply, JSON):
        return json.dumps(reply.obj), ()
    return reply.text, ()


def _pacing(reply: Reply) -> tuple[int, float]:
    if isinstance(reply, Text):
        return reply.chunk_chars, reply.delay_s
    if isinstance(reply, JSON):
        return reply.chunk_chars, 0.0
    return 8, 0.0


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_id(call: Call, index: int) -> str:
    return call.id or f"call_{index}_{hashlib.sha1(call.name.encode()).hexdigest()[:8]}"


def _usage(body: dict[str, Any], completion_tokens: int) -> dict[str, int]:
    prompt_chars = sum(len(json.dumps(message.get("content") or "")) for message in body.get("messages", []))
    prompt_tokens = max(1, prompt_chars // CHARS_PER_TOKEN)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _error(status: int, message: str, code: str, *, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": code, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def _cut(request: web.Request) -> None:
    # Dropping the socket mid-body is what a crashed proxy or provider looks like to the client.
    if request.transport is not None:
        request.transport.close()
