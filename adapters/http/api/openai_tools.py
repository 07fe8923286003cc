"""/v1 agent mode in the OpenAI wire format: the client's `tools`, tool calls out, and a resent tool round back in."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from adapters.http.api.answers import ToolAction
from adapters.http.api.errors import bad_request
from core.requests import ClientTool

# OpenAI's own limit for `tools`; and all their schemas together, which are checked on the event loop (linear,
# but a few milliseconds per 10 kB): two of the largest one tool may have (core/tools/schema_check.py).
MAX_CLIENT_TOOLS = 128
MAX_CLIENT_SCHEMAS_CHARS = 128_000
# A tool call id names its paused run and its place in it, so a stateless resend finds the one pause it answers.
CALL_ID_PREFIX = "call_"
# The stream a tool round's continuation plays under: a resend of the same round replays it (the tools ran once).
_ROUND_NAMESPACE = uuid.UUID("6f0c1c5e-52a4-4bd1-9a0e-6b1c35a3f7d1")


def client_tools(raw: list[Any] | None) -> tuple[ClientTool, ...]:
    """The request's `tools` ([{type: function, function: {name, description, parameters}}], or on /api/answer the
    function objects themselves) as client tools."""
    tools: list[ClientTool] = []
    if raw and len(raw) > MAX_CLIENT_TOOLS:
        raise bad_request(f"`tools` may declare at most {MAX_CLIENT_TOOLS} tools.", "invalid_tool")
    schemas_chars = 0
    for index, item in enumerate(raw or ()):
        where = f"tools[{index}]"
        function = item.get("function") if isinstance(item, dict) and item.get("type") == "function" else (
            item if isinstance(item, dict) and "type" not in item else None)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"`{where}` must be {{\"type\": \"function\", \"function\": {{\"name\": …}}}}.")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        description = function.get("description") or ""
        if not isinstance(parameters, dict) or not isinstance(description, str):
            raise bad_request(f"`{where}.function` must have an object `parameters` and a text `description`.")
        schemas_chars += _json_chars(parameters)
        if schemas_chars > MAX_CLIENT_SCHEMAS_CHARS:
            raise bad_request(f"The tools' `parameters` together may be at most {MAX_CLIENT_SCHEMAS_CHARS} characters of "
                              f"JSON (`{where}` passes it).", "invalid_tool")
        tools.append(ClientTool(name=function["name"], description=description, parameters=parameters))
    return tuple(tools)


def _json_chars(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (RecursionError, ValueError):  # nested past what can be written back: as good as too big
        return MAX_CLIENT_SCHEMAS_CHARS + 1


def call_id(continuation_id: str, index: int) -> str:
    return f"{CALL_ID_PREFIX}{uuid.UUID(continuation_id).hex}_{index}"


def parse_call_id(value: str) -> tuple[uuid.UUID, int] | None:
    if not value.startswith(CALL_ID_PREFIX):
        return None
    continuation, _, index = value[len(CALL_ID_PREFIX):].partition("_")
    try:
        return uuid.UUID(hex=continuation), int(index)
    except ValueError:
        return None


def round_stream(continuation: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(_ROUND_NAMESPACE, str(continuation))


def tool_calls(pending: dict[str, Any]) -> list[dict[str, Any]]:
    """A pause's calls as the assistant message's `tool_calls`: the client's own tools, and the server's tools that
    need a confirmation (answered with a `tool` message `{"approve": true|false}`)."""
    return [
        {"id": call_id(pending["continuation_id"], index), "type": "function",
         "function": {"name": call["tool"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}
        for index, call in enumerate(pending["calls"])
    ]


@dataclass(frozen=True, kw_only=True)
class ToolRound:
    """The trailing `tool` messages of a request: answers to one pause's calls, by index into that pause."""

    continuation: uuid.UUID
    answers: dict[int, str]


def tool_round(messages: list[Any]) -> ToolRound | None:
    """The resent tool round when the messages end with `tool` messages; None when they end with the user's."""
    answers: dict[int, str] = {}
    continuation: uuid.UUID | None = None
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        where = f"messages[{position}]"
        raw_id = message.get("tool_call_id")
        parsed = parse_call_id(raw_id) if isinstance(raw_id, str) else None
        if parsed is None:
            raise bad_request(f"`{where}.tool_call_id` is not a tool call this server made.", "unknown_tool_call")
        if continuation is not None and parsed[0] != continuation:
            raise bad_request("The trailing tool messages answer calls of different replies; answer the last one's.",
                              "unknown_tool_call")
        continuation = parsed[0]
        answers.setdefault(parsed[1], content_text(message.get("content"), where))
    if continuation is None:
        return None
    return ToolRound(continuation=continuation, answers=answers)


def content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise bad_request(f"`{where}.content` must be a string or a list of text parts.")


def actions(round_: ToolRound, calls: list[tuple[str, bool, str]]) -> list[ToolAction]:
    """The round's answers as decisions and results for the pause's calls ((call id, client?, tool) by index)."""
    missing = [calls[i][2] for i in range(len(calls)) if i not in round_.answers]
    if missing or any(i >= len(calls) or i < 0 for i in round_.answers):
        raise bad_request("Answer every tool call of the last reply with one `tool` message each "
                          f"(missing: {', '.join(missing) or 'none'}).", "calls_undecided")
    out: list[ToolAction] = []
    for index, (pending_id, client, tool) in enumerate(calls):
        answer = round_.answers[index]
        if client:
            out.append(ToolAction(call_id=pending_id, approved=True, result=answer))
            continue
        out.append(_confirmation(pending_id, tool, answer))
    return out


def _confirmation(pending_id: str, tool: str, answer: str) -> ToolAction:
    """A server tool's confirmation: `{"approve": true|false, "comment"?: text}`."""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("approve"), bool):
        raise bad_request(f"{tool!r} is the server's tool and runs only when confirmed: answer its call with "
                          '{"approve": true} or {"approve": false}.', "decision_required")
    comment = value.get("comment")
    return ToolAction(call_id=pending_id, approved=value["approve"], comment=comment if isinstance(comment, str) else "")
