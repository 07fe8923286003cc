"""How one answer's text is laid out into messages: where the current message starts, what it shows live, the part a roll-over seals, and the final's parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .limits import StreamLimits
from .splitter import close_open_fence, fence_closer, fence_reopener, open_fence, split_parts
from .transport import LiveText

# Shown in a message left over when a corrected final text needs fewer messages than were used.
VACATED_MESSAGE_TEXT = "…"


@dataclass(frozen=True, kw_only=True)
class Ending:
    kind: Literal["finish", "fail", "interrupt"]
    text: str | None


class Layout:
    """The answer's text (all of it, as appended so far) over its messages: the messages before the current one
    are sealed; the current one shows the text from `base` on, reopening the code block open there (`fence`)."""

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self.base = 0  # where the current (last) message's text starts in the answer
        self.fence: str | None = None  # code block open where the current message starts

    def has_text(self, text: str) -> bool:
        """The current message's share of `text` is answer text, not only whitespace."""
        return bool(text[self.base :].strip())

    def needs_roll_over(self, text: str, status: str | None) -> bool:
        reopen = self._reopener()
        room = self._limits.live_room(status)
        if len(reopen) + len(text) - self.base > room:
            return True
        return self._limits.measure(reopen + text[self.base :]) > room

    def seal(self, text: str, status: str | None) -> str:
        """The current message's final slice (it is full); the next message starts after it."""
        room = self._limits.live_room(status)
        part = split_parts(text[self.base :], room, start_fence=self.fence, measure=self._limits.measure)[0]
        self.base += len(part.body)
        self.fence = part.fence_after
        return part.text

    def live_text(self, text: str, status: str | None) -> LiveText:
        body = text[self.base :]
        shown_body = (self._reopener() + body) if body.strip() else ""
        return LiveText(self._decorated(text, status), body=shown_body, status=status)

    def final_targets(self, ending: Ending, text: str, *, sealed: list[str], messages: int) -> list[str]:
        """The texts the answer's messages must end with: `sealed` ones first, then the ending's own, laid out
        afresh where a corrected answer changes sealed text; messages left over (of `messages`) are vacated."""
        if ending.kind == "finish":
            final = text if ending.text is None else ending.text
            if final.startswith(text[: self.base]):
                rest = final[self.base :]
                parts = split_parts(rest, self._limits.max_chars, start_fence=self.fence, measure=self._limits.measure)
                targets = sealed + [part.text for part in parts]
            else:
                # A corrected answer that changes text already sealed: lay it out afresh.
                targets = self._texts(final)
        elif ending.kind == "fail":
            targets = sealed + self._texts(ending.text or "")
        else:
            shown = self._reopener() + text[self.base :]
            note = ending.text or ""
            if shown.strip():
                note = close_open_fence(shown).rstrip() + "\n\n" + note
            targets = sealed + self._texts(note)
        targets = [target if target.strip() else self._limits.empty_text for target in targets]
        targets += [VACATED_MESSAGE_TEXT] * (messages - len(targets))
        return targets

    def _decorated(self, text: str, status: str | None) -> str:
        body = text[self.base :]
        if body.strip():
            live = self._reopener() + body
            if open_fence(live) is not None:
                # Close the block for display, so the cursor is not shown as code.
                live += fence_closer(live) + "\n" + self._limits.cursor.strip()
            else:
                live += self._limits.cursor
        else:
            live = self._limits.placeholder
        if status:
            live += "\n" + status
        return live

    def _reopener(self) -> str:
        return "" if self.fence is None else fence_reopener(self.fence)

    def _texts(self, text: str) -> list[str]:
        return [part.text for part in split_parts(text, self._limits.max_chars, measure=self._limits.measure)]
