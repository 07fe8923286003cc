"""The approval message in Block Kit: the calls, who asked, decisions, and buttons whose values carry
the continuation and call (parsed by one regex)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from adapters import wording as shared_wording
from core.approvals import ApprovalView, CallView

from . import wording
from .render import SECTION_TEXT_MAX_CHARS, fit, plain, sentence

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
    blocks: list[Json] = [_section(_heading(view))]
    if view.state == "expired":
        blocks.append(_section(shared_wording.approval_expired()))
    for index, call in enumerate(shown):
        blocks.append(_section(_call_text(call, args_room), block_id=f"relaybot_call_{index}"))
        decision = view.decisions.get(call.call_id)
        if decision is not None:
            said = shared_wording.approved_by(decision.actor) if decision.approved else shared_wording.rejected_by(decision.actor)
            blocks.append(_context(sentence(said)))  # the actor is a mention we wrote
        elif view.state == "open":
            blocks.append(_buttons(
                f"relaybot_actions_{index}",
                (ACTION_APPROVE, "Approve", "primary", button_value(view.continuation_id, call.call_id)),
                (ACTION_REJECT, "Reject", "danger", button_value(view.continuation_id, call.call_id)),
            ))
    hidden = len(view.calls) - len(shown)
    if hidden > 0:
        blocks.append(_context(shared_wording.more_calls_hidden(hidden)))
    if view.state == "open" and len(view.undecided) > 1:
        all_value = button_value(view.continuation_id, ALL_CALLS)
        blocks.append(_buttons(
            "relaybot_actions_all",
            (ACTION_APPROVE_ALL, "Approve all", "primary", all_value),
            (ACTION_REJECT_ALL, "Reject all", "danger", all_value),
        ))
    if view.state == "open":
        expires = datetime.fromtimestamp(view.expires_at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        blocks.append(_context(shared_wording.approval_footer(wording.time_at(view.expires_at, expires))))
    return blocks


def approval_text(view: ApprovalView) -> str:
    """The notification / fallback text that goes with the blocks."""
    tools = ", ".join(sorted({call.tool for call in view.calls}))
    text = _heading(view) + f" ({plain(tools)})"
    if view.state == "expired":
        text += " " + shared_wording.approval_expired()
    return fit(text, FALLBACK_TEXT_MAX_CHARS)


def _heading(view: ApprovalView) -> str:
    return sentence(shared_wording.approval_heading(wording.mention(view.requested_by), len(view.calls)))


def _call_text(call: CallView, args_room: int) -> str:
    text = f"*`{plain(call.tool)}`*"
    if call.description:
        text += " — " + plain(fit(" ".join(call.description.split()), DESCRIPTION_MAX_CHARS))
    # Escaped before it is cut: `<` and `&` grow when escaped, and the room is for what Slack counts.
    arguments = fit(plain(_pretty(call.arguments).replace("```", "ˋˋˋ")), args_room)
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


def _pretty(arguments: dict[str, Any]) -> str:
    # In the model's key order: what a person approves reads as the model wrote it.
    try:
        return json.dumps(arguments, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)
