"""What an approval message shows: calls, decisions so far and its state, from the event or the stored row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from core import wording
from core.events import ApprovalRequired, Usage
from core.store.continuations import ContinuationRow

ViewState = Literal["open", "expired", "closed"]


@dataclass(frozen=True, kw_only=True)
class CallView:
    """One call as an approval message shows it; `arguments` keep the model's key order."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    description: str = ""
    client: bool = False  # a client-executed tool: its answer is a result (the API's), not a click


@dataclass(frozen=True, kw_only=True)
class DecisionView:
    approved: bool
    actor: str


@dataclass(frozen=True, kw_only=True)
class ApprovalView:
    """What an approval message shows: built from the event at first and from the stored row later."""

    continuation_id: str
    requested_by: str
    calls: tuple[CallView, ...]
    expires_at: float  # unix seconds
    decisions: Mapping[str, DecisionView] = field(default_factory=dict)
    state: ViewState = "open"
    # Calls that had started (a crash can leave a run reverted to pending, or expired, after that).
    started: tuple[str, ...] = ()
    # Tokens the turn had used when it paused (what a resumed run's count starts from).
    usage: Usage = field(default_factory=Usage)

    @property
    def undecided(self) -> tuple[CallView, ...]:
        return tuple(call for call in self.calls if call.call_id not in self.decisions)

    @property
    def started_tools(self) -> tuple[str, ...]:
        """The tools of the started calls, in the order shown."""
        return tuple(call.tool for call in self.calls if call.call_id in self.started)

    def expired(self) -> ApprovalView:
        return replace(self, state="expired")

    @classmethod
    def from_event(cls, event: ApprovalRequired) -> ApprovalView:
        calls = tuple(
            CallView(call_id=c.call_id, tool=c.tool, arguments=dict(c.arguments), description=c.description, client=c.client)
            for c in event.calls
        )
        return cls(
            continuation_id=event.continuation_id, requested_by=event.requested_by, calls=calls, expires_at=event.expires_at
        )

    @classmethod
    def from_row(cls, row: ContinuationRow) -> ApprovalView:
        calls = tuple(
            CallView(call_id=c.call_id, tool=c.tool, arguments=_arguments(c.arguments), description=c.description,
                     client=c.client)
            for c in row.calls
        )
        state: ViewState = "expired" if row.status == "expired" else "open" if row.status == "pending" else "closed"
        return cls(
            continuation_id=str(row.id),
            requested_by=row.requested_by,
            calls=calls,
            expires_at=row.expires_at.timestamp() if row.expires_at else 0.0,
            decisions={cid: DecisionView(approved=d.approved, actor=d.actor) for cid, d in row.decisions.items()},
            state=state,
            started=row.started_calls,
            usage=_usage(row.state),
        )


@dataclass(frozen=True, kw_only=True)
class ExpiredApproval:
    """An approval closed by expiry, for its platform to edit the messages that showed it."""

    platform: str
    view: ApprovalView
    message_refs: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class PendingApproval:
    """An approval still open that someone may decide, and the platform messages that show it."""

    view: ApprovalView
    message_refs: list[dict[str, Any]]


def expired_sentence(view: ApprovalView) -> str:
    """Why an expired approval ran nothing — unless a crash had left some of its calls started."""
    return wording.approval_expired_after_start(view.started_tools) if view.started_tools else wording.approval_expired()


def _arguments(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as a dict in its key order; anything else shown as-is under `raw`."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"value": value}


def _usage(state: Any) -> Usage:
    raw = state.get("usage") if isinstance(state, dict) else None
    try:
        return Usage(**raw) if isinstance(raw, dict) else Usage()
    except TypeError:
        return Usage()
