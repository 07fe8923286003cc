"""Split a document into token-bounded, overlapping chunks that remember their heading path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from core.tokens import get_token_counter

MIN_CHUNK_TOKENS = 16
# A chunk ends at the last paragraph break if that keeps at least this share of the chunk.
PARAGRAPH_CUT_MIN_FILL = 0.5
# Attempts to shrink an estimated cut (hard split, overlap tail) until it fits its budget.
FIT_ATTEMPTS = 6
# Each boundary between units may cost a separator token ("\n\n") when units are joined.
BOUNDARY_TOKENS = 1
HEADING_PATH_SEPARATOR = " › "

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$|^ {0,3}(#{1,6})[ \t]*$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_BREAK_RE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WHITESPACE_RE = re.compile(r"\s")

PARAGRAPH = 2
SENTENCE = 1


class TokenCounting(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """One piece of a document: its text, position, and the headings it sits under."""

    text: str
    order: int
    heading_path: tuple[str, ...]
    token_count: int
    title: str = ""

    @property
    def contextual_text(self) -> str:
        """The text prefixed with title and heading path, for embedding and display."""
        context = HEADING_PATH_SEPARATOR.join(p for p in (self.title, *self.heading_path) if p)
        return f"{context}\n\n{self.text}" if context else self.text


@dataclass(frozen=True, kw_only=True)
class _Section:
    start: int
    body_start: int
    end: int
    heading_path: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class _Unit:
    start: int
    end: int
    tokens: int
    strength: int  # how good a place to cut the end of this unit is


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _sections(text: str, title: str) -> list[_Section]:
    """Cut at ATX and setext headings outside fenced code; each section knows its heading path."""
    headings: list[tuple[int, int, int, str]] = []  # start, body_start, level, heading text
    offset = 0
    in_fence: str | None = None
    prev_line: tuple[int, str] | None = None  # the previous line if it could be a setext heading
    prev_blank = True
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        fence = _FENCE_RE.match(bare)
        if fence:
            marker = fence.group(1)
            in_fence = None if in_fence == marker else (in_fence or marker)
            prev_line, prev_blank = None, False
        elif in_fence is None:
            atx = _ATX_RE.match(bare)
            setext = _SETEXT_RE.match(bare)
            if atx:
                level = len(atx.group(1) or atx.group(3))
                headings.append((offset, offset + len(line), level, (atx.group(2) or "").strip()))
                prev_line, prev_blank = None, False
            elif setext and prev_line is not None:
                level = 1 if setext.group(1)[0] == "=" else 2
                headings.append((prev_line[0], offset + len(line), level, prev_line[1].strip()))
                prev_line, prev_blank = None, False
            else:
                is_blank = not bare.strip()
                prev_line = (offset, bare) if (not is_blank and prev_blank) else None
                prev_blank = is_blank
        offset += len(line)

    title_key = _normalise(title)
    sections: list[_Section] = []
    first_start = headings[0][0] if headings else len(text)
    if first_start > 0:
        sections.append(_Section(start=0, body_start=0, end=first_start, heading_path=()))
    stack: list[tuple[int, str]] = []
    for index, (start, body_start, level, name) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name))
        path = [n for _, n in stack if n]
        # The top heading usually repeats the title; the path says where *inside* the document.
        if path and _normalise(path[0]) == title_key:
            path = path[1:]
        end = headings[index + 1][0] if index + 1 < len(headings) else len(text)
        sections.append(_Section(start=start, body_start=body_start, end=end, heading_path=tuple(path)))
    return sections


def _spans(text: str, start: int, end: int, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """Non-blank pieces of text[start:end] between matches of pattern, as stripped absolute spans."""
    spans: list[tuple[int, int]] = []
    cursor = start
    for match in pattern.finditer(text, start, end):
        spans.append((cursor, match.start()))
        cursor = match.end()
    spans.append((cursor, end))
    result = []
    for s, e in spans:
        piece = text[s:e]
        stripped = piece.strip()
        if stripped:
            lead = len(piece) - len(piece.lstrip())
            result.append((s + lead, s + lead + len(stripped)))
    return result


def _paragraph_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Paragraph spans; a fenced code block stays one paragraph even with blank lines inside."""
    merged: list[tuple[int, int]] = []
    open_fence = False
    for s, e in _spans(text, start, end, _PARAGRAPH_BREAK_RE):
        fences = sum(1 for line in text[s:e].splitlines() if _FENCE_RE.match(line))
        if open_fence and merged:
            merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
        if fences % 2:
            open_fence = not open_fence
    return merged


class _Chunker:
    def __init__(self, text: str, counter: TokenCounting, max_tokens: int, overlap_tokens: int) -> None:
        self.text = text
        self.counter = counter
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        # Units leave room for the overlap carried into the chunk they start.
        self.unit_cap = max_tokens - overlap_tokens

    def count(self, start: int, end: int) -> int:
        return self.counter.count(self.text[start:end])

    def units(self, start: int, end: int) -> list[_Unit]:
        """Paragraphs, or sentences/lines of paragraphs too big, or hard cuts of sentences too big."""
        units: list[_Unit] = []
        for p_start, p_end in _paragraph_spans(self.text, start, end):
            tokens = self.count(p_start, p_end)
            if tokens <= self.unit_cap:
                units.append(_Unit(start=p_start, end=p_end, tokens=tokens, strength=PARAGRAPH))
                continue
            pieces = _spans(self.text, p_start, p_end, _SENTENCE_BREAK_RE)
            for s_start, s_end in pieces:
                s_tokens = self.count(s_start, s_end)
                if s_tokens <= self.unit_cap:
                    units.append(_Unit(start=s_start, end=s_end, tokens=s_tokens, strength=SENTENCE))
                else:
                    units.extend(self.hard_split(s_start, s_end, s_tokens))
            units[-1] = _Unit(start=units[-1].start, end=units[-1].end, tokens=units[-1].tokens, strength=PARAGRAPH)
        return units

    def hard_split(self, start: int, end: int, tokens: int) -> list[_Unit]:
        """Cut a span with no natural break into pieces of at most unit_cap tokens, at spaces if any."""
        pieces: list[_Unit] = []
        chars_per_token = max((end - start) / max(tokens, 1), 0.25)
        while start < end:
            # Only the tail that is estimated to fit is counted whole, so this stays linear.
            if (end - start) <= self.unit_cap * chars_per_token:
                remaining = self.count(start, end)
                if remaining <= self.unit_cap:
                    pieces.append(_Unit(start=start, end=end, tokens=remaining, strength=SENTENCE))
                    break
            target = max(1, int(self.unit_cap * chars_per_token * 0.95))
            for _ in range(FIT_ATTEMPTS):
                cut = min(end, start + target)
                space = self.text.rfind(" ", start + target // 2, cut)
                if space > start:
                    cut = space
                cut_tokens = self.count(start, cut)
                if cut_tokens <= self.unit_cap:
                    break
                target = max(1, int(target * self.unit_cap / cut_tokens * 0.9))
            else:
                cut = start + 1  # pathological text: one character always fits
                cut_tokens = self.count(start, cut)
            pieces.append(_Unit(start=start, end=cut, tokens=cut_tokens, strength=0))
            start = cut
            while start < end and self.text[start].isspace():
                start += 1
        return pieces

    def overlap_start(self, units: list[_Unit], first: int, last: int) -> tuple[int, int]:
        """Where the next chunk starts so that it repeats up to overlap_tokens of this one's end."""
        if self.overlap_tokens <= 0:
            return units[last].end, 0
        # Whole trailing units when they fit: their counts are already known.
        total, index = 0, last
        while index > first and total + units[index].tokens + BOUNDARY_TOKENS <= self.overlap_tokens:
            total += units[index].tokens + BOUNDARY_TOKENS
            index -= 1
        if index < last:
            return units[index + 1].start, total
        # Else a tail of the last unit, cut at a space, estimated then checked.
        unit = units[last]
        chars_per_token = (unit.end - unit.start) / max(unit.tokens, 1)
        target = int(self.overlap_tokens * chars_per_token)
        for _ in range(FIT_ATTEMPTS):
            begin = max(unit.start, unit.end - target)
            space = _WHITESPACE_RE.search(self.text, begin, unit.end)
            if space is not None and space.start() < unit.end - 1:
                begin = space.end()
            if begin >= unit.end:
                break
            tokens = self.count(begin, unit.end)
            if tokens <= self.overlap_tokens:
                return begin, tokens
            target = int(target * self.overlap_tokens / tokens * 0.9)
        return unit.end, 0

    def pack(self, units: list[_Unit]) -> list[tuple[int, int, int]]:
        """Greedily fill chunks with units; returns (start, end, token_count) spans."""
        chunks: list[tuple[int, int, int]] = []
        first = 0
        begin = units[0].start if units else 0
        carried = 0
        while first < len(units):
            total, last = carried, first - 1
            while last + 1 < len(units):
                extra = units[last + 1].tokens + (BOUNDARY_TOKENS if total else 0)
                if total + extra > self.max_tokens:
                    break
                total += extra
                last += 1
            last = max(last, first)  # a unit always fits by itself (units <= unit_cap)
            if last + 1 < len(units):
                last = self.prefer_paragraph_cut(units, first, last, carried)
            end = units[last].end
            tokens = self.count(begin, end)
            while tokens > self.max_tokens and last > first:
                last -= 1
                end = units[last].end
                tokens = self.count(begin, end)
            if tokens > self.max_tokens:  # the carried overlap pushed it over: drop the overlap
                begin = units[first].start
                tokens = self.count(begin, end)
            chunks.append((begin, end, tokens))
            if last + 1 >= len(units):
                break
            begin, carried = self.overlap_start(units, first, last)
            if begin >= units[last].end:
                begin, carried = units[last + 1].start, 0
            first = last + 1
        return chunks

    def prefer_paragraph_cut(self, units: list[_Unit], first: int, last: int, carried: int) -> int:
        """Move the end back to the last paragraph break if that still fills the chunk well."""
        if units[last].strength >= PARAGRAPH:
            return last
        filled = carried
        best = None
        for index in range(first, last):
            filled += units[index].tokens + BOUNDARY_TOKENS
            if units[index].strength >= PARAGRAPH and filled >= self.max_tokens * PARAGRAPH_CUT_MIN_FILL:
                best = index
        return best if best is not None else last


def chunk_document(
    text: str,
    *,
    title: str,
    max_tokens: int = 400,
    overlap_tokens: int = 50,
    counter: TokenCounting | None = None,
) -> list[Chunk]:
    """Chunk text at headings, then paragraphs, then sentences/lines, then hard cuts."""
    if max_tokens < MIN_CHUNK_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_CHUNK_TOKENS}, not {max_tokens}.")
    if not 0 <= overlap_tokens <= max_tokens // 2:
        raise ValueError(f"overlap_tokens must be between 0 and half of max_tokens, not {overlap_tokens}.")
    counter = counter if counter is not None else get_token_counter()
    text = text.replace("\r\n", "\n")
    chunker = _Chunker(text, counter, max_tokens, overlap_tokens)
    chunks: list[Chunk] = []
    for section in _sections(text, title):
        if not text[section.body_start : section.end].strip():
            continue  # a heading with nothing under it lives on in its children's paths
        units = chunker.units(section.start, section.end)
        for start, end, tokens in chunker.pack(units):
            chunks.append(
                Chunk(
                    text=text[start:end],
                    order=len(chunks),
                    heading_path=section.heading_path,
                    token_count=tokens,
                    title=title,
                )
            )
    return chunks
