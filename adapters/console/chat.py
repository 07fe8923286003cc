"""`relaybot chat`: stream answers, show tool progress, ask approve/reject at the prompt, list sources; Ctrl-C stops."""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, TextIO, TypeVar

from adapters import wording
from adapters.console import wording as console_wording
from adapters.console.terminal import TerminalInput
from core.approvals import Decision, failed_click
from core.citations import cite
from core.engine import Engine
from core.events import (
    AnswerDelta,
    ApprovalRequired,
    Done,
    Event,
    Failed,
    RunStarted,
    SourceItem,
    Sources,
    Stopped,
    ToolCallFinished,
    ToolCallStarted,
)
from core.requests import Actor, ConversationKey, Reach, Request

PROMPT = "you> "
QUIT_WORDS = frozenset({"/quit", "/exit", ":q"})
# Nothing posts in a terminal after its run (a reminder would never be delivered), and there is no platform to
# read the conversation back from: tools that need either are not offered here.
TERMINAL_REACHES: frozenset[Reach] = frozenset()

log = logging.getLogger(__name__)

ReadLine = Callable[[str], Awaitable[str | None]]
T = TypeVar("T")


class _Quit(Exception):
    """Ctrl-C asked the chat to end while it was waiting for something."""


class ConsoleChat:
    """One terminal conversation at a time (/new starts another), for the user running the process."""

    def __init__(
        self, engine: Engine, *, read_line: ReadLine | None = None, out: TextIO = sys.stdout,
        agent_type: str | None = None, log_file: Path | None = None,
    ) -> None:
        self.engine = engine
        self.read_line = read_line or TerminalInput(out=out).read_line
        self.out = out
        self.agent_type = agent_type
        self.log_file = log_file
        user = getpass.getuser()
        self.actor = Actor(id=user, name=user)
        self.conversation = self._new_conversation()
        # The last answer's sources (source n is item n - 1) and the numbers it cited: what /sources lists.
        self.last_sources: tuple[SourceItem, ...] = ()
        self.last_cited: frozenset[int] = frozenset()
        # Ctrl-C: what is running now decides what a press does (interrupt()).
        self._quit = asyncio.Event()
        self._answering = False
        self._run_id: str | None = None
        self._stop_asked = False
        self._stop_task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        self._write(console_wording.greeting(self.log_file))
        try:
            while True:
                line = await self._unless_quit(self.read_line(PROMPT))
                if line is None or line.strip() in QUIT_WORDS:
                    break
                if line.strip().startswith("/"):
                    self._command(line.strip())
                elif line.strip():
                    await self._answer(line)
        except _Quit:
            pass
        self._write("\n")

    def interrupt(self) -> None:
        """Ctrl-C. While an answer runs, the first press stops it through the engine, as the Stop button does (the
        run ends as stopped, its text so far kept and marked); a press while idle, or a second one, quits."""
        if self._answering and not self._stop_asked:
            self._stop_asked = True
            if self._run_id is not None:
                self._stop_task = asyncio.get_running_loop().create_task(self._stop(self._run_id))
            return  # before the run has started, it is stopped as soon as it does (show())
        self._quit.set()

    # ----- commands --------------------------------------------------------------------------------

    def _command(self, line: str) -> None:
        """A line that starts with a slash: answered here, the model never asked."""
        word = line.split()[0].lower()
        if word == "/help":
            self._write(console_wording.help_text())
        elif word == "/new":
            self.conversation = self._new_conversation()
            self.last_sources, self.last_cited = (), frozenset()
            self._write(console_wording.new_conversation())
        elif word == "/sources":
            self._write(self._sources_text())
        else:
            self._write(console_wording.unknown_command(word))

    def _sources_text(self) -> str:
        if not self.last_sources:
            return console_wording.no_sources_yet()
        lines = [f"{wording.sources_title()}:"]
        lines += [_source_line(number, item, cited=number in self.last_cited)
                  for number, item in enumerate(self.last_sources, start=1)]
        return "\n".join(lines) + "\n"

    def _new_conversation(self) -> ConversationKey:
        return ConversationKey(platform="console", workspace=self.actor.id, channel="terminal", thread=uuid.uuid4().hex)

    # ----- answers ---------------------------------------------------------------------------------

    async def _answer(self, question: str) -> None:
        request = Request(
            question=question, conversation=self.conversation, user=self.actor, agent_type=self.agent_type,
            reaches=TERMINAL_REACHES,
        )
        self._answering, self._run_id, self._stop_asked = True, None, False
        try:
            await self._unless_quit(self.show(self.engine.ask(request)))
        finally:
            self._answering, self._run_id = False, None
            if self._stop_task is not None:
                await asyncio.wait({self._stop_task})
                self._stop_task = None

    async def _stop(self, run_id: str) -> None:
        try:
            result = await self.engine.runs.stop(run_id, actor=self.actor)
        except Exception:
            # The answer goes on; the person is told, and a second Ctrl-C still quits.
            log.warning("could not stop run %s", run_id, exc_info=True)
            self._write(console_wording.stop_failed())
            return
        if result.outcome != "stopping":
            self._write(console_wording.stop_refused(result.message))

    async def show(self, events: AsyncIterator[Event]) -> None:
        """Print one run's events; an approval prompt continues the same run."""
        self._write("bot> ")
        sources: tuple[SourceItem, ...] = ()
        printed: list[str] = []
        while True:
            approval: ApprovalRequired | None = None
            async for event in events:
                match event:
                    case RunStarted():
                        self._started(event.run_id)
                    case AnswerDelta():
                        printed.append(event.text)
                        self._write(event.text)
                    case ToolCallStarted():
                        self._write(f"\n  🔧 {event.tool}({json.dumps(event.arguments, ensure_ascii=False)})…")
                    case ToolCallFinished():
                        self._write(f" {event.status}\n")
                    case ApprovalRequired():
                        approval = event
                    case Sources():
                        sources = self.last_sources = event.items
                        self.last_cited = frozenset()
                    case Done():
                        self._done(event, printed, sources)
                    case Stopped():
                        # The text shown so far stays; the engine's sentence marks where it stopped.
                        self._write(f"\n{event.message}\n")
                    case Failed():
                        self._write(f"\n⚠️  {event.message}\n")
            if approval is None:
                return
            events = await self._decide(approval)

    def _started(self, run_id: str) -> None:
        self._run_id = run_id
        if self._stop_asked and self._stop_task is None:
            # Ctrl-C came before the run had an id to stop.
            self._stop_task = asyncio.get_running_loop().create_task(self._stop(run_id))

    def _done(self, event: Done, printed: list[str], sources: tuple[SourceItem, ...]) -> None:
        # A terminal cannot take back what it printed: a citation of no source is named instead.
        left_out = cite("".join(printed), sources).removed
        cited = cite(event.answer, sources)
        self.last_cited = frozenset(citation.number for citation in cited.citations)
        self._write("\n")
        if left_out:
            self._write(wording.citations_removed(left_out) + "\n")
        if cited.citations:
            self._write(f"\n{wording.sources_title()}:\n")
        for citation in cited.citations:
            self._write(_source_line(citation.number, citation.item) + "\n")

    async def _decide(self, approval: ApprovalRequired) -> AsyncIterator[Event]:
        """Ask for each call's decision at the prompt, then continue the run with them. Ctrl-C here quits: the
        paused run waits for a decision (and expires) as a run paused on any platform does."""
        self._answering = False
        decisions = await self._ask_decisions(approval)
        self._answering, self._run_id, self._stop_asked = True, None, False
        self._write("bot> ")
        result = await self.engine.approvals.submit(approval.continuation_id, decisions, actor=self.actor)
        return result.events if result.events is not None else _one(failed_click(result))

    async def _ask_decisions(self, approval: ApprovalRequired) -> dict[str, Decision]:
        decisions = {}
        for call in approval.calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            answer = await self.read_line(f"\nApprove {call.tool}({arguments})? [y/N, or a reason to decline] ")
            answer = (answer or "").strip()
            approved = answer.lower() in ("y", "yes")
            comment = "" if approved or answer.lower() in ("", "n", "no") else answer
            decisions[call.call_id] = Decision(approved=approved, actor=self.actor.display, comment=comment)
        return decisions

    async def _unless_quit(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`'s result; raises _Quit (`work` cancelled: an answer's run keeps what it did) when Ctrl-C quits."""
        task = asyncio.ensure_future(work)
        quit_wait = asyncio.ensure_future(self._quit.wait())
        try:
            await asyncio.wait({task, quit_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            quit_wait.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        if task.cancelled() and self._quit.is_set():
            raise _Quit
        return task.result()

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


async def _one(event: Event) -> AsyncIterator[Event]:
    yield event


def _source_line(number: int, item: SourceItem, *, cited: bool = False) -> str:
    """One source as the chat lists it; `*` marks one the last answer cited (/sources)."""
    where = f" — {item.uri}" if item.uri else ""
    return f" {'*' if cited else ' '}[{number}] {item.title}{where}"
