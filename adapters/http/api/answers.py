"""The API's side of the engine: a question or a continuation for a key, played as API events ending in `end` or `error`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.http.api.auth import actor_for, take_quota
from adapters.http.api.errors import ApiError, bad_request
from adapters.http.api.events import ApiEvent, Summary, translate, usage_json
from core.api_access import ApiConversationLog, ApiKey, ApiKeys, api_conversation_key
from core.approvals import ApprovalView, Decision
from core.engine import Engine
from core.events import ApprovalRequired, Done, Event
from core.requests import ClientTool, PriorMessage, Request
from core.tools.client_tools import client_spec


@dataclass(frozen=True, kw_only=True)
class ToolAction:
    """A client's decision on a paused call (or, for a client-executed tool, its result)."""

    call_id: str
    approved: bool
    comment: str = ""
    result: str | None = None  # a client-executed tool's result (then approved is True)


@dataclass(frozen=True, kw_only=True)
class Started:
    """A run the API may play: its conversation and its engine events."""

    conversation_id: str
    events: AsyncIterator[Event]


class ApiAnswers:
    def __init__(self, *, engine: Engine, keys: ApiKeys, conversations: ApiConversationLog) -> None:
        self.engine = engine
        self.keys = keys
        self.conversations = conversations

    async def ask(
        self, key: ApiKey, *, question: str, conversation_id: str | None, agent: str | None,
        sources: tuple[str, ...] | None, context: Sequence[PriorMessage] = (),
        client_tools: Sequence[ClientTool] = (), response_format: dict[str, Any] | None = None,
    ) -> Started:
        if conversation_id is not None and not await self.conversations.exists(key.id, conversation_id):
            # Another key's conversation, a chat platform's, or none at all: the same answer for each.
            raise ApiError(404, "There is no conversation with that id for this key.", "conversation_not_found")
        check_client_tools(self.engine, client_tools)
        conversation = conversation_id or str(uuid.uuid4())
        await take_quota(self.keys, key)
        # The key's sources (intersected with the request's) narrow what the conversation may see; the
        # restricted ones granted to the key (`relaybot keys create --sources`) are its conversations' grants.
        request = Request(
            question=question, conversation=api_conversation_key(key.id, conversation), user=actor_for(key),
            agent_type=agent, thread_context=tuple(context), sources=sources, client_tools=tuple(client_tools),
            response_format=response_format,
        )
        return Started(conversation_id=conversation, events=self.engine.ask(request))

    async def resume(self, key: ApiKey, *, conversation_id: str, actions: Sequence[ToolAction]) -> Started:
        """Decide the conversation's paused calls and claim the run: exactly one caller gets its events."""
        continuation = await self.conversations.latest_continuation(key.id, conversation_id)
        if continuation is None:
            raise ApiError(404, "This key has no paused answer in that conversation.", "conversation_not_found")
        view = await self.paused(continuation)
        started = await self.continue_paused(key, conversation_id, view, actions)
        assert started is not None
        return started

    async def paused(self, continuation: uuid.UUID) -> ApprovalView:
        view = await self.engine.approvals.view(str(continuation))
        if view is None:
            raise ApiError(404, "This key has no paused answer with those calls.", "conversation_not_found")
        return view

    async def continue_paused(
        self, key: ApiKey, conversation_id: str, view: ApprovalView, actions: Sequence[ToolAction], *,
        lost_ok: bool = False,
    ) -> Started | None:
        """Answer a pause's calls (decisions, client results) and claim its run. None, with `lost_ok`, when the pause
        was continued already (by another request, or a moment ago): the caller replays that run instead."""
        calls = {call.call_id: call for call in view.calls}
        for action in actions:
            call = calls.get(action.call_id)
            if call is None:
                raise bad_request(f"No paused tool call has the id {action.call_id!r}.", "unknown_tool_call")
            if call.client and action.approved and action.result is None:
                raise bad_request(f"The call {action.call_id!r} is to your own tool {call.tool!r}: send its `result`.",
                                  "result_required")
            if not call.client and action.result is not None:
                raise bad_request(f"The call {action.call_id!r} is to the server's tool {call.tool!r}: send a "
                                  "`decision`, not a `result`.", "decision_required")
        actor = actor_for(key)
        decisions = {a.call_id: Decision(approved=a.approved, actor=actor.display, comment=a.comment, result=a.result)
                     for a in actions}
        if view.state != "open":
            if lost_ok and view.state == "closed":
                return None
            raise ApiError(409 if view.state == "closed" else 410, "This paused answer was already continued."
                           if view.state == "closed" else "This paused answer has expired.",
                           "already_continued" if view.state == "closed" else "approval_expired")
        await take_quota(self.keys, key)
        result = await self.engine.approvals.submit(view.continuation_id, decisions, actor=actor)
        if result.events is not None:
            return Started(conversation_id=conversation_id, events=result.events)
        # Another request claimed it between our look and our claim: this one is refused, and not counted.
        await self.keys.give_back(key)
        if lost_ok and result.outcome == "already_handled":
            return None
        status, kind = {
            "already_handled": (409, "already_continued"), "expired": (410, "approval_expired"),
            "recorded": (400, "calls_undecided"),
        }.get(result.outcome, (409, result.reason or "refused"))
        raise ApiError(status, result.message or "This paused answer cannot be continued.", kind)

    async def play(self, key: ApiKey, started: Started, summary: Summary | None = None) -> AsyncIterator[ApiEvent]:
        """The run's API events, ending in `end` (an answer, or a pause) or `error`. The key's tokens are counted
        by the engine, each model call reserved and settled on its own (core/quota.py)."""
        summary = summary if summary is not None else Summary()
        async for event in started.events:
            summary.see(event)
            api_event = translate(event)
            if api_event is not None:
                yield api_event
            if isinstance(event, (Done, ApprovalRequired)):
                yield "end", self._end(started.conversation_id, summary)

    @staticmethod
    def _end(conversation_id: str, summary: Summary) -> dict[str, Any]:
        end: dict[str, Any] = {"conversation_id": conversation_id, "usage": usage_json(summary.usage)}
        if summary.pending is not None:
            end["pending_approval"] = summary.pending
        return end


def check_client_tools(engine: Engine, tools: Sequence[ClientTool]) -> None:
    """400 for a client tool the engine cannot offer: a name twice, a server tool's name, a malformed name or schema."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen or engine.registry.owns(tool.name):
            raise bad_request(f"A tool named {tool.name!r} is declared twice or is one of the server's; rename it.",
                              "invalid_tool")
        seen.add(tool.name)
        try:
            client_spec(tool)
        except ValueError as error:
            raise bad_request(f"The tool {tool.name!r} cannot be offered: {error}.", "invalid_tool") from None
