"""The thread reply listing an answer's sources: numbered, linked titles, a short snippet each."""

from __future__ import annotations

from core.events import SourceItem

from . import messages
from .rendering import fit, plain

SNIPPET_MAX_CHARS = 160
TITLE_MAX_CHARS = 120
# Each reply stays well under what one message may hold.
SOURCES_MESSAGE_MAX_CHARS = 3500


def source_line(number: int, item: SourceItem) -> str:
    title = plain(fit(" ".join((item.title or item.source or item.uri or "source").split()), TITLE_MAX_CHARS))
    uri = item.uri.strip()
    label = f"<{uri.replace('<', '%3C').replace('>', '%3E').replace('|', '%7C')}|{title}>" if _is_web(uri) else f"*{title}*"
    snippet = " ".join(item.text.split())
    line = f"{number}. {label}"
    if snippet:
        line += f" — _{plain(fit(snippet, SNIPPET_MAX_CHARS)).replace('_', ' ')}_"
    return line


def sources_messages(items: tuple[SourceItem, ...]) -> list[str]:
    """The mrkdwn texts of the sources reply (usually one; more only for very many sources)."""
    if not items:
        return []
    texts: list[str] = []
    current = messages.sources_heading()
    for number, item in enumerate(items, start=1):
        line = source_line(number, item)
        if len(current) + 1 + len(line) > SOURCES_MESSAGE_MAX_CHARS:
            texts.append(current)
            current = line
        else:
            current += "\n" + line
    texts.append(current)
    return texts


def _is_web(uri: str) -> bool:
    return uri.startswith(("https://", "http://"))
