"""What one native stream has sent and may send next: its state, a mention held back at an append's end, the task chunks of a status line, and a refusal's error code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError

# A ping or mention cut between two appends (`@chan` + `nel`) must be neutralised whole, and an append can
# never be taken back: text from a `@`, `<` or `&` among the last characters waits for the next append.
HOLD_BACK_CHARS = 12
HOLD_FROM = ("@", "<", "&")


@dataclass(frozen=True)


class UnseenStart:
    """A chat.startStream sent without seeing its outcome: when (epoch seconds) and the text it carried."""

    since: float
    text: str
    found: str | None = None  # the stream's message once a look-up found it


@dataclass(kw_only=True)


class Stream:
    ts: str
    key: str | None
    started_at: float
    appended: str = ""  # the rendered Markdown Slack has been sent
    task: tuple[str, str] | None = None  # (id, title) of the task shown as running
    tasks: int = 0
    live: bool = True


def sendable(rendered: str, appended: str) -> str:
    """What of `rendered` may be sent now: all of it but a ping or mention that may still be growing at its
    end (never less than already sent)."""
    tail_start = max(0, len(rendered) - HOLD_BACK_CHARS)
    held = max((rendered.rfind(mark, tail_start) for mark in HOLD_FROM), default=-1)
    return rendered[: max(len(appended), held if held >= 0 else len(rendered))]


def task_chunks(stream: Stream, status: str | None) -> list[dict[str, Any]]:
    """The task chunks that show a change of the status line: the running task completes, a new one runs."""
    if (stream.task[1] if stream.task else None) == status:
        return []
    chunks: list[dict[str, Any]] = []
    if stream.task is not None:
        chunks.append({"type": "task_update", "id": stream.task[0], "title": stream.task[1], "status": "complete"})
        stream.task = None
    if status:
        stream.tasks += 1
        stream.task = (f"task_{stream.tasks}", status)
        chunks.append({"type": "task_update", "id": stream.task[0], "title": status, "status": "in_progress"})
    return chunks


def error_code(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str(exc.response.get("error") or "error")
    return type(exc).__name__
