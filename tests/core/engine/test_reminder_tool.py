"""create_reminder through two engines on one database: approved once, delivered once."""

from __future__ import annotations

import asyncio
from datetime import timezone
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.events import ApprovalRequired, Done
from core.reminders import ReminderService
from core.requests import Actor, ConversationKey
from core.store.db import Database
from core.tools import ToolServices, builtin_registry
from core.tools.reminders import CREATE_REMINDER
from tests.core.engine.support import resumed_run, events_of, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine


class Inbox:
    def __init__(self) -> None:
        self.delivered: list[tuple[ConversationKey, str, str]] = []

    async def approval_expired(self, *, continuation_id: str, message_refs: list[dict[str, Any]]) -> None:
        return None

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str, **_: Any) -> None:
        self.delivered.append((conversation, user, text))


async def test_a_due_reminder_fires_once_with_two_engines_running(db: Database, openai_emulator: OpenAIEmulator) -> None:
    inbox = Inbox()
    schedulers = [AsyncIOScheduler(timezone=timezone.utc) for _ in range(2)]
    engines = []
    services = []
    for index, scheduler in enumerate(schedulers):
        notifiers: dict[str, Any] = {"test": inbox}
        service = ReminderService(db, scheduler, notifiers, instance=f"bot-{index}")
        registry = builtin_registry()
        registry.register(CREATE_REMINDER)
        engine = make_engine(db, openai_emulator.base_url, registry=registry, tool_services=ToolServices(reminders=service))
        engines.append(engine)
        services.append(service)
        scheduler.start()
    try:
        openai_emulator.script(
            ToolCalls([Call("create_reminder", '{"text": "water the plants", "when": "in 1 second"}')]),
            Text("I'll remind you."),
        )
        [paused] = [e for e in await events_of(engines[0], request("remind me in a second")) if isinstance(e, ApprovalRequired)]
        assert inbox.delivered == []  # nothing is scheduled before a person approves
        resumed = [e async for e in resumed_run(engines[0], paused.continuation_id, {paused.calls[0].call_id: True}, actor=Actor(id="U1"))]
        assert isinstance(resumed[-1], Done)
        assert await services[1].rearm_all() == 1  # the second bot armed it from the table too
        for _ in range(250):
            if inbox.delivered:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        assert [text for _, _, text in inbox.delivered] == ["water the plants"]
        assert inbox.delivered[0][1] == "U1"
    finally:
        for scheduler in schedulers:
            scheduler.shutdown(wait=False)
