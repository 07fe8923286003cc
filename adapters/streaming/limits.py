"""The knobs of one streamed answer: message size, edit pacing, decorations, final retries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .splitter import CLOSE_RESERVE_CHARS, MIN_SPLIT_CHARS

MIN_EDIT_INTERVAL_S = 1.0
# Edits of a message that has shown text for a while come further apart: the next waits that long times
# EDIT_INTERVAL_GROWTH (at least MIN_EDIT_INTERVAL_S, at most MAX_EDIT_INTERVAL_S). A reader sees the first
# words at once and the message grows steadily; a long answer costs a few calls more, not one a second.
EDIT_INTERVAL_GROWTH = 1.0
MAX_EDIT_INTERVAL_S = 4.0
# An answer whose first text comes sooner than this is posted with it; later, the placeholder (or the
# status line) is posted meanwhile.
PLACEHOLDER_AFTER_S = 1.0
# ... while another sign already shows the answer is coming (a thread's status, a 👀): a placeholder would cost a post
# and make the first text an edit (a budget that is scarcer in a burst), so it waits this long instead.
SIGNED_PLACEHOLDER_AFTER_S = 10.0
# Permanent failures (the message or channel is gone) before a final text is given up; 429s and
# transient failures never count: they only mean "later".
MAX_FINAL_ATTEMPTS = 8
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
CALL_TIMEOUT_S = 30.0
STATUS_MAX_CHARS = 200
# Below this a message cannot hold a useful slice of text next to cursor and status line.
MIN_MESSAGE_CHARS = 120


@dataclass(frozen=True, kw_only=True)
class StreamLimits:
    """`max_chars` bounds every text sent, cursor and status line included (Slack ≈ 3,900,
    Discord 2,000); the streamer rolls over into a new message before it.

    `placeholder_after_s`: how long the streamer waits for the answer's first text before it posts the
    placeholder (or status line) instead; 0 posts it at once. `signed_placeholder_after_s`: how long when another
    sign of the answer shows meanwhile (the streamer's `sign_shown`)."""

    max_chars: int
    min_edit_interval_s: float = MIN_EDIT_INTERVAL_S
    edit_interval_growth: float = EDIT_INTERVAL_GROWTH
    max_edit_interval_s: float = MAX_EDIT_INTERVAL_S
    placeholder_after_s: float = PLACEHOLDER_AFTER_S
    signed_placeholder_after_s: float = SIGNED_PLACEHOLDER_AFTER_S
    cursor: str = " ▌"
    placeholder: str = "_thinking…_"
    empty_text: str = "_(no answer)_"  # shown when an answer ends with no text at all
    max_final_attempts: int = MAX_FINAL_ATTEMPTS
    backoff_base_s: float = BACKOFF_BASE_S
    backoff_cap_s: float = BACKOFF_CAP_S
    call_timeout_s: float = CALL_TIMEOUT_S
    # How long the platform finds a text: a transport that escapes characters counts the escapes.
    measure: Callable[[str], int] = len

    def __post_init__(self) -> None:
        if self.max_chars < MIN_MESSAGE_CHARS:
            raise ValueError(f"max_chars must be at least {MIN_MESSAGE_CHARS}")
        if len(self.placeholder) > self.max_chars // 2 or not self.placeholder.strip():
            raise ValueError("placeholder must be non-blank and at most half of max_chars")
        if len(self.empty_text) > self.max_chars or not self.empty_text.strip():
            raise ValueError("empty_text must be non-blank and fit in max_chars")
        if len(self.cursor) > self.max_chars // 10:
            raise ValueError("cursor is too long for max_chars")
        if self.max_final_attempts < 1:
            raise ValueError("max_final_attempts must be at least 1")
        intervals = (self.min_edit_interval_s, self.backoff_base_s, self.placeholder_after_s, self.edit_interval_growth,
                     self.max_edit_interval_s, self.signed_placeholder_after_s)
        if min(intervals) < 0 or self.call_timeout_s <= 0:
            raise ValueError("intervals must not be negative and call_timeout_s must be positive")

    @property
    def status_max_chars(self) -> int:
        return min(STATUS_MAX_CHARS, self.max_chars // 4)

    def live_room(self, status: str | None) -> int:
        """Chars of answer text a message may hold while streaming, next to its decorations."""
        decorations = len(self.cursor) + 1 + CLOSE_RESERVE_CHARS
        if status:
            decorations += 1 + len(status)
        return max(MIN_SPLIT_CHARS, self.max_chars - decorations)

    def edit_interval_s(self, shown_for_s: float) -> float:
        """How long the next edit of a message waits, once it has shown text for `shown_for_s` seconds."""
        grown = self.edit_interval_growth * max(0.0, shown_for_s)
        return max(self.min_edit_interval_s, min(max(self.max_edit_interval_s, self.min_edit_interval_s), grown))

    def backoff_s(self, attempt: int) -> float:
        """Delay after failed attempt number `attempt` (1-based): exponential, capped."""
        return min(self.backoff_cap_s, self.backoff_base_s * 2 ** max(0, attempt - 1))
