"""The terminal chat: streamed text, tool progress, approval at the prompt, numbered sources."""

from __future__ import annotations

import io
from typing import Iterator

from adapters.console.chat import ConsoleChat
from core.store.db import Database
from core.tools import ToolSpec, builtin_registry
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc


def _lines(answers: list[str]):
    feed: Iterator[str] = iter(answers)

    async def read_line(prompt: str) -> str | None:
        return next(feed, None)

    return read_line


async def test_chat_streams_asks_approval_and_lists_sources(db: Database, openai_emulator: OpenAIEmulator) -> None:
    runs: list[dict] = []

    async def deploy(ctx, arguments):
        runs.append(arguments)
        return "deployed"

    registry = builtin_registry()
    registry.register(
        ToolSpec(
            name="deploy",
            description="Deploy the app",
            parameters={"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
            run=deploy,
            requires_approval=True,
        )
    )
    retriever = InMemoryRetriever(docs=[MemoryDoc(title="Runbook", text="deploy to prod with the pipeline", uri="https://wiki/runbook")])
    engine = make_engine(db, openai_emulator.base_url, registry=registry, retriever=retriever)
    openai_emulator.script(ToolCalls([Call("deploy", '{"env": "prod"}')], text="Deploying. "), Text("Done [1]."))
    out = io.StringIO()
    chat = ConsoleChat(engine, read_line=_lines(["deploy to prod please", "y"]), out=out)
    await chat.run()
    shown = out.getvalue()
    assert runs == [{"env": "prod"}]
    assert "Approve deploy" not in shown  # the prompt goes through read_line, not the output
    assert "🔧 deploy" in shown and "Done [1]." in shown
    assert "[1] Runbook — https://wiki/runbook" in shown
