"""POST /v1/chat/completions and GET /v1/models in the OpenAI wire format, over the same engine (agent types as models)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from aiohttp import web

from adapters.http.api.answers import ApiAnswers
from adapters.http.api.auth import authenticate, quota_error, refusal_of, scoped_sources
from adapters.http.api.body import field, read_json
from adapters.http.api.errors import ApiError, bad_request
from adapters.http.api.events import ApiEvent, source_item, source_json
from adapters.http.api.openai_tools import (
    ToolRound, actions, client_tools, content_text, round_stream, tool_calls, tool_round,
)
from adapters.http.api.sse import KEEPALIVE, Batcher, open_stream, send
from adapters.http.api.streams import StreamHub
from core.agents.factory import AGENTS
from core.api_access import ApiKey
from core.citations import CitedAnswer, HeldCitations, cite
from core.events import SourceItem
from core.requests import PriorMessage

CREATED = int(time.time())
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# What a run that paused on a built-in tool needing approval says here without `tools` (agent mode returns the
# call for the client to confirm instead): /v1 never runs such a call silently.
APPROVAL_NOT_HERE = (
    "\n\n(This answer needs a tool that must be approved first, which this endpoint cannot ask for; "
    "use /api/answer to approve it.)"
)


class OpenAIRoutes:
    def __init__(self, *, answers: ApiAnswers, hub: StreamHub, max_body_bytes: int, keepalive_s: float) -> None:
        self._answers = answers
        self._hub = hub
        self._max_body = max_body_bytes
        self._keepalive_s = keepalive_s

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_post("/v1/chat/completions", self.completions)

    async def models(self, request: web.Request) -> web.Response:
        await authenticate(request, self._answers.keys)
        return web.json_response({"object": "list", "data": [_model(name) for name in sorted(AGENTS)]})

    async def model(self, request: web.Request) -> web.Response:
        await authenticate(request, self._answers.keys)
        return web.json_response(_model(_agent(request.match_info["model"])))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        key = await authenticate(request, self._answers.keys)
        body = await read_json(request, max_bytes=self._max_body)
        agent = _agent(field(body, "model", str, required=True))
        messages = field(body, "messages", list, required=True)
        if not messages:
            raise bad_request("`messages` must not be empty.")
        stream = field(body, "stream", bool, default=False)
        options = field(body, "stream_options", dict, default={})
        include_usage = field(options, "include_usage", bool, default=False)
        tools = client_tools(field(body, "tools", list))
        response_format = _response_format(field(body, "response_format", dict))
        answered = tool_round(messages)
        if answered is not None:
            # Stateless continuation: the resent tool messages name the pause they answer.
            events, agent_mode = await self._continue(key, answered), True
        else:
            question, context = _messages(messages)
            started = await self._answers.ask(
                key, question=question, conversation_id=None, agent=agent, sources=scoped_sources(key, None),
                context=context, client_tools=tools, response_format=response_format,
            )
            # Played in this request: a client gone mid-answer ends the run (closed with the response).
            events, agent_mode = self._answers.play(key, started), bool(tools)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if stream:
            return await self._stream(request, events, completion_id, agent, include_usage, agent_mode)
        return await self._whole(events, completion_id, agent, agent_mode)

    async def _continue(self, key: ApiKey, answered: ToolRound) -> AsyncIterator[ApiEvent | None]:
        """Answer the pause's calls and play its run under the round's stream; a resend of a round already answered
        replays that stream (a confirmed tool runs at most once per call id)."""
        conversation = await self._answers.conversations.conversation_of(key.id, answered.continuation)
        if conversation is None:
            raise bad_request("No tool call of this key has that id.", "unknown_tool_call")
        view = await self._answers.paused(answered.continuation)
        decided = actions(answered, [(call.call_id, call.client, call.tool) for call in view.calls])
        started = await self._answers.continue_paused(key, conversation, view, decided, lost_ok=True)
        stream_id = round_stream(answered.continuation)
        if started is not None:
            self._hub.start(key.id, lambda: self._answers.play(key, started), stream_id=stream_id)
        elif not await self._hub.knows(stream_id, key.id, 1):
            raise ApiError(409, "These tool calls were answered already, elsewhere than /v1.", "already_continued")
        return self._follow(stream_id, key.id)

    async def _follow(self, stream_id: uuid.UUID, key_id: int) -> AsyncIterator[ApiEvent | None]:
        async for event in self._hub.follow(stream_id, key_id, 0, keepalive_s=self._keepalive_s):
            yield None if event is None else (event.event, event.data)

    async def _whole(self, events: AsyncIterator[Any], completion_id: str, agent: str,
                     agent_mode: bool) -> web.Response:
        reply = _Reply()
        async with aclosing(events):
            async for item in events:
                reply.see(item)
        if reply.error is not None:
            refusal = refusal_of(reply.error)
            if refusal is not None and not reply.text:
                raise quota_error(refusal)
            raise ApiError(503 if reply.error.get("kind") == "temporary" else 502, reply.error.get("message", ""),
                           "answer_failed")
        cited = cite(reply.text, reply.items) if reply.pending is None else None
        message: dict[str, Any] = {"role": "assistant", "content": reply.text if cited is None else cited.text}
        finish = "stop"
        if reply.pending is not None:
            if agent_mode:
                message = {"role": "assistant", "content": reply.text or None, "tool_calls": tool_calls(reply.pending)}
                finish = "tool_calls"
            else:
                await self._answers.engine.approvals.withdraw(reply.pending["continuation_id"])
                message["content"] = reply.text + APPROVAL_NOT_HERE
        return web.json_response({
            "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": agent,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": reply.usage,
            # An extension field (OpenAI clients keep it as an extra): the sources the answer cites, by number.
            "sources": cited_json(cited),
        })

    async def _stream(self, request: web.Request, events: AsyncIterator[Any], completion_id: str,
                      agent: str, include_usage: bool, agent_mode: bool) -> web.StreamResponse:
        response = await open_stream(request)
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": agent,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

        await send(response, data=chunk({"role": "assistant", "content": ""}))
        # The per-token chunk is the same JSON around each text: only the text is encoded per token. Text that
        # comes while a write waits its turn goes out as one chunk (the OpenAI clients join deltas of any size).
        head, _, tail = _encode_json(chunk({"content": "\x00"})).partition('"\\u0000"')
        before, after = f"data: {head}".encode(), f"{tail}\n\n".encode()

        def text_chunk(text: str) -> bytes:
            return before + _encode_json(text).encode() + after

        reply = _Reply()
        # Sources are known when the answer ends: text from where a citation may begin waits for them.
        held = HeldCitations()
        async with Batcher(response, text_event=text_chunk) as out, aclosing(events):
            async for item in events:
                if item is not None and item[0] == "answer_delta":
                    text = item[1]["text"]
                    reply.parts.append(text)
                    ready = held.add(text)
                    if ready:
                        await out.add(ready)
                elif item is None:
                    await out.add(KEEPALIVE)
                else:
                    reply.see(item)
        cited = cite(reply.text, reply.items) if reply.error is None and reply.pending is None else None
        rest = held.flush() if cited is None else held.finish(reply.items)
        if rest:
            await send(response, data=chunk({"content": rest}))
        if reply.error is not None:
            # The OpenAI clients raise an APIError for an `error` object in the stream.
            await send(response, data={"error": {"message": reply.error.get("message", ""), "type": "answer_failed",
                                                 "code": "answer_failed"}})
            await response.write_eof()
            return response
        finish = "stop"
        if reply.pending is not None:
            if agent_mode:
                calls = [{"index": index, **call} for index, call in enumerate(tool_calls(reply.pending))]
                await send(response, data=chunk({"tool_calls": calls}))
                finish = "tool_calls"
            else:
                await self._answers.engine.approvals.withdraw(reply.pending["continuation_id"])
                await send(response, data=chunk({"content": APPROVAL_NOT_HERE}))
        await send(response, data={**chunk({}, finish), "sources": cited_json(cited)})
        if include_usage:
            await send(response, data={"id": completion_id, "object": "chat.completion.chunk", "created": created,
                                       "model": agent, "choices": [], "usage": reply.usage})
        await send(response, data="[DONE]")
        await response.write_eof()
        return response


class _Reply:
    """What a run's API events add up to for one completion: its text, a pause, its usage, or an error."""

    def __init__(self) -> None:
        self.parts: list[str] = []  # the text's deltas, joined once at the end
        self.pending: dict[str, Any] | None = None
        self.usage: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.error: dict[str, Any] | None = None
        self.items: list[SourceItem] = []  # what the answer may cite, from its `sources` event

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def see(self, item: ApiEvent | None) -> None:
        if item is None:
            return
        name, data = item
        if name == "answer_delta":
            self.parts.append(data["text"])
        elif name == "tool_calls_pending":
            self.pending = data
        elif name == "end":
            self.usage = data["usage"]
        elif name == "error":
            self.error = data
        elif name == "sources":
            self.items = [source_item(item) for item in data["items"]]


def cited_json(cited: CitedAnswer | None) -> list[dict[str, Any]]:
    """/v1's `sources` extension: each source the answer cites, under the number it cites it by."""
    if cited is None:
        return []
    return [source_json(c.number, c.item) for c in cited.citations]


def _response_format(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """json_object / json_schema pass to the model (where it supports structured output); text is the default."""
    if value is None or value.get("type") == "text":
        return None
    if value.get("type") == "json_object":
        return {"type": "json_object"}
    if value.get("type") == "json_schema" and isinstance(value.get("json_schema"), dict):
        return {"type": "json_schema", "json_schema": value["json_schema"]}
    raise bad_request("`response_format` must be text, json_object or json_schema (with a `json_schema` object).")


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": CREATED, "owned_by": "relaybot"}


def _agent(model: str) -> str:
    if model not in AGENTS:
        raise ApiError(404, f"The model {model!r} does not exist; models: {', '.join(sorted(AGENTS))}.",
                       "model_not_found")
    return model


def _messages(messages: list[Any]) -> tuple[str, list[PriorMessage]]:
    """The last user message is the question; earlier user and assistant messages are the conversation so far
    (an earlier tool round's calls and results are not: the reply written after it carries what it found)."""
    if not messages:
        raise bad_request("`messages` must not be empty.")
    context: list[PriorMessage] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"`{where}` must be an object with a role.")
        role = message["role"]
        if role in ("system", "developer"):
            continue  # relaybot answers with its own instructions
        if role == "tool":
            continue
        if role not in ("user", "assistant"):
            raise bad_request(f"`{where}.role` {role!r} is not accepted.")
        text = content_text(message.get("content") or "", where)
        if role == "assistant" and not text:
            continue  # a tool-calls-only message
        context.append(PriorMessage(author=role, text=text, is_self=role == "assistant"))
    if not context or context[-1].is_self:
        raise bad_request("The last message must be the user's.")
    return context[-1].text, context[:-1]
