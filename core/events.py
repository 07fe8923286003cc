"""The typed event stream every agent yields: the one contract between core and adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

from core.text_safety import storable, storable_json

ToolStatus = Literal["ok", "error", "rejected"]


@dataclass(frozen=True, kw_only=True)
class AnswerDelta:
    """More answer text, to be appended to what was shown so far."""

    text: str
    kind: Literal["answer_delta"] = "answer_delta"


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted:
    """A tool begins: it needed no approval, or it was approved."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    kind: Literal["tool_call_started"] = "tool_call_started"

    def __post_init__(self) -> None:
        # The model's JSON may escape a NUL ("\u0000") that parsing turned into one: the API's journal keeps this.
        object.__setattr__(self, "arguments", storable_json(self.arguments))


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished:
    """A tool ended; `output_preview` is a short, display-safe excerpt of its result."""

    call_id: str
    tool: str
    status: ToolStatus
    output_preview: str
    kind: Literal["tool_call_finished"] = "tool_call_finished"


@dataclass(frozen=True, kw_only=True)
class ToolRun:
    """An approved call that started during a run; `status` is None while its outcome is unknown
    (the run stopped before it returned)."""

    call_id: str
    tool: str
    status: ToolStatus | None = None
    output_preview: str = ""


@dataclass(frozen=True, kw_only=True)
class PendingCall:
    """One tool call waiting for a human decision, or (`client`) for the result of a tool the client runs."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    description: str = ""
    client: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", storable_json(self.arguments))
        object.__setattr__(self, "description", storable(self.description))


@dataclass(frozen=True, kw_only=True)
class ApprovalRequired:
    """The run paused on tool calls that need approval; nothing more follows."""

    continuation_id: str
    calls: tuple[PendingCall, ...]
    requested_by: str
    expires_at: float  # unix seconds
    # Tokens the turn used up to the pause (like Done's, a resumed run's count includes them).
    usage: Usage = field(default_factory=lambda: Usage())
    kind: Literal["approval_required"] = "approval_required"


@dataclass(frozen=True, kw_only=True)
class SourceItem:
    """One citable source; its position in `Sources.items` is its citation number minus one."""

    title: str
    uri: str
    text: str
    source: str = ""
    score: float = 0.0
    chunk_id: int | None = None

    def __post_init__(self) -> None:
        # A page's title and text are outside text: they reach the API's event journal and a paused run's state
        # (jsonb, which takes no NUL), wherever the item was made.
        for name in ("title", "uri", "text", "source"):
            object.__setattr__(self, name, storable(getattr(self, name)))


@dataclass(frozen=True, kw_only=True)
class Sources:
    """The deduplicated sources the answer may cite as [1], [2], …"""

    items: tuple[SourceItem, ...]
    kind: Literal["sources"] = "sources"


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token usage reported by the model over the whole run."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class Done:
    """The run finished; `answer` is the whole final answer text."""

    answer: str
    usage: Usage = field(default_factory=Usage)
    kind: Literal["done"] = "done"


@dataclass(frozen=True, kw_only=True)
class Failed:
    """The run ended with an error; `message` is a sentence a user can act on."""

    message: str
    retryable: bool = False
    kind: Literal["failed"] = "failed"


@dataclass(frozen=True, kw_only=True)
class Stopped(Failed):
    """The run was stopped by a person (a Stop button); `message` goes under the text shown so far.
    A Failed, so a consumer that knows nothing of Stop still ends the answer with the sentence."""

    by: str = ""


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    """The run began (under its conversation's lease): its id, the turn id, is what a Stop button names.
    Consumers that offer no Stop ignore it."""

    run_id: str
    asked_by: str
    kind: Literal["run_started"] = "run_started"


Event = Union[RunStarted, AnswerDelta, ToolCallStarted, ToolCallFinished, ApprovalRequired, Sources, Done, Failed]
