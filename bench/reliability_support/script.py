"""What the OpenAI emulator answers each question: a scripted answer per marker, after scripted faults or tool calls."""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.emulators.openai_server import Call, Reply, Text, ToolCalls

from .tally import begin_marker, end_marker

MARKER = re.compile(r"\b(Q[a-z]{1,3}\d{3})\b")
FILLER = "Line {n} of this answer says the service named {marker} is healthy and the deploy went fine."


def answer_text(marker: str, *, chars: int) -> str:
    """A unique answer about `chars` long: a begin and an end marker around numbered sentences."""
    lines = [begin_marker(marker)]
    n = 1
    while sum(len(line) + 1 for line in lines) < chars:
        lines.append(FILLER.format(n=n, marker=marker))
        n += 1
    lines.append(end_marker(marker))
    return " ".join(lines)


@dataclass(kw_only=True)
class Plan:
    """One question's script: `before` is consumed one reply per model call, then the answer streams."""

    marker: str
    answer: str
    before: deque[Reply] = field(default_factory=deque)
    chunk_chars: int = 40
    chunk_delay_s: float = 0.0
    reminder: bool = False  # ask for create_reminder (needs approval) until a tool result comes back
    repeat_before: bool = False  # `before` forever (a fault that never clears)
    calls: int = 0


class Script:
    """The reply function of the OpenAI emulator for one scenario run."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self.unknown = 0

    def plan(self, marker: str, *, chars: int = 300, **options: Any) -> Plan:
        plan = Plan(marker=marker, answer=answer_text(marker, chars=chars), **options)
        self.plans[marker] = plan
        return plan

    def expected(self, marker: str) -> str:
        return self.plans[marker].answer

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        plan = self._plan_for(messages)
        if plan is None:
            self.unknown += 1
            return Text("I have no script for this question.")
        plan.calls += 1
        last_role = messages[-1].get("role") if messages else None
        if plan.reminder and last_role != "tool":
            arguments = json.dumps({"text": f"{plan.marker} check the deploy", "when": "in 2 hours"})
            return ToolCalls([Call("create_reminder", arguments, id=f"call_{plan.marker}")])
        if plan.before:
            reply = plan.before[0] if plan.repeat_before else plan.before.popleft()
            return reply
        return Text(plan.answer, chunk_chars=plan.chunk_chars, delay_s=plan.chunk_delay_s)

    def _plan_for(self, messages: list[dict[str, Any]]) -> Plan | None:
        for message in reversed(messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            for found in MARKER.findall(text):
                if found in self.plans:
                    return self.plans[found]
        return None
