"""Discord text: stream limits, approval and decision messages, thread names, interrupted answers."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from adapters import wording as shared_wording
from adapters.streaming import StreamLimits
from adapters.streaming.splitter import close_open_fence
from core.events import PendingCall
from core.store.continuations import Decision

from . import wording

MAX_CONTENT_CHARS = 2_000
THREAD_NAME_MAX_CHARS = 90
# Room the per-call argument blocks share in an approval message, leaving space for decisions.
APPROVAL_ARGUMENTS_CHARS = 1_100
MIN_ARGUMENT_CHARS = 40
CURSOR_CHAR = "▌"

_MENTION = re.compile(r"<@!?\d+>")


def stream_limits(*, min_edit_interval_s: float, backoff_base_s: float) -> StreamLimits:
    """Answers are plain message content, bounded by Discord's 2,000 chars."""
    return StreamLimits(
        max_chars=MAX_CONTENT_CHARS, min_edit_interval_s=min_edit_interval_s, backoff_base_s=backoff_base_s
    )


def clean_question(content: str) -> str:
    """The question without user mentions (the bot's own mention is how it was asked)."""
    return " ".join(_MENTION.sub(" ", content).split())


def thread_name(question: str) -> str:
    name = " ".join(question.split())
    if len(name) > THREAD_NAME_MAX_CHARS:
        name = name[: THREAD_NAME_MAX_CHARS - 1] + "…"
    return name or wording.default_thread_name()


def _arguments_block(arguments: Mapping[str, Any], room: int) -> str:
    text = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    # A backtick fence inside the arguments would end the block early.
    text = text.replace("```", "`\u200b``")
    if len(text) > room:
        text = text[: max(MIN_ARGUMENT_CHARS, room) - 1] + "…"
    return f"```json\n{text}\n```"


def approval_text(*, calls: Sequence[PendingCall], requested_by: str, expires_at: float) -> str:
    """The approval request: who asked, and each call's tool and (truncated) arguments."""
    room = APPROVAL_ARGUMENTS_CHARS // max(1, len(calls))
    lines = [wording.approval_header(requested_by)]
    for index, call in enumerate(calls, start=1):
        about = f" — {call.description}" if call.description else ""
        lines.append(f"**{index}. `{call.tool}`**{about[:150]}")
        lines.append(_arguments_block(call.arguments, room))
    lines.append(wording.approval_footer(expires_at))
    return _bounded("\n".join(lines))


def decided_text(base: str, *, call_ids: Sequence[str], decisions: Mapping[str, Decision]) -> str:
    """The approval message with one line per decided call under it."""
    lines = []
    for index, call_id in enumerate(call_ids, start=1):
        decision = decisions.get(call_id)
        if decision is None:
            continue
        said = shared_wording.approved_by(decision.actor) if decision.approved else shared_wording.rejected_by(decision.actor)
        lines.append(f"{index}. {said}" if len(call_ids) > 1 else said)
    return _bounded(base + ("\n\n" + "\n".join(lines) if lines else ""))


def expired_text(base: str) -> str:
    return _bounded(base + "\n\n" + shared_wording.approval_expired())


def interrupted_text(shown: str) -> str:
    """What an answer left streaming becomes: its text so far, without cursor, plus a note."""
    note = shared_wording.interrupted()
    text = shown.replace(" " + CURSOR_CHAR, "").replace(CURSOR_CHAR, "").rstrip()
    if text in ("", "_thinking…_"):
        return note
    text = close_open_fence(text)
    room = MAX_CONTENT_CHARS - len(note) - 2
    if len(text) > room:
        text = close_open_fence(text[: room - len("\n```") - 1])
    return f"{text}\n\n{note}"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"
