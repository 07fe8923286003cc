"""Discord text: stream limits, questions and thread names, the approval message and the sources embed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import discord

from adapters import wording
from adapters.streaming import StreamLimits
from core.approvals import ApprovalView, CallView
from core.events import SourceItem

from .wording import mention, time_at

MAX_CONTENT_CHARS = 2_000
THREAD_NAME_MAX_CHARS = 90
# Room the per-call argument blocks share in an approval message, leaving space for decisions.
APPROVAL_ARGUMENTS_CHARS = 1_100
MIN_ARGUMENT_CHARS = 40
DESCRIPTION_MAX_CHARS = 150
# Kept free for the "…and N more calls" line when not every call fits.
MORE_CALLS_RESERVE_CHARS = 80
EMBED_DESCRIPTION_MAX_CHARS = 4_096
SOURCE_TITLE_MAX_CHARS = 150
# Kept free at the end of the embed description for the "…and N more" line.
MORE_SOURCES_RESERVE_CHARS = 40
EMBED_COLOUR = 0x5865F2

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
    """A thread title from the question, within Discord's length for names."""
    name = " ".join(question.split())
    if len(name) > THREAD_NAME_MAX_CHARS:
        name = name[: THREAD_NAME_MAX_CHARS - 1] + "…"
    return name or wording.default_thread_name()


# ----- approval message ---------------------------------------------------------------------------


def approval_text(view: ApprovalView) -> str:
    """The approval message: who asked, each call's tool and arguments, the decisions so far, and expiry."""
    tail = _approval_tail(view)
    head = wording.approval_heading(mention(view.requested_by), len(view.calls))
    # The tail (decisions, expiry) always shows; calls that do not fit before it are counted instead.
    room = MAX_CONTENT_CHARS - len(head) - len(tail) - 2
    arguments_room = APPROVAL_ARGUMENTS_CHARS // max(1, len(view.calls))
    blocks: list[str] = []
    used = 0
    for index, call in enumerate(view.calls, start=1):
        block = _call_block(index, call, arguments_room)
        last = index == len(view.calls)
        if used + len(block) + 1 > room - (0 if last else MORE_CALLS_RESERVE_CHARS):
            blocks.append(wording.more_calls_hidden(len(view.calls) - index + 1))
            break
        blocks.append(block)
        used += len(block) + 1
    text = "\n".join([head, *blocks])
    return _bounded(f"{text}\n\n{tail}" if tail else text)


def _call_block(index: int, call: CallView, arguments_room: int) -> str:
    about = f" — {call.description}" if call.description else ""
    return f"**{index}. `{call.tool}`**{about[:DESCRIPTION_MAX_CHARS]}\n{_arguments_block(call.arguments, arguments_room)}"


def _arguments_block(arguments: Mapping[str, Any], room: int) -> str:
    # No sort_keys: the approver reads the arguments in the order the model wrote them.
    text = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    # A backtick fence inside the arguments would end the block early.
    text = text.replace("```", "`\u200b``")
    if len(text) > room:
        text = text[: max(MIN_ARGUMENT_CHARS, room) - 1] + "…"
    return f"```json\n{text}\n```"


def _approval_tail(view: ApprovalView) -> str:
    lines: list[str] = []
    several = len(view.calls) > 1
    for index, call in enumerate(view.calls, start=1):
        decision = view.decisions.get(call.call_id)
        if decision is None:
            continue
        said = wording.approved_by(decision.actor) if decision.approved else wording.rejected_by(decision.actor)
        lines.append(f"{index}. {said}" if several else said)
    if view.state == "expired":
        lines.append(wording.approval_expired())
    elif view.state == "open":
        lines.append(wording.approval_footer(time_at(view.expires_at)))
    return "\n".join(lines)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


# ----- sources --------------------------------------------------------------------------------------


def sources_embed(items: Sequence[SourceItem]) -> discord.Embed | None:
    """None when there is nothing to cite; otherwise an embed whose description fits 4,096 chars."""
    if not items:
        return None
    lines: list[str] = []
    used = 0
    for number, item in enumerate(items, start=1):
        line = _source_line(item, number)
        if used + len(line) + 1 > EMBED_DESCRIPTION_MAX_CHARS - MORE_SOURCES_RESERVE_CHARS:
            lines.append(wording.more_sources(len(items) - number + 1))
            break
        lines.append(line)
        used += len(line) + 1
    return discord.Embed(title=wording.sources_title(), description="\n".join(lines), colour=EMBED_COLOUR)


def _source_line(item: SourceItem, number: int) -> str:
    title = _source_title(item, number)
    parts = urlsplit(item.uri or "")
    if parts.scheme in ("http", "https") and parts.netloc and not any(c in item.uri for c in " ()<>"):
        return f"`[{number}]` [{title}]({item.uri})"
    return f"`[{number}]` {title}"


def _source_title(item: SourceItem, number: int) -> str:
    title = " ".join((item.title or item.source or item.uri or f"Source {number}").split())
    if len(title) > SOURCE_TITLE_MAX_CHARS:
        title = title[: SOURCE_TITLE_MAX_CHARS - 1] + "…"
    # Brackets would end the link text early; escape the rest of markdown.
    return discord.utils.escape_markdown(title.replace("[", "(").replace("]", ")"))
