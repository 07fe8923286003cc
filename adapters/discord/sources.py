"""The sources reply: one embed of numbered, linked sources within Discord's embed limits."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

import discord

from core.events import SourceItem

from . import wording

EMBED_DESCRIPTION_MAX_CHARS = 4_096
SOURCE_TITLE_MAX_CHARS = 150
# Kept free at the end of the description for the "…and N more" line.
MORE_LINE_RESERVE_CHARS = 40
EMBED_COLOUR = 0x5865F2


def _title(item: SourceItem, number: int) -> str:
    title = " ".join((item.title or item.source or item.uri or f"Source {number}").split())
    if len(title) > SOURCE_TITLE_MAX_CHARS:
        title = title[: SOURCE_TITLE_MAX_CHARS - 1] + "…"
    # Brackets would end the link text early; escape the rest of markdown.
    return discord.utils.escape_markdown(title.replace("[", "(").replace("]", ")"))


def _line(item: SourceItem, number: int) -> str:
    title = _title(item, number)
    parts = urlsplit(item.uri or "")
    if parts.scheme in ("http", "https") and parts.netloc and not any(c in item.uri for c in " ()<>"):
        return f"`[{number}]` [{title}]({item.uri})"
    return f"`[{number}]` {title}"


def sources_embed(items: Sequence[SourceItem]) -> discord.Embed | None:
    """None when there is nothing to cite; otherwise an embed whose description fits 4,096 chars."""
    if not items:
        return None
    lines: list[str] = []
    used = 0
    for number, item in enumerate(items, start=1):
        line = _line(item, number)
        if used + len(line) + 1 > EMBED_DESCRIPTION_MAX_CHARS - MORE_LINE_RESERVE_CHARS:
            lines.append(wording.more_sources(len(items) - number + 1))
            break
        lines.append(line)
        used += len(line) + 1
    return discord.Embed(title=wording.sources_title(), description="\n".join(lines), colour=EMBED_COLOUR)
