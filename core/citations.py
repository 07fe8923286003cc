"""Citations in a finished answer: `[n]` that match no source removed, and the sources cited, by their numbers; streamed text held from where one may begin."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.events import SourceItem

# One bracket of citation numbers: [3], [^3] (a footnote), [1, 4] or [1; 4]. Three digits at most,
# so a year in brackets is left alone. Not after a backslash (an escaped bracket) or `]` (the label
# of a reference link, `[text][1]`), nor before `(` (an inline link, `[1](https://…)`).
_BRACKET = r"\[\s*\^?\d{1,3}(?:\s*[,;]\s*\^?\d{1,3})*\s*\]"
_GROUP = re.compile(rf"(?<![\\\]])(?:{_BRACKET})+(?!\()")
_TOKEN = re.compile(r"\^?\d{1,3}")
_BRACKET_RE = re.compile(_BRACKET)
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})", re.M)
_BACKTICKS = re.compile(r"`+")
# After a citation removed from a list, what makes the comma before it redundant.
_LIST_GOES_ON = re.compile(r"[ \t]*(?:[,.;:)]|(?:and|or)\b)")
# Bare and angle-bracketed URLs: a `[1]` inside one is part of the address.
_URL = re.compile(r"<[a-z][a-z0-9+.-]*:[^>\s]*>|\bhttps?://\S+", re.I)


@dataclass(frozen=True, kw_only=True)
class Citation:
    """A source the answer cites, under the number the answer uses for it."""

    number: int
    item: SourceItem


@dataclass(frozen=True, kw_only=True)
class CitedAnswer:
    """The answer as it should be kept and shown, the sources it cites (by number), and the numbers removed."""

    text: str
    citations: tuple[Citation, ...]
    removed: tuple[int, ...]


def cite(text: str, sources: Sequence[SourceItem]) -> CitedAnswer:
    """Check every citation of `text` against `sources` (source n is `sources[n - 1]`).

    Citations are `[n]`, runs of them (`[1][4]`), lists (`[1, 4]`) and footnotes (`[^1]`). A number
    that names no source is removed (a bracket left empty goes, with the space before it); text in
    code spans and blocks, URLs, links (`[1](url)`, `[text][1]`) and definitions at a line's start
    (`[1]: …`) are left alone. The citations are the sources named by the remaining numbers, in
    ascending order, each once — the same result on every surface that calls this.
    """
    protected = _Spans(_protected_spans(text))
    count = len(sources)
    cited: set[int] = set()
    removed: list[int] = []
    out: list[str] = []
    kept_until = 0
    for match in _GROUP.finditer(text):
        start, end = match.span()
        if protected.cover(start) or _is_definition(text, start, end):
            continue
        brackets = []
        for bracket in _BRACKET_RE.finditer(match.group(0)):
            tokens = _TOKEN.findall(bracket.group(0))
            valid = [token for token in tokens if 1 <= int(token.lstrip("^")) <= count]
            cited.update(int(token.lstrip("^")) for token in valid)
            removed.extend(int(token.lstrip("^")) for token in tokens if token not in valid)
            if len(valid) == len(tokens):
                brackets.append(bracket.group(0))
            elif valid:
                brackets.append("[" + ", ".join(valid) + "]")
        replacement = "".join(brackets)
        if replacement == match.group(0):
            continue
        if not replacement:
            start, end = _with_space(text, start, end)
        out.append(text[kept_until:start])
        out.append(replacement)
        kept_until = end
    out.append(text[kept_until:])
    citations = tuple(Citation(number=n, item=sources[n - 1]) for n in sorted(cited))
    return CitedAnswer(text="".join(out), citations=citations, removed=tuple(dict.fromkeys(removed)))


def _with_space(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of a citation removed whole: with parentheses around it alone (`([9])`), and the spaces
    before it (`see [9].` → `see.`), or, at a line's start, the spaces after it."""
    if start > 0 and text[start - 1] == "(" and text[end : end + 1] == ")":
        start, end = start - 1, end + 1
    before = start
    while before > 0 and text[before - 1] in " \t":
        before -= 1
    if before > 0 and text[before - 1] != "\n":
        if text[before - 1] == "," and _LIST_GOES_ON.match(text, end):
            before -= 1  # `[2], [9] and [4]` → `[2] and [4]`
        return before, end
    after = end
    while after < len(text) and text[after] in " \t":
        after += 1
    return start, after


def _is_definition(text: str, start: int, end: int) -> bool:
    """`[1]: https://…` at the start of a line defines a reference link; it cites nothing."""
    if text[end : end + 1] != ":":
        return False
    # Back over the blanks before it only (not to the line's start): each citation's own, so linear overall.
    position = start
    while position > 0 and text[position - 1] != "\n" and text[position - 1].isspace():
        position -= 1
    return position == 0 or text[position - 1] == "\n"


class _Spans:
    """Whether a position falls in any of some (start, end) spans, in O(log n): spans sorted by start, each with
    the furthest end of it and the spans before it (so overlapping spans answer right too)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        ordered = sorted(spans)
        self._starts = [start for start, _ in ordered]
        self._reach: list[int] = []
        furthest = 0
        for _, end in ordered:
            furthest = max(furthest, end)
            self._reach.append(furthest)

    def cover(self, position: int) -> bool:
        index = bisect.bisect_right(self._starts, position) - 1
        return index >= 0 and self._reach[index] > position


def _protected_spans(text: str) -> list[tuple[int, int]]:
    """Where citations are not looked for: fenced code blocks (to their closing fence, or the end),
    inline code spans, and URLs."""
    spans: list[tuple[int, int]] = []
    position = 0
    while True:
        opening = _FENCE.search(text, position)
        if opening is None:
            break
        fence = opening.group(1)
        closer = re.compile(rf"^[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        line_end = text.find("\n", opening.end())
        if line_end == -1:
            spans.append((opening.start(), len(text)))
            break
        closing = closer.search(text, line_end + 1)
        end = len(text) if closing is None else closing.end()
        spans.append((opening.start(), end))
        position = end
    spans.extend(_code_spans(text, _Spans(spans)))
    # One index of the blocks and code spans serves every URL.
    code = _Spans(spans)
    spans.extend(m.span() for m in _URL.finditer(text) if not code.cover(m.start()))
    return spans


def _code_spans(text: str, blocks: _Spans) -> list[tuple[int, int]]:
    """Inline code: a run of n backticks up to the next run of exactly n (an unmatched run is literal)."""
    spans = []
    runs = [m for m in _BACKTICKS.finditer(text) if not blocks.cover(m.start())]
    # The runs of each length, by index, so the next run of an opening's length is a bisect away.
    by_length: dict[int, list[int]] = {}
    for index, run in enumerate(runs):
        by_length.setdefault(len(run.group(0)), []).append(index)
    index = 0
    while index < len(runs):
        opening = runs[index]
        same = by_length[len(opening.group(0))]
        following = bisect.bisect_right(same, index)
        if following == len(same):
            index += 1
            continue
        closing = same[following]
        spans.append((opening.start(), runs[closing].end()))
        index = closing + 1
    return spans


# Where a citation may begin in streamed text: a bracket, maybe a footnote caret, then a digit.
_MAY_CITE = re.compile(r"\[\s*\^?\d")
# What cite() may remove before a citation it drops (`foo, ([9])`): a comma, spaces, an opening parenthesis.
_BEFORE_CITATION = ",( \t"
# Text held back at a piece's end while it might still become a citation (`see [`); longer runs are let go.
_MAX_TAIL = 32


class HeldCitations:
    """Streamed answer text checked against sources not known until the answer ends (a stream cannot take back
    what it sent): text goes out as it comes until a citation may begin; from there it is held, and `finish`
    gives the rest as cite() leaves it. Linear in the text: each piece is scanned once, plus a short tail."""

    def __init__(self) -> None:
        self._sent: list[str] = []
        self._pending = ""
        self._holding = False

    def add(self, text: str) -> str:
        """What of `text` (and of the tail held before it) may be sent now."""
        if self._holding:
            self._pending += text
            return ""
        pending = self._pending + text
        found = _MAY_CITE.search(pending)
        if found is not None:
            self._holding = True
            cut = _start_before(pending, found.start())
        else:
            cut = _start_before(pending, _open_tail(pending))
        out, self._pending = pending[:cut], pending[cut:]
        if out:
            self._sent.append(out)
        return out

    def finish(self, sources: Sequence[SourceItem]) -> str:
        """The rest of a finished answer, its citations of no source removed, as cite() would on the whole."""
        sent, pending = "".join(self._sent), self._pending
        self._pending = ""
        cleaned = cite(sent + pending, sources).text
        if cleaned.startswith(sent):
            return cleaned[len(sent):]
        return cite(pending, sources).text  # what went out early is kept; only the held part is cleaned

    def flush(self) -> str:
        """The rest as it is, for an answer with no sources to check against (a pause, a failure)."""
        pending, self._pending = self._pending, ""
        return pending


def _open_tail(text: str) -> int:
    """Where an unfinished citation at the end of `text` (`[`, `[ ^`) begins; len(text) when there is none."""
    end = len(text)
    position = end
    while position > 0 and end - position < _MAX_TAIL and text[position - 1] in "^ \t\n":
        position -= 1
    if position > 0 and text[position - 1] == "[":
        return position - 1
    return end


def _start_before(text: str, index: int) -> int:
    """`index` moved back over what cite() may remove with a citation starting there."""
    position = index
    while position > 0 and index - position < _MAX_TAIL and text[position - 1] in _BEFORE_CITATION:
        position -= 1
    return position
