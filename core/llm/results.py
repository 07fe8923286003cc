"""What a model call produces: text pieces while streaming, then one Completion."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.events import Usage


@dataclass(frozen=True, kw_only=True)
class TextPiece:
    """Answer text that just arrived; the pieces joined equal `Completion.text`."""

    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """A tool call the model asked for; `arguments` is the raw JSON string, unvalidated."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class Completion:
    """The whole reply of one model call."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
