"""Engine events as API events: a name and a JSON object each, mirroring core/events.py's union."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.citations import cite
from core.events import (
    AnswerDelta, ApprovalRequired, Done, Event, Failed, SourceItem, Sources, ToolCallFinished, ToolCallStarted, Usage,
)
from core.quota import QuotaFailed, QuotaRefusal

ApiEvent = tuple[str, dict[str, Any]]
TERMINAL = frozenset({"end", "error"})


def usage_json(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def translate(event: Event) -> ApiEvent | None:
    """One engine event as an API event; Done and ApprovalRequired also end the stream (see `ending`)."""
    match event:
        case AnswerDelta():
            return "answer_delta", {"text": event.text}
        case ToolCallStarted():
            return "tool_call_started", {"call_id": event.call_id, "tool": event.tool, "arguments": event.arguments}
        case ToolCallFinished():
            return "tool_call_finished", {"call_id": event.call_id, "tool": event.tool, "status": event.status,
                                          "output": event.output_preview}
        case ApprovalRequired():
            return "tool_calls_pending", pending_json(event)
        case Sources():
            return "sources", {"items": [
                {"n": n, "title": item.title, "uri": item.uri, "source": item.source, "text": item.text}
                for n, item in enumerate(event.items, start=1)
            ]}
        case Done():
            return None  # becomes the end event, which knows the conversation
        case Failed():
            return "error", error_json(event)
    return None


def error_json(event: Failed) -> dict[str, Any]:
    """A failed run's error; a model call past the key's token quota is kind `quota`, with the limit and reset."""
    if isinstance(event, QuotaFailed) and event.refusal is not None:
        refusal = event.refusal
        return {"message": event.message, "kind": "quota", "limit": refusal.limit, "allowed": refusal.allowed,
                "resets_at": refusal.resets_at.isoformat()}
    return {"message": event.message, "kind": "temporary" if event.retryable else "failed"}


def source_json(n: int, item: SourceItem) -> dict[str, Any]:
    return {"n": n, "title": item.title, "uri": item.uri, "source": item.source, "text": item.text}


def source_item(data: dict[str, Any]) -> SourceItem:
    """A `sources` event's item back as the SourceItem it was (what cite() checks numbers against)."""
    return SourceItem(title=data["title"], uri=data["uri"], text=data["text"], source=data["source"])


def pending_json(event: ApprovalRequired) -> dict[str, Any]:
    return {
        "continuation_id": event.continuation_id, "expires_at": event.expires_at,
        # `client`: the asker's own tool, answered with its result; otherwise a decision on the server's tool.
        "calls": [{"call_id": c.call_id, "tool": c.tool, "arguments": c.arguments, "description": c.description,
                   "client": c.client} for c in event.calls],
    }


@dataclass
class Summary:
    """What a whole run produced, for /api/answer and for the end event."""

    answer: str = ""
    final_answer: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    error: dict[str, Any] | None = None
    refusal: QuotaRefusal | None = None  # the run was refused a model call by the key's token quota
    _since_tools: str = ""
    _items: list[SourceItem] = field(default_factory=list)

    def see(self, event: Event) -> None:
        match event:
            case AnswerDelta():
                self.answer += event.text
                self._since_tools += event.text
            case ToolCallStarted():
                self._since_tools = ""
                self.tools.append({"call_id": event.call_id, "tool": event.tool, "arguments": event.arguments})
            case ToolCallFinished():
                self._since_tools = ""
                for tool in self.tools:
                    if tool["call_id"] == event.call_id:
                        tool.update(status=event.status, output=event.output_preview)
                        break
                else:
                    self.tools.append({"call_id": event.call_id, "tool": event.tool, "status": event.status,
                                       "output": event.output_preview})
            case ApprovalRequired():
                self.pending = pending_json(event)
                self.usage = event.usage
            case Sources():
                self.sources = translate(event)[1]["items"]  # type: ignore[index]
                self._items = list(event.items)
            case Done():
                # Done's text (every round's, citations of no source removed) is the answer; the final answer
                # is what came after the last tool round, its citations checked the same way (the chats' rule).
                self.answer = event.answer
                self.final_answer = cite(self._since_tools, self._items).text
                self.usage = event.usage
            case Failed():
                self.error = error_json(event)
                self.refusal = event.refusal if isinstance(event, QuotaFailed) else None

    @property
    def after_tools(self) -> str:
        return self._since_tools
