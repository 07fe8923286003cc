"""Reading what users see: each question's outcome from the bot's messages, and the figures of one scenario run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

# The bot's sentences that end an answer it could not give all start with this sign (adapters/wording.py).
SENTENCE_SIGN = "⚠️"
# The one sentence without that sign: a question that could not be recorded (adapters/wording.database_unreachable).
DATABASE_SENTENCE = "I can't reach my database right now"
PLACEHOLDER = "thinking…"
CURSOR = "▌"
# What a Python traceback or a raw exception looks like once it has leaked into a chat message.
_TRACEBACK = re.compile(
    r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|\b[A-Z]\w*(?:Error|Exception)\b(?::|\()"
)
_SPACE = re.compile(r"\s+")


def squash(text: str) -> str:
    """Text without whitespace: splitting an answer over messages may move spaces and line breaks."""
    return _SPACE.sub("", text)


def leaks_traceback(text: str) -> bool:
    return bool(_TRACEBACK.search(text))


class Outcome(Enum):
    ANSWERED = "answered"  # the whole scripted answer is there, finished
    SENTENCE = "sentence"  # no whole answer, but the bot ended it with a sentence saying so
    LOST = "lost"  # nothing, a partial answer with no sentence, or still at "thinking…"


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One question as its asker sees it at the end."""

    outcome: Outcome
    duplicated: bool
    note_on_whole_answer: bool  # the whole answer is there, yet a failure/interrupted note was added
    texts: tuple[str, ...]


def begin_marker(marker: str) -> str:
    return f"Answer {marker} begins."


def end_marker(marker: str) -> str:
    return f"Answer {marker} ends."


def is_sentence(text: str) -> bool:
    return SENTENCE_SIGN in text or DATABASE_SENTENCE in text


def answer_part(texts: Sequence[str]) -> str:
    """The answer's own text, squashed: each message up to a sentence it ends with, sentence-only messages left out."""
    kept = [text.split(SENTENCE_SIGN, 1)[0] for text in texts if DATABASE_SENTENCE not in text]
    return squash("".join(kept))


def intact(expected: str, texts: Sequence[str]) -> bool:
    """Whether the answer text shown is the expected answer or a beginning of it, every piece once, nothing else
    (a delta appended twice, or a part posted again, breaks it even where the whole answer is also there)."""
    return squash(expected).startswith(answer_part(texts))


def read_answer(marker: str, expected: str | None, texts: Sequence[str], *, strict: bool = False) -> Reading:
    """`texts`: the bot's answer messages for the question, in order (approval messages excluded).
    `expected` None: the question needs no scripted answer, only an ending (any text, or a sentence).
    `strict`: text shown twice anywhere in the answer (see intact) counts as duplicated."""
    joined = "\n".join(texts)
    stuck = any(PLACEHOLDER in text or CURSOR in text for text in texts)
    sentence = any(is_sentence(text) for text in texts)
    if expected is None:
        whole = bool(texts) and not sentence
    else:
        whole = squash(expected) in squash(joined)
    sentences = [text for text in texts if is_sentence(text)]
    # The answer begun or ended twice, or the same closing sentence posted twice.
    duplicated = (joined.count(begin_marker(marker)) > 1 or joined.count(end_marker(marker)) > 1
                  or len(set(sentences)) < len(sentences))
    if strict and expected is not None and not intact(expected, texts):
        duplicated = True
    if stuck:
        outcome = Outcome.LOST
    elif whole:
        outcome = Outcome.ANSWERED
    elif sentence:
        outcome = Outcome.SENTENCE
    else:
        outcome = Outcome.LOST
    return Reading(outcome=outcome, duplicated=duplicated, note_on_whole_answer=whole and sentence,
                   texts=tuple(texts))


@dataclass(kw_only=True)
class Figures:
    """One scenario on one platform, as printed."""

    scenario: str
    platform: str
    questions: int = 0
    answered: int = 0  # answered exactly once, in full
    sentences: int = 0  # ended with a sentence instead of the answer
    lost: int = 0
    duplicated: int = 0
    approvals: int = 0  # approved calls
    tool_runs: int = 0  # runs of those calls (reminder rows)
    runs_per_call: list[int] = field(default_factory=list)
    tracebacks: int = 0  # user-visible
    log_tracebacks: int = 0  # in the processes' logs (not user-visible; reported for diagnosis)
    sentence_ok: bool = False  # whether a sentence is an acceptable ending in this scenario
    checks: list[tuple[str, bool]] = field(default_factory=list)  # further pass/fail checks of the scenario
    notes: list[str] = field(default_factory=list)
    not_run: str | None = None  # why, when the scenario could not run
    seconds: float = 0.0

    def add(self, reading: Reading) -> None:
        self.questions += 1
        if reading.duplicated:
            self.duplicated += 1
        if reading.outcome is Outcome.ANSWERED and not reading.duplicated:
            self.answered += 1
        elif reading.outcome is Outcome.SENTENCE and not reading.duplicated:
            self.sentences += 1
        elif reading.outcome is Outcome.LOST:
            self.lost += 1
        if reading.note_on_whole_answer:
            self.note("a failure/interrupted note was added to a whole answer")

    def note(self, text: str) -> None:
        """A note once, with a count when repeated."""
        for index, existing in enumerate(self.notes):
            base, _, count = existing.partition(" ×")
            if base == text:
                self.notes[index] = f"{text} ×{int(count or 1) + 1}"
                return
        self.notes.append(text)

    def check(self, name: str, passed: bool) -> None:
        self.checks.append((name, passed))

    @property
    def runs_per_approval(self) -> str:
        if not self.approvals:
            return "-"
        if self.runs_per_call and all(count == 1 for count in self.runs_per_call) and len(self.runs_per_call) == self.approvals:
            return "1"
        spread = ",".join(str(count) for count in sorted(set(self.runs_per_call))) or "0"
        return f"{self.tool_runs / self.approvals:.2f} (per call: {spread})"

    @property
    def passed(self) -> bool:
        if self.not_run is not None:
            return False
        ended = self.answered + (self.sentences if self.sentence_ok else 0)
        runs_ok = not self.approvals or self.runs_per_approval == "1"
        return (ended == self.questions and self.lost == 0 and self.duplicated == 0 and runs_ok
                and self.tracebacks == 0 and all(passed for _, passed in self.checks))
