"""What a log line knows of where it comes from: the run id and conversation key of the run, and the platform."""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from core.events import AnswerDelta, Event, ToolCallStarted


class RunInfo:
    """The run a task works for. Mutable on purpose: tasks started inside a run (the streamer's editor)
    copy the context before the engine names the conversation, and must see it once named."""

    __slots__ = ("run_id", "conversation", "platform")

    def __init__(self, *, run_id: str, platform: str = "", conversation: str = "") -> None:
        self.run_id = run_id
        self.platform = platform
        self.conversation = conversation


_run: contextvars.ContextVar[RunInfo | None] = contextvars.ContextVar("relaybot_run", default=None)
# The platform whose events a task handles, outside any run too (the 429 and queue metrics use it).
_platform: contextvars.ContextVar[str] = contextvars.ContextVar("relaybot_platform", default="")


def new_run_id() -> str:
    return uuid.uuid4().hex


def conversation_label(*, platform: str, workspace: str, channel: str, thread: str = "") -> str:
    """A conversation key on one line: platform:workspace:channel[:thread]."""
    return ":".join(part for part in (platform, workspace, channel, thread) if part)


def current_run() -> RunInfo | None:
    return _run.get()


def current_platform() -> str:
    run = _run.get()
    return (run.platform if run is not None and run.platform else "") or _platform.get()


@contextmanager
def run_scope(*, run_id: str | None = None, platform: str = "", conversation: str = "") -> Iterator[RunInfo]:
    """Joins the run the caller bound (naming its conversation when given), or binds a new one for the block."""
    run = _run.get()
    if run is not None and run_id in (None, run.run_id):
        if conversation:
            run.conversation = conversation
        if platform and not run.platform:
            run.platform = platform
        yield run
        return
    run = RunInfo(run_id=run_id or new_run_id(), platform=platform, conversation=conversation)
    token = _run.set(run)
    try:
        yield run
    finally:
        _reset(_run, token)


def name_conversation(conversation: str) -> None:
    """Names the conversation of the run bound now (a resumed run knows it only once its state is read)."""
    run = _run.get()
    if run is not None:
        run.conversation = conversation


@contextmanager
def platform_scope(platform: str) -> Iterator[None]:
    """Everything in the block (and tasks it starts) handles this platform's events."""
    token = _platform.set(platform)
    try:
        yield
    finally:
        _reset(_platform, token)


def platform_context(platform: str) -> contextvars.Context:
    """A copy of the current context for this platform: tasks created with it, and theirs, know it."""
    context = contextvars.copy_context()
    context.run(_platform.set, platform)
    return context


def _reset(var: contextvars.ContextVar, token: contextvars.Token) -> None:  # type: ignore[type-arg]
    try:
        var.reset(token)
    except (ValueError, RuntimeError):
        # A run's generator finalised from another context (the loop's asyncgen finaliser): nothing
        # of ours was set there, so there is nothing to undo.
        pass


class RunContextFilter(logging.Filter):
    """Adds run_id and conversation (empty outside a run) to every record, and run_tag for text lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        run = _run.get()
        record.run_id = run.run_id if run is not None else ""
        record.conversation = run.conversation if run is not None else ""
        if run is None:
            record.run_tag = ""
        else:
            record.run_tag = f" [run {run.run_id}" + (f" {run.conversation}]" if run.conversation else "]")
        return True


@dataclass(kw_only=True)
class RunTrace:
    """One run as the answer line tells it: when the first text came, which tools ran, how long it took."""

    platform: str
    agent: str
    model: str
    started: float = field(default_factory=time.monotonic)
    first_text_at: float | None = None
    tools: list[str] = field(default_factory=list)

    def see(self, event: Event) -> None:
        if isinstance(event, AnswerDelta):
            if self.first_text_at is None and event.text:
                self.first_text_at = time.monotonic()
        elif isinstance(event, ToolCallStarted):
            self.tools.append(event.tool)

    @property
    def first_token_s(self) -> float | None:
        return None if self.first_text_at is None else self.first_text_at - self.started

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
