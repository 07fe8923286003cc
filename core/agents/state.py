"""The one serialisable record of a paused run, stored as JSON with a schema version."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from core.events import SourceItem, Usage
from core.requests import ConversationKey

RUN_STATE_SCHEMA_VERSION = 1


class RunStateError(Exception):
    """A saved run state cannot be loaded by this version of relaybot."""


@dataclass(frozen=True, kw_only=True)
class PendingToolCall:
    """A tool call the model asked for that waits for a decision; arguments are the raw JSON."""

    call_id: str
    tool: str
    arguments: str


@dataclass(kw_only=True)
class RunState:
    """Everything needed to resume a run; tools and agents are named, never pickled."""

    agent_type: str
    model: str
    turn_id: str
    conversation_id: int | None
    conversation: ConversationKey
    user_id: str
    user_name: str
    messages: list[dict[str, Any]]
    turn_start: int  # index in `messages` of this turn's user message
    pending: list[PendingToolCall]
    offered_tools: list[str]
    sources: list[SourceItem] = field(default_factory=list)
    answer_so_far: str = ""
    rounds_used: int = 0
    temperature: float | None = None
    max_tokens: int | None = None
    usage: Usage = field(default_factory=Usage)
    # Tools the client runs (core/tools/client_tools.py), as {name, description, parameters}: offered again on resume.
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    response_format: dict[str, Any] | None = None
    request_sources: list[str] | None = None  # the request's narrowing of the channel's sources (an API key's)
    # The asker's own words this turn, apart from attached files' text (ToolContext.question); a state saved
    # before this field vouches for no written URL.
    question: str = ""
    schema_version: int = RUN_STATE_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunState":
        version = data.get("schema_version")
        upgrade = UPGRADES.get(version) if version != RUN_STATE_SCHEMA_VERSION else None
        if version != RUN_STATE_SCHEMA_VERSION and upgrade is None:
            raise RunStateError(f"Saved run state has schema version {version!r}, which this relaybot cannot read.")
        if upgrade is not None:
            data = upgrade(data)
        data = dict(data)
        data["conversation"] = ConversationKey(**data["conversation"])
        data["pending"] = [PendingToolCall(**call) for call in data["pending"]]
        data["sources"] = [SourceItem(**item) for item in data.get("sources", [])]
        data["usage"] = Usage(**data.get("usage", {}))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


# Functions that turn an older saved state into the current shape, keyed by the older version.
# A new schema version adds an entry here and a saved example under tests/fixtures/run_states/.
UPGRADES: dict[int, Any] = {}
