"""A tool is offered only where the asking surface can do what it needs (core.requests.Reach): a reminder where
something posts later, read_conversation where the platform can be read back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.requests import EVERY_REACH, Reach
from core.store.db import Database
from core.tools import builtin_registry
from core.tools.read_conversation import read_conversation_tool
from core.tools.reminders import CREATE_REMINDER
from tests.core.engine.support import request
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine


def offered(body: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


async def test_a_tool_is_offered_only_where_the_surface_reaches_what_it_needs(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    registry = builtin_registry()
    registry.register(CREATE_REMINDER)
    registry.register(read_conversation_tool())
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    openai_emulator.script(Text("one"), Text("two"), Text("three"))

    await engine.answer(request("remind me"))
    await engine.answer(replace(request("remind me", channel="C2"), reaches=frozenset({Reach.READ_BACK})))
    await engine.answer(replace(request("remind me", channel="C3"), reaches=frozenset()))

    everywhere, read_back_only, terminal = (offered(body) for body in openai_emulator.chat_requests)
    assert {"create_reminder", "read_conversation", "calculator"} <= everywhere
    assert "read_conversation" in read_back_only and "create_reminder" not in read_back_only
    assert "calculator" in terminal and not {"create_reminder", "read_conversation"} & terminal
    assert request("x").reaches == EVERY_REACH  # a platform that says nothing reaches everything, as before
