"""POST /api/answer and /api/answer/stream: a question or a continuation in, a JSON answer or SSE events out."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from aiohttp import web

from adapters.http.api.answers import ApiAnswers, Started, ToolAction
from adapters.http.api.auth import authenticate, quota_error, scoped_sources
from adapters.http.api.body import field, read_json, string_list
from adapters.http.api.errors import ApiError, bad_request
from adapters.http.api.events import Summary
from adapters.http.api.openai_tools import client_tools
from adapters.http.api.sse import KEEPALIVE, Batcher, event_bytes, open_stream
from adapters.http.api.streams import ReconnectsFull, StreamHub, event_id, parse_event_id
from core.agents.factory import AGENTS
from core.api_access import ApiKey

log = logging.getLogger(__name__)
DECISIONS = {"approve": True, "reject": False}


class AnswerRoutes:
    def __init__(self, *, answers: ApiAnswers, hub: StreamHub, max_body_bytes: int, keepalive_s: float) -> None:
        self._answers = answers
        self._hub = hub
        self._max_body = max_body_bytes
        self._keepalive_s = keepalive_s

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/api/answer", self.answer)
        app.router.add_post("/api/answer/stream", self.stream)

    async def answer(self, request: web.Request) -> web.Response:
        key = await authenticate(request, self._answers.keys)
        started = await self._start(key, await read_json(request, max_bytes=self._max_body))
        summary = Summary()
        async for _ in self._answers.play(key, started, summary):
            continue  # the summary collects what the events say
        if summary.error is not None and summary.pending is None and not summary.answer:
            if summary.refusal is not None:
                raise quota_error(summary.refusal)  # the first model call did not fit the key's tokens
            status = 503 if summary.error["kind"] == "temporary" else 502
            raise ApiError(status, summary.error["message"], "answer_failed",
                           extra={"conversation_id": started.conversation_id})
        body: dict[str, Any] = {
            "answer": summary.answer, "final_answer": summary.final_answer, "tools": summary.tools,
            "sources": summary.sources, "conversation_id": started.conversation_id,
            "usage": {"prompt_tokens": summary.usage.prompt_tokens, "completion_tokens": summary.usage.completion_tokens,
                      "total_tokens": summary.usage.prompt_tokens + summary.usage.completion_tokens},
        }
        if summary.pending is not None:
            body["pending_approval"] = summary.pending
        if summary.error is not None:
            body["error"] = summary.error
        return web.json_response(body)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        key = await authenticate(request, self._answers.keys)
        last = request.headers.get("Last-Event-ID")
        if not last:
            started = await self._start(key, await read_json(request, max_bytes=self._max_body))
            stream_id = self._hub.start(key.id, lambda: self._answers.play(key, started))
            return await self._follow(request, stream_id, key.id, 0)
        # A reconnect: the rest of that stream, whatever the body says; nothing new is started or counted as a
        # request. It takes one of the key's few reconnect slots (RECONNECTS_PER_KEY) while it looks and follows.
        parsed = parse_event_id(last)
        if parsed is None:
            raise bad_request("Last-Event-ID is not an id this API sent.", "invalid_event_id")
        stream_id, after = parsed
        try:
            slot = self._hub.reconnect(key.id)
        except ReconnectsFull as full:
            raise ApiError(429, str(full), "too_many_reconnects", headers={"Retry-After": "1"}) from None
        with slot:
            if not await self._hub.knows(stream_id, key.id, after):
                raise ApiError(404, "This key has no stream with that event id (or it is too old).", "stream_not_found")
            return await self._follow(request, stream_id, key.id, after)

    async def _follow(self, request: web.Request, stream_id: uuid.UUID, key_id: int, after: int) -> web.StreamResponse:
        response = await open_stream(request)
        try:
            # Each event keeps its own id; those that come while a write waits their turn share the next write.
            async with Batcher(response) as out:
                async for event in self._hub.follow(stream_id, key_id, after, keepalive_s=self._keepalive_s):
                    if event is None:
                        await out.add(KEEPALIVE)
                    else:
                        await out.add(event_bytes(id=event_id(stream_id, event.seq), event=event.event,
                                                  data=event.data))
            await response.write_eof()
        except ConnectionResetError:
            # The run goes on, its events kept in the journal: a reconnect with Last-Event-ID gets the rest.
            log.info("stream %s: the client left; its events stay readable with Last-Event-ID", stream_id)
        return response

    async def _start(self, key: ApiKey, body: dict[str, Any]) -> Started:
        """Validate everything, then take the quota, then start: a refused request counts nowhere."""
        actions = field(body, "tool_actions", list)
        if actions is not None:
            conversation_id = field(body, "conversation_id", str, required=True)
            parsed = [_action(item) for item in actions]
            if not parsed:
                raise bad_request("`tool_actions` must name at least one call.")
            return await self._answers.resume(key, conversation_id=conversation_id, actions=parsed)
        question = field(body, "question", str, required=True)
        if not question.strip():
            raise bad_request("`question` must not be empty.")
        conversation_id = field(body, "conversation_id", str)
        agent = field(body, "agent", str)
        if agent is not None and agent not in AGENTS:
            raise ApiError(404, f"There is no agent {agent!r}; agents: {', '.join(sorted(AGENTS))}.", "unknown_agent")
        sources = scoped_sources(key, string_list(body, "sources"))
        if sources is not None and not sources:
            raise ApiError(403, "None of the sources asked for is open to this key.", "sources_not_allowed")
        return await self._answers.ask(key, question=question, conversation_id=conversation_id, agent=agent,
                                       sources=sources, client_tools=client_tools(field(body, "tools", list)))


def _action(item: Any) -> ToolAction:
    if not isinstance(item, dict):
        raise bad_request("Each of `tool_actions` must be an object.")
    call_id = field(item, "call_id", str, required=True)
    if "result" in item:
        # A client-executed tool's result: text as sent, any other JSON value as its JSON text.
        result = item["result"]
        if result is None:
            raise bad_request("`result` must not be null; send a `decision` of reject to decline the call.")
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return ToolAction(call_id=call_id, approved=True, result=text)
    decision = field(item, "decision", str, required=True)
    if decision not in DECISIONS:
        raise bad_request("`decision` must be approve or reject.")
    return ToolAction(call_id=call_id, approved=DECISIONS[decision], comment=field(item, "comment", str, default=""))
