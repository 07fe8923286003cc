"""Block Kit for an approval message: the calls, who asked, and buttons for undecided calls."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters import wording
from core.events import ApprovalRequired
from core.store.continuations import ContinuationRow

from . import messages
from .rendering import SECTION_TEXT_MAX_CHARS, fit, plain

ACTION_APPROVE = "relaybot_approve"
ACTION_REJECT = "relaybot_reject"
ACTION_APPROVE_ALL = "relaybot_approve_all"
ACTION_REJECT_ALL = "relaybot_reject_all"
ACTION_PATTERN = re.compile(r"^relaybot_(approve|reject)(_all)?$")
ALL_CALLS = "*"
_VALUE = re.compile(r"^(?P<continuation>[0-9a-fA-F-]{36})\|(?P<call>.{1,200})$")

# 50 blocks a message: heading + 2 per call + "all" buttons leaves room for this many calls.
MAX_SHOWN_CALLS = 20
# Block text is refused beyond about 13,000 chars in total; arguments share this much.
ARGUMENTS_TOTAL_MAX_CHARS = 9000
ARGUMENTS_MAX_CHARS = 2400
DESCRIPTION_MAX_CHARS = 200
FALLBACK_TEXT_MAX_CHARS = 1000

Json = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class CallView:
    call_id: str
    tool: str
    arguments: str  # pretty JSON (or the raw text when it is not JSON)
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class ApprovalView:
    """What an approval message shows, from the event at first and from the stored row later."""

    continuation_id: str
    requested_by: str
    calls: tuple[CallView, ...]
    decisions: dict[str, tuple[bool, str]] = field(default_factory=dict)  # call id → (approved, by)
    state: Literal["open", "expired", "closed"] = "open"

    @classmethod
    def from_event(cls, event: ApprovalRequired) -> ApprovalView:
        calls = tuple(
            CallView(call_id=c.call_id, tool=c.tool, arguments=_pretty(c.arguments), description=c.description)
            for c in event.calls
        )
        return cls(continuation_id=event.continuation_id, requested_by=event.requested_by, calls=calls)

    @classmethod
    def from_row(cls, row: ContinuationRow) -> ApprovalView:
        pending = {str(p.get("call_id")): p for p in row.state.get("pending", [])}
        calls = tuple(
            CallView(
                call_id=call_id,
                tool=str(pending.get(call_id, {}).get("tool", "tool")),
                arguments=_pretty(pending.get(call_id, {}).get("arguments", "")),
            )
            for call_id in row.call_ids
        )
        decisions = {cid: (d.approved, d.actor) for cid, d in row.decisions.items()}
        state: Literal["open", "expired", "closed"] = (
            "expired" if row.status == "expired" else "open" if row.status == "pending" else "closed"
        )
        return cls(
            continuation_id=str(row.id), requested_by=row.requested_by, calls=calls, decisions=decisions,
            state=state,
        )

    @property
    def undecided(self) -> tuple[CallView, ...]:
        return tuple(call for call in self.calls if call.call_id not in self.decisions)


def button_value(continuation_id: str, call_id: str) -> str:
    return f"{continuation_id}|{call_id}"


def parse_button_value(value: str) -> tuple[str, str | None] | None:
    """(continuation id, call id or None for all calls), or None when the value is not ours."""
    match = _VALUE.match(value or "")
    if match is None:
        return None
    call = match["call"]
    return match["continuation"], None if call == ALL_CALLS else call


def approval_blocks(view: ApprovalView) -> list[Json]:
    shown = view.calls[:MAX_SHOWN_CALLS]
    args_room = min(ARGUMENTS_MAX_CHARS, ARGUMENTS_TOTAL_MAX_CHARS // max(1, len(shown)))
    blocks: list[Json] = [_section(messages.approval_heading(view.requested_by, len(view.calls)))]
    if view.state == "expired":
        blocks.append(_section(wording.approval_expired()))
    for index, call in enumerate(shown):
        blocks.append(_section(_call_text(call, args_room), block_id=f"relaybot_call_{index}"))
        decision = view.decisions.get(call.call_id)
        if decision is not None:
            approved, actor = decision
            line = wording.approved_by(actor) if approved else wording.rejected_by(actor)
            blocks.append(_context(line))
        elif view.state == "open":
            blocks.append(_buttons(
                f"relaybot_actions_{index}",
                (ACTION_APPROVE, "Approve", "primary", button_value(view.continuation_id, call.call_id)),
                (ACTION_REJECT, "Reject", "danger", button_value(view.continuation_id, call.call_id)),
            ))
    hidden = len(view.calls) - len(shown)
    if hidden > 0:
        blocks.append(_context(messages.more_calls_hidden(hidden)))
    if view.state == "open" and len(view.undecided) > 1:
        all_value = button_value(view.continuation_id, ALL_CALLS)
        blocks.append(_buttons(
            "relaybot_actions_all",
            (ACTION_APPROVE_ALL, "Approve all", "primary", all_value),
            (ACTION_REJECT_ALL, "Reject all", "danger", all_value),
        ))
    return blocks


def approval_text(view: ApprovalView) -> str:
    """The notification / fallback text that goes with the blocks."""
    tools = ", ".join(sorted({call.tool for call in view.calls}))
    text = messages.approval_heading(view.requested_by, len(view.calls)) + f" ({plain(tools)})"
    if view.state == "expired":
        text += " " + wording.approval_expired()
    return fit(text, FALLBACK_TEXT_MAX_CHARS)


def _call_text(call: CallView, args_room: int) -> str:
    text = f"*`{plain(call.tool)}`*"
    if call.description:
        text += " — " + plain(fit(" ".join(call.description.split()), DESCRIPTION_MAX_CHARS))
    # Escaped before it is cut: `<` and `&` grow when escaped, and the room is for what Slack counts.
    arguments = fit(plain(call.arguments.replace("```", "ˋˋˋ")), args_room)
    text += "\n```\n" + arguments + "\n```"
    return fit(text, SECTION_TEXT_MAX_CHARS)


def _section(text: str, *, block_id: str | None = None) -> Json:
    block: Json = {"type": "section", "text": {"type": "mrkdwn", "text": fit(text, SECTION_TEXT_MAX_CHARS)}}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(text: str) -> Json:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": fit(text, SECTION_TEXT_MAX_CHARS)}]}


def _buttons(block_id: str, *buttons: tuple[str, str, str, str]) -> Json:
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [
            {"type": "button", "action_id": action_id, "text": {"type": "plain_text", "text": label},
             "style": style, "value": value}
            for action_id, label, style, value in buttons
        ],
    }


def _pretty(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    try:
        return json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(arguments)
