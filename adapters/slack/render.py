"""Slack text: the model's Markdown as mrkdwn (formatting converted, pings neutralised, sizes bounded), shared
sentences formatted, and the sources reply."""

from __future__ import annotations

import re

from adapters import wording
from core.events import SourceItem

# chat.update answers msg_too_long beyond this many characters of text.
MAX_MESSAGE_TEXT_CHARS = 4000
SECTION_TEXT_MAX_CHARS = 3000
ELLIPSIS = "…"
ZERO_WIDTH_SPACE = "\u200b"

_FENCED = re.compile(r"```[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_PLACEHOLDER = re.compile("\x00(\\d+)\x00")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+|mailto:[^\s)]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
_QUOTE = re.compile(r"^(\s*)&gt;", re.M)
_PING = re.compile(r"@(channel|here|everyone)\b", re.I)
_BOLD_MARK = "\x01"

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


def to_mrkdwn(markdown: str) -> str:
    """Converts Markdown (bold, italics, strike, code, links, headings, lists, quotes) to mrkdwn."""
    protected: list[str] = []

    def protect(rendered: str) -> str:
        protected.append(rendered)
        return f"\x00{len(protected) - 1}\x00"

    def code_block(match: re.Match[str]) -> str:
        # Slack shows a language tag as code, so it is dropped.
        body = match.group(1)
        return protect("```\n" + neutralise_pings(escape(body.rstrip("\n"))) + "\n```")

    text = _FENCED.sub(code_block, markdown)
    text = _INLINE_CODE.sub(lambda m: protect(neutralise_pings(escape(m.group(0)))), text)
    text = escape(text)
    text = _LINK.sub(lambda m: protect(f"<{m.group(2)}|{_link_label(m.group(1))}>"), text)
    text = _HEADING.sub(lambda m: _BOLD_MARK + _strip_bold(m.group(1)) + _BOLD_MARK, text)
    text = _BOLD.sub(lambda m: _BOLD_MARK + m.group(2) + _BOLD_MARK, text)
    text = _ITALIC_STAR.sub(lambda m: "_" + m.group(1) + "_", text)
    text = _STRIKE.sub(lambda m: "~" + m.group(1) + "~", text)
    text = text.replace(_BOLD_MARK, "*")
    text = _BULLET.sub(lambda m: m.group(1) + "• ", text)
    text = _QUOTE.sub(lambda m: m.group(1) + ">", text)
    text = neutralise_pings(text)
    return _PLACEHOLDER.sub(lambda m: protected[int(m.group(1))], text)


def fit(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars`, marked with an ellipsis when cut, never splitting a code fence open."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - len(ELLIPSIS)]
    if cut.count("```") % 2 == 1:
        cut = cut[: max_chars - len(ELLIPSIS) - 3] + "```"
    return cut + ELLIPSIS


def message_text(markdown: str) -> str:
    """The mrkdwn text of one message, bounded by what chat.update accepts."""
    return fit(to_mrkdwn(markdown), MAX_MESSAGE_TEXT_CHARS)


def rendered_length(markdown: str) -> int:
    """How long Slack finds `markdown` once rendered (escapes count): the streamer's measure."""
    return len(to_mrkdwn(markdown))


def sentence(markdown: str) -> str:
    """One of our own (trusted) shared sentences as mrkdwn: `**bold**` becomes `*bold*`; mentions in it stay live."""
    return _BOLD.sub(lambda m: "*" + m.group(2) + "*", markdown)


def plain(text: str) -> str:
    """Untrusted text shown as-is inside mrkdwn (titles, snippets, tool names): escaped, no pings."""
    return neutralise_pings(escape(text))


def _link_label(label: str) -> str:
    return label.replace("|", "¦").replace("*", "")


def _strip_bold(text: str) -> str:
    return text.replace("**", "").replace("__", "")


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
    current = f"*{wording.sources_title()}*"
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
