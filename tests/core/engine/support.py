"""Helpers for engine tests: requests, a recording side-effect tool, event helpers, a chat-request validator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping, Sequence

from core.approvals import failed_click
from core.engine import Engine
from core.events import AnswerDelta, ApprovalRequired, Done, Event, Failed
from core.requests import Actor, ConversationKey, Request
from core.tools import ToolContext, ToolRegistry, ToolSpec, builtin_registry

ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"env": {"type": "string"}},
    "required": ["env"],
    "additionalProperties": False,
}


def key(channel: str = "C1", thread: str = "") -> ConversationKey:
    return ConversationKey(platform="test", workspace="W", channel=channel, thread=thread)


def request(question: str, *, channel: str = "C1", user: str = "U1", agent_type: str | None = None) -> Request:
    return Request(question=question, conversation=key(channel), user=Actor(id=user, name=f"name-{user}"), agent_type=agent_type)


@dataclass
class RecordingTool:
    """A tool that records the arguments of every run and answers with a fixed text."""

    name: str = "deploy"
    requires_approval: bool = False
    output: str = "deployed"
    runs: list[dict[str, Any]] = field(default_factory=list)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        return f"{self.output} {arguments.get('env', '')}".strip()

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=f"Run {self.name}",
            parameters=ENV_SCHEMA,
            run=self.run,
            requires_approval=self.requires_approval,
        )


def registry_with(*tools: RecordingTool) -> ToolRegistry:
    registry = builtin_registry()
    for tool in tools:
        registry.register(tool.spec())
    return registry


async def resumed_run(
    engine: Engine, continuation_id: str, decisions: Mapping[str, Any] | None = None, *, actor: Actor
) -> AsyncIterator[Event]:
    """Decide (optionally) and claim through the approval service; a click that sets nothing going yields its refusal as Failed."""
    result = await engine.approvals.submit(continuation_id, decisions or {}, actor=actor)
    if result.events is None:
        yield failed_click(result)
        return
    async for event in result.events:
        yield event


async def events_of(engine: Engine, req: Request) -> list[Event]:
    return [event async for event in engine.ask(req)]


def answer_text(events: Sequence[Event]) -> str:
    return "".join(event.text for event in events if isinstance(event, AnswerDelta))


def last_done(events: Sequence[Event]) -> Done:
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


def last_failed(events: Sequence[Event]) -> Failed:
    assert isinstance(events[-1], Failed), events[-1]
    return events[-1]


def approval(events: Sequence[Event]) -> ApprovalRequired:
    assert isinstance(events[-1], ApprovalRequired), events[-1]
    return events[-1]


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    """tool_call_id → content of every tool message in a chat request."""
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def assert_valid_chat_request(body: dict[str, Any]) -> None:
    """What a strict provider checks: one leading system message, and every assistant tool_calls
    message followed directly by one tool result for each of its ids, and no orphan tool result."""
    messages = body["messages"]
    assert messages and messages[0]["role"] == "system", "the first message must be the system prompt"
    assert all(m["role"] != "system" for m in messages[1:]), "only one system message"
    assert messages[-1]["role"] == "user" or messages[-1]["role"] == "tool", messages[-1]
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] in ("system", "user", "assistant", "tool"), message
        if message["role"] == "tool":
            raise AssertionError(f"tool result without a preceding tool_calls message: {message}")
        index += 1
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        if not calls:
            assert message.get("content") not in (None, ""), f"empty message: {message}"
            continue
        wanted = [call["id"] for call in calls]
        assert len(set(wanted)) == len(wanted), f"duplicate call ids in {message}"
        answered = []
        while index < len(messages) and messages[index]["role"] == "tool":
            answered.append(messages[index]["tool_call_id"])
            index += 1
        assert sorted(answered) == sorted(wanted), f"tool_calls {wanted} answered by {answered}"
