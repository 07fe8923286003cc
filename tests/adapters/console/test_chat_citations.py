"""The terminal chat lists only the sources an answer cites, and names the citations it left out."""

from __future__ import annotations

import io

from adapters import wording
from adapters.console.chat import ConsoleChat
from core.store.db import Database
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine
from tests.support.retriever import InMemoryRetriever, MemoryDoc


async def test_chat_lists_the_cited_sources_and_names_what_it_left_out(db: Database, openai_emulator: OpenAIEmulator) -> None:
    retriever = InMemoryRetriever(docs=[
        MemoryDoc(title="Runbook", text="deploy with the pipeline", uri="https://wiki/runbook"),
        MemoryDoc(title="Freeze", text="deploy freeze in december", uri="https://wiki/freeze"),
    ])
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever)
    openai_emulator.script(Text("Use the pipeline [2] [7]."))
    lines = iter(["how do I deploy"])

    async def read_line(prompt: str) -> str | None:
        return next(lines, None)

    out = io.StringIO()
    await ConsoleChat(engine, read_line=read_line, out=out).run()
    shown = out.getvalue()
    assert wording.citations_removed((7,)) in shown
    listed = [line.strip() for line in shown.splitlines() if line.startswith("  [")]
    assert len(listed) == 1 and listed[0].startswith("[2] ")
