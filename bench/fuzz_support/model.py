"""The fuzz bench's scripted model: asks for the generated tool calls named in a question, else answers briefly."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.emulators.openai_server import Call, Reply, Text, ToolCalls

from .hostile import CLIENT_TOOL_MARKER, CLIENT_TOOL_PREFIX, TOOL_ARGS_MARKER

TOOL_ARGS = re.compile(rf"{TOOL_ARGS_MARKER}(\d+)")
# Arguments for a client tool whose schema is hostile: long runs for catastrophic patterns, odd types.
CLIENT_ARGUMENTS = (
    json.dumps({"x": "a" * 40 + "!"}), json.dumps({"x": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}),
    json.dumps({"x": 10**300}), json.dumps({"x": {"$ref": "http://127.0.0.2/"}}), "{", "[]",
    json.dumps({"x": [[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]}),
)
# Answers that carry a made-up citation and platform syntax (the chats and the API must cope).
ANSWERS = ("ok [9]", "Done. <@U0000ALICE> [1][2] @everyone", "ok")


class FuzzModel:
    """The OpenAI emulator's reply function: a tool round's result gets a short answer."""

    def __init__(self, tool_arguments: list[tuple[str, str]]) -> None:
        self.tool_arguments = tool_arguments  # (tool name, raw JSON arguments), by index
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.calls += 1
        messages = body.get("messages") or []
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            return Text(ANSWERS[self.calls % len(ANSWERS)])
        question = _last_user_text(messages)
        found = TOOL_ARGS.search(question)
        if found is not None and int(found.group(1)) < len(self.tool_arguments):
            name, arguments = self.tool_arguments[int(found.group(1))]
            return ToolCalls([Call(name, arguments, id=f"call_fz{found.group(1)}")])
        if CLIENT_TOOL_MARKER in question:
            names = [str((tool.get("function") or {}).get("name") or "") for tool in body.get("tools") or []
                     if isinstance(tool, dict)]
            client = [name for name in names if name.startswith(CLIENT_TOOL_PREFIX)]
            if client:
                arguments = CLIENT_ARGUMENTS[self.calls % len(CLIENT_ARGUMENTS)]
                return ToolCalls([Call(client[0], arguments, id=f"call_fzc{self.calls}")])
        return Text(ANSWERS[self.calls % len(ANSWERS)])


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""
