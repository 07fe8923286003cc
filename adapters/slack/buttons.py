"""The approval message in Block Kit: the calls, who asked, decisions, and buttons whose values carry
the continuation and call (parsed by one regex)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
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
# "Full arguments": posts a call's arguments whole in the thread.
ACTION_ARGUMENTS = "relaybot_arguments"
ALL_CALLS = "*"
_VALUE = re.compile(r"^(?P<continuation>[0-9a-fA-F-]{36})\|(?P<call>.{1,200})$")
# An "all" button's calls: `*first+count`, the calls its message showed. A bare `*` comes from
# messages posted before approvals had several messages; those showed the first MAX_SHOWN_CALLS.
_PAGE = re.compile(r"^\*(?:(?P<first>\d{1,5})\+(?P<count>\d{1,5}))?$")

# 50 blocks a message: heading + 2 per call + notes and "all" buttons leaves room for this many
# calls; a request with more is shown in several messages, each deciding only its own calls.
MAX_SHOWN_CALLS = 20
# Slack refuses blocks beyond about 13,000 chars of text in total (labels count): what one
# message's arguments and descriptions share, leaving room for tool names, notes and buttons.
ARGUMENTS_TOTAL_MAX_CHARS = 6000
ARGUMENTS_MAX_CHARS = 2400
DESCRIPTIONS_TOTAL_MAX_CHARS = 1500
DESCRIPTION_MAX_CHARS = 200
FALLBACK_TEXT_MAX_CHARS = 1000
# Each argument keeps at least this much of its value, so every key stays in view.
VALUE_MIN_CHARS = 12
KEY_MAX_CHARS = 60
ELLIPSIS = "…"

Json = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Pressed:
    """What a button names: one call, or (call_id None) the calls `first`..`first + count` of the request."""

    continuation_id: str
    call_id: str | None
    first: int = 0
    count: int = 0


def button_value(continuation_id: str, call_id: str) -> str:
    return f"{continuation_id}|{call_id}"


def page_value(continuation_id: str, first: int, count: int) -> str:
    return f"{continuation_id}|{ALL_CALLS}{first}+{count}"


def parse_button(action_id: str, value: str) -> Pressed | None:
    """The button's continuation and calls, or None when the value is not ours."""
    match = _VALUE.match(value or "")
    if match is None:
        return None
    if not action_id.endswith("_all"):
        return Pressed(continuation_id=match["continuation"], call_id=match["call"])
    page = _PAGE.match(match["call"])
    if page is None:
        return None
    if page["first"] is None:
        return Pressed(continuation_id=match["continuation"], call_id=None, first=0, count=MAX_SHOWN_CALLS)
    return Pressed(continuation_id=match["continuation"], call_id=None, first=int(page["first"]), count=int(page["count"]))


def page_starts(view: ApprovalView) -> list[int]:
    """The first call of each approval message: one message per MAX_SHOWN_CALLS calls."""
    return list(range(0, max(1, len(view.calls)), MAX_SHOWN_CALLS))


def page_of(view: ApprovalView, call_id: str) -> int:
    """The first call of the message that shows `call_id` (0 when it is not there)."""
    for index, call in enumerate(view.calls):
        if call.call_id == call_id:
            return index - index % MAX_SHOWN_CALLS
    return 0


def approval_blocks(view: ApprovalView, *, first: int = 0) -> list[Json]:
    """The approval message showing calls `first`..`first + MAX_SHOWN_CALLS`; its "all" buttons decide
    only those, so nothing is approved that its approver was not shown."""
    shown = view.calls[first:first + MAX_SHOWN_CALLS]
    args_room = min(ARGUMENTS_MAX_CHARS, ARGUMENTS_TOTAL_MAX_CHARS // max(1, len(shown)))
    description_room = min(DESCRIPTION_MAX_CHARS, DESCRIPTIONS_TOTAL_MAX_CHARS // max(1, len(shown)))
    blocks: list[Json] = [_section(_heading(view, first=first, shown=len(shown)))]
    if view.state == "expired":
        blocks.append(_section(shared_wording.approval_expired_line(view.started_tools)))
    for offset, call in enumerate(shown):
        index = first + offset
        text, cut = _call_text(call, args_room, description_room)
        section = _section(text, block_id=f"relaybot_call_{index}")
        if cut:
            section["accessory"] = _button(
                ACTION_ARGUMENTS, shared_wording.full_arguments_label(), None, button_value(view.continuation_id, call.call_id)
            )
        blocks.append(section)
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
    after = len(view.calls) - first - len(shown)
    if after > 0:
        blocks.append(_context(shared_wording.more_calls_below(after, math.ceil(after / MAX_SHOWN_CALLS))))
    undecided_here = [call for call in shown if call.call_id not in view.decisions]
    if view.state == "open" and len(undecided_here) > 1:
        these = f" (these {len(shown)})" if len(view.calls) > len(shown) else ""
        value = page_value(view.continuation_id, first, len(shown))
        blocks.append(_buttons(
            f"relaybot_actions_all_{first}",
            (ACTION_APPROVE_ALL, f"Approve all{these}", "primary", value),
            (ACTION_REJECT_ALL, f"Reject all{these}", "danger", value),
        ))
    if view.state == "open":
        expires = datetime.fromtimestamp(view.expires_at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        blocks.append(_context(shared_wording.approval_footer(wording.time_at(view.expires_at, expires))))
    return blocks


def approval_text(view: ApprovalView, *, first: int = 0) -> str:
    """The notification / fallback text that goes with the blocks."""
    shown = view.calls[first:first + MAX_SHOWN_CALLS]
    tools = ", ".join(sorted({call.tool for call in shown}))
    text = _heading(view, first=first, shown=len(shown)) + f" ({plain(tools)})"
    if view.state == "expired":
        text += " " + shared_wording.approval_expired_line(view.started_tools)
    return fit(text, FALLBACK_TEXT_MAX_CHARS)


def full_arguments(call: CallView) -> str:
    """A call's arguments whole, as the model wrote them (its key order), for the "Full arguments" reply."""
    return _pretty(call.arguments)


def _heading(view: ApprovalView, *, first: int, shown: int) -> str:
    if first > 0:
        return sentence(shared_wording.approval_part(first + 1, first + shown, len(view.calls)))
    return sentence(shared_wording.approval_heading(wording.mention(view.requested_by), len(view.calls)))


def _call_text(call: CallView, args_room: int, description_room: int) -> tuple[str, bool]:
    """The call's section text, and whether its arguments had to be cut."""
    text = f"*`{plain(call.tool)}`*"
    if call.description:
        text += " — " + plain(fit(" ".join(call.description.split()), description_room))
    arguments, cut = shown_arguments(call.arguments, args_room)
    text += "\n```\n" + arguments + "\n```"
    if cut:
        text += "\n" + sentence(shared_wording.arguments_cut())
    return fit(text, SECTION_TEXT_MAX_CHARS), cut


def shown_arguments(arguments: dict[str, Any], room: int) -> tuple[str, bool]:
    """The arguments as shown in `room` chars (counted escaped, as Slack counts them), and whether any
    was cut. Every key stays in view, in the model's order: each value is cut to a fair share of the
    room, so a long first argument cannot push a later one (`target: PRODUCTION`) out of sight."""
    whole = _escaped(_pretty(arguments))
    if len(whole) <= room:
        return whole, False
    entries = [(_escaped(fit(json.dumps(str(key), ensure_ascii=False), KEY_MAX_CHARS)) + ": ",
                _escaped(_indented(value))) for key, value in arguments.items()]
    if not entries:
        return _cut(whole, room), True
    dropped = 0
    while entries and _overhead(entries, dropped) + VALUE_MIN_CHARS * len(entries) > room:
        entries.pop()
        dropped += 1
    values = _fair_cut([value for _, value in entries], room - _overhead(entries, dropped))
    lines = [f"  {key}{value}" for (key, _), value in zip(entries, values)]
    if dropped:
        lines.append(f"  {ELLIPSIS}")
    return "{\n" + ",\n".join(lines) + "\n}", True


def _overhead(entries: list[tuple[str, str]], dropped: int) -> int:
    """Chars of an object's layout besides its values: braces, indents, keys, separators."""
    lines = len(entries) + (1 if dropped else 0)
    return len("{\n\n}") + sum(2 + len(key) for key, _ in entries) + (2 + len(ELLIPSIS) if dropped else 0) + 2 * max(0, lines - 1)


def _fair_cut(values: list[str], room: int) -> list[str]:
    """Shares `room` among `values`: short ones whole, the rest cut to equal shares of what is left."""
    limits = [0] * len(values)
    left = room
    order = sorted(range(len(values)), key=lambda i: len(values[i]))
    for rank, i in enumerate(order):
        share = left // (len(values) - rank)
        limits[i] = min(len(values[i]), share)
        left -= limits[i]
    return [_cut(value, limit) for value, limit in zip(values, limits)]


def _cut(value: str, limit: int) -> str:
    """`value` in `limit` chars, ending in an ellipsis when cut; never inside an escape like `&lt;`."""
    if len(value) <= limit:
        return value
    quoted = value.startswith('"') and value.endswith('"') and limit >= 3
    keep = value[: max(0, limit - len(ELLIPSIS) - (1 if quoted else 0))]
    amp = keep.rfind("&", max(0, len(keep) - 4))
    if amp >= 0 and ";" not in keep[amp:]:
        keep = keep[:amp]
    return keep + ELLIPSIS + ('"' if quoted else "")


def _indented(value: Any) -> str:
    """A value as JSON, its later lines indented to sit inside the object."""
    try:
        rendered = json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        rendered = json.dumps(str(value), ensure_ascii=False)
    return rendered.replace("\n", "\n  ")


def _escaped(text: str) -> str:
    # Escaped before it is measured: `<` and `&` grow when escaped, and the room is for what Slack counts.
    return plain(text.replace("```", "ˋˋˋ"))


def _section(text: str, *, block_id: str | None = None) -> Json:
    block: Json = {"type": "section", "text": {"type": "mrkdwn", "text": fit(text, SECTION_TEXT_MAX_CHARS)}}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(text: str) -> Json:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": fit(text, SECTION_TEXT_MAX_CHARS)}]}


def _button(action_id: str, label: str, style: str | None, value: str) -> Json:
    button: Json = {"type": "button", "action_id": action_id, "text": {"type": "plain_text", "text": label}, "value": value}
    if style:
        button["style"] = style
    return button


def _buttons(block_id: str, *buttons: tuple[str, str, str, str]) -> Json:
    return {
        "type": "actions",
        "block_id": block_id,
        "elements": [_button(action_id, label, style, value) for action_id, label, style, value in buttons],
    }


def _pretty(arguments: dict[str, Any]) -> str:
    # In the model's key order: what a person approves reads as the model wrote it.
    try:
        return json.dumps(arguments, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


@dataclass(frozen=True)
class BlockClick:
    """The parts of a block_actions body a button handler reads, each checked to be what Slack sends."""

    user_id: str
    user_team: str
    channel: str
    thread_ts: str | None
    value: str
    user: dict[str, Any]
    # The workspace whose message holds the button (the host's in a Slack Connect channel): its token answers.
    team: str = ""


def read_click(body: Any) -> BlockClick:
    """The first action of a block_actions body; fields Slack left out (or malformed) come back empty."""
    body = body if isinstance(body, dict) else {}
    actions = body.get("actions")
    action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
    user = body.get("user") if isinstance(body.get("user"), dict) else {}
    container = body.get("container") if isinstance(body.get("container"), dict) else {}
    team = body.get("team") if isinstance(body.get("team"), dict) else {}
    return BlockClick(
        user_id=str(user.get("id") or ""), user_team=str(user.get("team_id") or ""),
        channel=str(container.get("channel_id") or ""), thread_ts=str(container.get("thread_ts") or "") or None,
        value=str(action.get("value") or ""), user=user, team=str(team.get("id") or user.get("team_id") or ""),
    )
