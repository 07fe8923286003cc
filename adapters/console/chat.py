"""`relaybot chat`: stream answers, show tool progress, ask approve/reject at the prompt, list sources."""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
import uuid
from typing import AsyncIterator, Awaitable, Callable, TextIO

from adapters import wording
from core.approvals import Decision, failed_click
from core.citations import cite
from core.engine import Engine
from core.events import (
    AnswerDelta,
    ApprovalRequired,
    Done,
    Event,
    Failed,
    SourceItem,
    Sources,
    ToolCallFinished,
    ToolCallStarted,
)
from core.requests import Actor, ConversationKey, Request

PROMPT = "you> "
QUIT_WORDS = frozenset({"/quit", "/exit", ":q"})

ReadLine = Callable[[str], Awaitable[str | None]]


async def read_stdin(prompt: str) -> str | None:
    """input() in a thread, so the event loop keeps running while the user types."""
    try:
        return await asyncio.to_thread(input, prompt)
    except EOFError:
        return None


class ConsoleChat:
    """One terminal conversation per process run."""

    def __init__(self, engine: Engine, *, read_line: ReadLine = read_stdin, out: TextIO = sys.stdout, agent_type: str | None = None) -> None:
        self.engine = engine
        self.read_line = read_line
        self.out = out
        self.agent_type = agent_type
        user = getpass.getuser()
        self.actor = Actor(id=user, name=user)
        self.conversation = ConversationKey(platform="console", workspace=user, channel="terminal", thread=uuid.uuid4().hex)

    async def run(self) -> None:
        self._write("relaybot chat — type a question; /quit to leave.\n")
        while True:
            line = await self.read_line(PROMPT)
            if line is None or line.strip() in QUIT_WORDS:
                self._write("\n")
                return
            if not line.strip():
                continue
            request = Request(question=line, conversation=self.conversation, user=self.actor, agent_type=self.agent_type)
            await self.show(self.engine.ask(request))

    async def show(self, events: AsyncIterator[Event]) -> None:
        """Print one run's events; an approval prompt continues the same run."""
        self._write("bot> ")
        sources: tuple[SourceItem, ...] = ()
        printed: list[str] = []
        while True:
            approval: ApprovalRequired | None = None
            async for event in events:
                match event:
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
                        sources = event.items
                    case Done():
                        # A terminal cannot take back what it printed: a citation of no source is named instead.
                        left_out = cite("".join(printed), sources).removed
                        cited = cite(event.answer, sources)
                        self._write("\n")
                        if left_out:
                            self._write(wording.citations_removed(left_out) + "\n")
                        if cited.citations:
                            self._write(f"\n{wording.sources_title()}:\n")
                        for citation in cited.citations:
                            where = f" — {citation.item.uri}" if citation.item.uri else ""
                            self._write(f"  [{citation.number}] {citation.item.title}{where}\n")
                    case Failed():
                        self._write(f"\n⚠️  {event.message}\n")
            if approval is None:
                return
            decisions = await self._ask_decisions(approval)
            self._write("bot> ")
            result = await self.engine.approvals.submit(approval.continuation_id, decisions, actor=self.actor)
            events = result.events if result.events is not None else _one(failed_click(result))

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

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


async def _one(event: Event) -> AsyncIterator[Event]:
    yield event
