"""Slack text: the model's Markdown for Slack's own Markdown rendering (pings neutralised, sizes bounded), shared
sentences formatted, and the sources reply."""

from __future__ import annotations

import re
from collections.abc import Sequence

from adapters import wording
from core.citations import Citation
from core.events import SourceItem

# An answer's message stays within this many characters: chat.update's limit for `text`, well inside the
# 12,000 Slack allows `markdown_text`.
MAX_MESSAGE_TEXT_CHARS = 4000
SECTION_TEXT_MAX_CHARS = 3000
ELLIPSIS = "…"
ZERO_WIDTH_SPACE = "\u200b"

_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_PING = re.compile(r"@(channel|here|everyone)\b", re.I)
# Slack's mention syntax: <!channel>, <!here>, <!everyone>, <!subteam^…>, <@U…> (also written escaped).
_MENTION_SYNTAX = re.compile(r"(<|&lt;)(?=[!@])", re.I)

SNIPPET_MAX_CHARS = 160
TITLE_MAX_CHARS = 120
# Each sources reply stays well under what one message may hold.
SOURCES_MESSAGE_MAX_CHARS = 3500


def escape(text: str) -> str:
    """Slack's three control characters; escaping `<` also defuses `<!channel>` and `<@U…>`."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def neutralise_pings(text: str) -> str:
    """`@channel`, `@here`, `@everyone` stay readable but can no longer notify anyone."""
    return _PING.sub(lambda m: "@" + ZERO_WIDTH_SPACE + m.group(1), text)


def safe_markdown(markdown: str) -> str:
    """The model's Markdown as Slack's `markdown_text` renders it, unconverted, but unable to notify anyone:
    Slack's mention syntax (`<!channel>`, `<!here>`, `<@U…>`, `<!subteam^…>`) and `@channel`, `@here`,
    `@everyone` stay readable with a zero-width space that breaks them, in code too."""
    return neutralise_pings(_MENTION_SYNTAX.sub(lambda m: m.group(1) + ZERO_WIDTH_SPACE, markdown))


def fit(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars`, marked with an ellipsis when cut, never splitting a code fence open."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - len(ELLIPSIS)]
    if cut.count("```") % 2 == 1:
        cut = cut[: max_chars - len(ELLIPSIS) - 3] + "```"
    return cut + ELLIPSIS


def markdown_text(markdown: str) -> str:
    """The `markdown_text` of one message (chat.postMessage, chat.update): pings neutralised, size bounded."""
    return fit(safe_markdown(markdown), MAX_MESSAGE_TEXT_CHARS)


def rendered_length(markdown: str) -> int:
    """How long Slack finds `markdown` as sent (the characters that neutralise pings count): the streamer's measure."""
    return len(safe_markdown(markdown))


def sentence(markdown: str) -> str:
    """One of our own (trusted) shared sentences as mrkdwn: `**bold**` becomes `*bold*`; mentions in it stay live."""
    return _BOLD.sub(lambda m: "*" + m.group(2) + "*", markdown)


def plain(text: str) -> str:
    """Untrusted text shown as-is inside mrkdwn (titles, snippets, tool names): escaped, no pings."""
    return neutralise_pings(escape(text))


def source_line(number: int, item: SourceItem) -> str:
    title = plain(fit(" ".join((item.title or item.source or item.uri or "source").split()), TITLE_MAX_CHARS))
    uri = item.uri.strip()
    label = f"<{uri.replace('<', '%3C').replace('>', '%3E').replace('|', '%7C')}|{title}>" if _is_web(uri) else f"*{title}*"
    snippet = " ".join(item.text.split())
    line = f"{number}. {label}"
    if snippet:
        line += f" — _{plain(fit(snippet, SNIPPET_MAX_CHARS)).replace('_', ' ')}_"
    return line


def sources_messages(citations: Sequence[Citation]) -> list[str]:
    """The mrkdwn texts of the sources reply, each cited source under its number (usually one message;
    more only for very many sources)."""
    if not citations:
        return []
    texts: list[str] = []
    current = f"*{wording.sources_title()}*"
    for citation in citations:
        line = source_line(citation.number, citation.item)
        if len(current) + 1 + len(line) > SOURCES_MESSAGE_MAX_CHARS:
            texts.append(current)
            current = line
        else:
            current += "\n" + line
    texts.append(current)
    return texts


def _is_web(uri: str) -> bool:
    return uri.startswith(("https://", "http://"))


def code_messages(code: str, *, max_chars: int) -> list[str]:
    """Untrusted text (e.g. a call's full arguments) as code blocks of at most `max_chars` each: escaped,
    pings and fences defused, cut at line ends where a line fits, never inside an escape."""
    body = plain(code.replace("```", "ˋˋˋ"))
    room = max_chars - len("```\n\n```")
    if room < 8:
        raise ValueError("max_chars leaves no room for code")
    pieces: list[str] = []
    for line in body.split("\n"):
        while len(line) > room:
            cut = _escape_safe_cut(line, room)
            pieces.append(line[:cut])
            line = line[cut:]
        pieces.append(line)
    chunks: list[str] = []
    current: list[str] = []
    size = -1
    for piece in pieces:
        if current and size + 1 + len(piece) > room:
            chunks.append("\n".join(current))
            current, size = [], -1
        current.append(piece)
        size += 1 + len(piece)
    chunks.append("\n".join(current))
    return ["```\n" + chunk + "\n```" for chunk in chunks]


def _escape_safe_cut(text: str, limit: int) -> int:
    """Where to cut `text` at most `limit` chars in, not splitting an escape like `&amp;`."""
    amp = text.rfind("&", max(0, limit - 4), limit)
    return amp if amp > 0 and ";" not in text[amp:limit] else limit
