"""Discord text: stream limits, questions and thread names, the approval message and the sources embed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import discord

from adapters import wording
from adapters.streaming import StreamLimits
from core.approvals import ApprovalView, CallView
from core.citations import Citation
from core.events import SourceItem

from .wording import mention, time_at

MAX_CONTENT_CHARS = 2_000
THREAD_NAME_MAX_CHARS = 90
# Room for one call's arguments: all of it for a lone call, less when calls share a message.
ONE_CALL_ARGUMENTS_CHARS = 1_100
CALL_ARGUMENTS_CHARS = 400
MIN_ARGUMENT_CHARS = 40
DESCRIPTION_MAX_CHARS = 150
# Cut arguments shorten each value to the first of these lengths that fits, so every key stays in view.
VALUE_CUTS = (200, 120, 80, 48, 24, 12)
# An approval message holds at most this many calls: two Approve/Reject pairs a row, four rows,
# and a fifth row for the all-buttons and Full arguments.
CALLS_PER_ROW = 2
CALLS_PER_MESSAGE = 4 * CALLS_PER_ROW
# Kept free in every approval message: the heading with its "more calls below" line, the footer
# (expiry, or the expired line naming calls that had started), and each call's decision line.
APPROVAL_HEAD_RESERVE_CHARS = 180
APPROVAL_FOOTER_MAX_CHARS = 300
ACTOR_MAX_CHARS = 32
DECISION_LINE_RESERVE_CHARS = len("100. ✅ Approved by \n") + ACTOR_MAX_CHARS
EMBED_DESCRIPTION_MAX_CHARS = 4_096
SOURCE_TITLE_MAX_CHARS = 150
# Kept free at the end of the embed description for the "…and N more" line.
MORE_SOURCES_RESERVE_CHARS = 40
EMBED_COLOUR = 0x5865F2

_MENTION = re.compile(r"<@!?\d+>")


def stream_limits(
    *, min_edit_interval_s: float, backoff_base_s: float, placeholder_after_s: float = 1.0
) -> StreamLimits:
    """Answers are plain message content, bounded by Discord's 2,000 chars."""
    return StreamLimits(
        max_chars=MAX_CONTENT_CHARS, min_edit_interval_s=min_edit_interval_s, backoff_base_s=backoff_base_s,
        placeholder_after_s=placeholder_after_s,
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


@dataclass(frozen=True, kw_only=True)
class ApprovalPart:
    """The calls one approval message shows and decides: `count` calls from index `first`."""

    first: int
    count: int

    @property
    def indexes(self) -> range:
        return range(self.first, self.first + self.count)


def approval_parts(calls: Sequence[CallView]) -> tuple[ApprovalPart, ...]:
    """The calls split into messages, in order: as many as fit in one message's text and buttons.

    Depends on the calls only (never on decisions), so a redraw shows what the first drawing showed.
    """
    room = MAX_CONTENT_CHARS - APPROVAL_HEAD_RESERVE_CHARS - APPROVAL_FOOTER_MAX_CHARS
    parts: list[ApprovalPart] = []
    first, used = 0, 0
    for index, call in enumerate(calls):
        size = len(_call_block(index, call, len(calls))[0]) + 1 + DECISION_LINE_RESERVE_CHARS
        count = index - first
        if count and (count == CALLS_PER_MESSAGE or used + size > room):
            parts.append(ApprovalPart(first=first, count=count))
            first, used = index, 0
        used += size
    parts.append(ApprovalPart(first=first, count=len(calls) - first))
    return tuple(parts)


def part_containing(calls: Sequence[CallView], index: int) -> ApprovalPart:
    """The part that shows call `index` (the first part when there is no such call)."""
    parts = approval_parts(calls)
    return next((part for part in parts if index in part.indexes), parts[0])


def approval_text(view: ApprovalView, part: ApprovalPart | None = None) -> str:
    """One approval message: who asked, its calls with their arguments, their decisions so far, and expiry.

    A request with more calls than one message holds is shown in several messages (`part`; the
    first when not given), each with the buttons of its own calls, so no call is decided unseen.
    """
    total = len(view.calls)
    part = part or approval_parts(view.calls)[0]
    shown = [index for index in part.indexes if 0 <= index < total]
    if part.first == 0:
        lines = [wording.approval_heading(mention(view.requested_by), total)]
    else:
        lines = [wording.approval_part(part.first + 1, part.first + len(shown), total)]
    lines.extend(_call_block(index, view.calls[index], total)[0] for index in shown)
    if part.first == 0 and len(shown) < total:
        rest = approval_parts(view.calls)[1:]
        lines.append(wording.more_calls_below(total - len(shown), max(1, len(rest))))
    text = "\n".join(lines)
    tail = _approval_tail(view, shown)
    return _bounded(f"{text}\n\n{tail}" if tail else text)


def arguments_cut(view: ApprovalView, part: ApprovalPart) -> bool:
    """Whether a call of this part shows shortened arguments (the message then offers the full ones)."""
    total = len(view.calls)
    return any(_call_block(index, view.calls[index], total)[1] for index in part.indexes if 0 <= index < total)


def full_arguments_file(view: ApprovalView) -> bytes:
    """Every call of the approval with its full arguments, as JSON in the model's key order."""
    calls = [
        {"call": index, "tool": call.tool, "description": call.description, "arguments": call.arguments}
        for index, call in enumerate(view.calls, start=1)
    ]
    # No sort_keys: the file reads in the order the model wrote the arguments.
    return json.dumps(calls, indent=2, ensure_ascii=False, default=str).encode()


def _call_block(index: int, call: CallView, total: int) -> tuple[str, bool]:
    """The call's title and arguments as shown, and whether its arguments had to be cut."""
    about = f" — {call.description}" if call.description else ""
    room = ONE_CALL_ARGUMENTS_CHARS if total == 1 else CALL_ARGUMENTS_CHARS
    arguments, cut = _arguments_text(call.arguments, room)
    block = f"**{index + 1}. `{call.tool}`**{about[:DESCRIPTION_MAX_CHARS]}\n```json\n{arguments}\n```"
    return (f"{block}\n{wording.arguments_cut()}" if cut else block), cut


def _arguments_text(arguments: Mapping[str, Any], room: int) -> tuple[str, bool]:
    """The arguments as indented JSON within `room`: long values are cut before any key is dropped."""
    text = _json(arguments)
    if len(text) <= room:
        return text, False
    for limit in VALUE_CUTS:
        text = _json(_shortened(arguments, limit))
        if len(text) <= room:
            return text, True
    # Too many keys to show even with every value cut: the text itself is cut.
    return text[: max(MIN_ARGUMENT_CHARS, room) - 1] + "…", True


def _json(value: Any) -> str:
    # No sort_keys: the approver reads the arguments in the order the model wrote them.
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    # A backtick fence inside the arguments would end the block early.
    return text.replace("```", "`\u200b``")


def _shortened(value: Any, limit: int) -> Any:
    """`value` with every string cut to `limit` chars and every list to a few items, keys kept whole."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    if isinstance(value, Mapping):
        return {key: _shortened(item, limit) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        keep = max(2, limit // 16)
        items = [_shortened(item, limit) for item in value[:keep]]
        return items + [f"… {len(value) - keep} more"] if len(value) > keep else items
    return value


def _approval_tail(view: ApprovalView, shown: Sequence[int]) -> str:
    lines: list[str] = []
    several = len(view.calls) > 1
    for index in shown:
        decision = view.decisions.get(view.calls[index].call_id)
        if decision is None:
            continue
        actor = _cut(decision.actor, ACTOR_MAX_CHARS)
        said = wording.approved_by(actor) if decision.approved else wording.rejected_by(actor)
        lines.append(f"{index + 1}. {said}" if several else said)
    if view.state == "expired":
        lines.append(_cut(wording.approval_expired_line(view.started_tools), APPROVAL_FOOTER_MAX_CHARS))
    elif view.state == "open":
        lines.append(wording.approval_footer(time_at(view.expires_at)))
    return "\n".join(lines)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


# ----- sources --------------------------------------------------------------------------------------


def sources_embed(citations: Sequence[Citation]) -> discord.Embed | None:
    """None when nothing is cited; otherwise an embed listing each cited source under its number, titles as
    masked links where the source is on the web, whose description fits 4,096 chars."""
    if not citations:
        return None
    lines: list[str] = []
    used = 0
    for index, citation in enumerate(citations):
        line = _source_line(citation.item, citation.number)
        if used + len(line) + 1 > EMBED_DESCRIPTION_MAX_CHARS - MORE_SOURCES_RESERVE_CHARS:
            lines.append(wording.more_sources(len(citations) - index))
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
