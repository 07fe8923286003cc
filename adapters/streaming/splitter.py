"""Splits long text into message-sized parts at natural boundaries, keeping code fences balanced and characters (grapheme clusters) whole."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# `regex`'s \X is Unicode's extended grapheme cluster (UAX #29: ZWJ sequences, skin tones, variation selectors,
# flag pairs, combining marks, Hangul), kept current with each Unicode release; tiktoken needs the package anyway.
import regex

FENCE = "```"
# Room kept free in a part that is cut inside a code block, for the "\n```" that closes it.
CLOSE_RESERVE_CHARS = len("\n" + FENCE)
FENCE_INFO_MAX_CHARS = 20
MIN_SPLIT_CHARS = 40
# A paragraph or line break is used only when it keeps at least this share of the room,
# so parts do not come out tiny; a space needs much less, a word is cut only as a last resort.
PARAGRAPH_MIN_SHARE = 0.5
LINE_MIN_SHARE = 0.3
SPACE_MIN_SHARE = 0.1

_FENCE_INFO = re.compile(r"[A-Za-z0-9_+#.-]+")
_GRAPHEME = regex.compile(r"\X")


@dataclass(frozen=True, kw_only=True)
class SplitPart:
    """One message's worth: `body` is a slice of the original; `reopen`/`close` repair fences."""

    reopen: str
    body: str
    close: str
    fence_after: str | None  # info string of the code block still open after body, else None

    @property
    def text(self) -> str:
        return self.reopen + self.body + self.close


def open_fence(text: str, *, start_fence: str | None = None) -> str | None:
    """The info string ("" for none) of the code block open at the end of `text`, else None.

    Chat renderers pair ``` markers wherever they are, so parity decides; `start_fence` says
    that `text` begins inside a block.
    """
    count = text.count(FENCE)
    if count == 0:
        return start_fence
    if (count % 2 == 1) == (start_fence is not None):
        return None
    # The last marker opened the block that is still open.
    info_start = text.rfind(FENCE) + len(FENCE)
    line_end = text.find("\n", info_start)
    info = text[info_start : line_end if line_end != -1 else len(text)].strip()
    if len(info) <= FENCE_INFO_MAX_CHARS and _FENCE_INFO.fullmatch(info):
        return info
    return ""


def fence_closer(text: str) -> str:
    """What closes a code block left open at the end of `text`."""
    return FENCE if text == "" or text.endswith("\n") else "\n" + FENCE


def fence_reopener(info: str) -> str:
    return FENCE + info + "\n"


def close_open_fence(text: str, *, start_fence: str | None = None) -> str:
    """`text`, with the code block it leaves open (if any) closed."""
    if open_fence(text, start_fence=start_fence) is None:
        return text
    return text + fence_closer(text)


def split_parts(
    text: str, max_chars: int, *, start_fence: str | None = None, measure: Callable[[str], int] = len
) -> list[SplitPart]:
    """Cuts `text` into parts whose `text` measures at most `max_chars`.

    Cuts prefer a paragraph break, then a line break, then a space; a word is cut only when no
    space is near. A part cut inside a code block closes it, and the next part reopens it with
    the same language, so every part renders on its own. Joining the bodies gives `text` back.
    `measure` is how long the platform will find a part (e.g. after escaping); parts whose body
    would be under MIN_SPLIT_CHARS are the one exception to the bound.
    """
    if max_chars < MIN_SPLIT_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_SPLIT_CHARS}")
    parts: list[SplitPart] = []
    fence = start_fence
    start = 0
    while True:
        reopen = "" if fence is None else fence_reopener(fence)
        room = max_chars - len(reopen)
        remaining = text[start:]
        fence_at_end = open_fence(remaining, start_fence=fence)
        close = "" if fence_at_end is None else fence_closer(remaining)
        if len(remaining) + len(close) <= room and measure(reopen + remaining + close) <= max_chars:
            parts.append(
                SplitPart(reopen=reopen, body=remaining, close=close, fence_after=fence_at_end)
            )
            return parts
        body_room = room - CLOSE_RESERVE_CHARS
        while True:
            end = start + _cut_position(remaining, body_room)
            body = text[start:end]
            after = open_fence(body, start_fence=fence)
            close = "" if after is None else fence_closer(body)
            part = SplitPart(reopen=reopen, body=body, close=close, fence_after=after)
            measured = measure(part.text)
            if measured <= max_chars or body_room <= MIN_SPLIT_CHARS:
                break
            # Text that grows when rendered: shrink the room in proportion, always by at least one.
            body_room = max(MIN_SPLIT_CHARS, min(body_room - 1, body_room * max_chars // measured))
        parts.append(part)
        fence = after
        start = end


def split_for_limit(text: str, max_chars: int) -> list[str]:
    """`text` as message texts of at most `max_chars` each (see `split_parts`)."""
    return [part.text for part in split_parts(text, max_chars)]


def _cut_position(text: str, room: int) -> int:
    """Where to end a part of `text` that may hold `room` chars (0 < result <= room)."""
    for separator, min_share in (
        ("\n\n", PARAGRAPH_MIN_SHARE),
        ("\n", LINE_MIN_SHARE),
        (" ", SPACE_MIN_SHARE),
    ):
        found = text.rfind(separator, 0, room)
        # A space followed by a combining mark is part of one character with it.
        if found != -1 and found + len(separator) >= max(1, room * min_share) and \
                grapheme_start(text, found + len(separator)) == found + len(separator):
            return found + len(separator)
    # A cut inside a character (👨‍👩‍👧‍👦, 👍🏽, 🇫🇷, é as e + accent) would show two broken halves.
    cut = grapheme_start(text, room) or room  # one character longer than a part is cut where it must be
    # Never cut through a ``` marker: each half would pair with the wrong fence.
    while cut > 1 and text[cut - 1] == "`" and text[cut] == "`":
        cut -= 1
    return cut


def grapheme_start(text: str, index: int) -> int:
    """The start of the user-perceived character (grapheme cluster) that holds `text[index]`; `index` when one starts
    there. `text` must begin at a character's start."""
    if index <= 0 or index >= len(text):
        return index
    for cluster in _GRAPHEME.finditer(text):
        if cluster.end() > index:
            return cluster.start()
    return index
