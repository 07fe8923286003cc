"""Runs a real DiscordAdapter + Engine against the Discord and OpenAI emulators for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from adapters.discord import DiscordAdapter, DiscordTuning
from core.engine import Engine
from core.store.db import Database
from core.retrieval.retriever import Retriever
from core.tools import ToolRegistry, ToolServices, ToolSpec, builtin_registry
from core.tools.read_conversation import PlatformReaders
from core.tools.registry import ToolContext
from tests.emulators.discord import DiscordEmulator, StoredMessage, point_discord_py_at
from tests.emulators.openai_server import OpenAIEmulator
from tests.support.engine import make_engine
from tests.support.ports import ports_for

WAIT_S = 10.0


def tuning_for(time_scale: float) -> DiscordTuning:
    """The adapter's windows scaled like the emulator's, so budgets stay honest but fast."""
    return DiscordTuning(
        guild_ready_timeout_s=0.05,
        budget_window_s=5.0 * time_scale,
        min_edit_interval_s=1.0 * time_scale,
        backoff_base_s=0.5 * time_scale,
        global_window_s=1.0 * time_scale,
        ready_timeout_s=10.0,
    )


@dataclass(kw_only=True)
class World:
    guild_id: int
    channel_id: int
    alice: int
    bob: int


def make_world(dc: DiscordEmulator) -> World:
    guild_id = dc.add_guild("Test guild")
    return World(
        guild_id=guild_id,
        channel_id=dc.add_channel(guild_id, "general"),
        alice=dc.add_user("alice"),
        bob=dc.add_user("bob"),
    )


@dataclass(kw_only=True)
class DeployTool:
    """A side-effect tool needing approval; counts its runs."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    async def run(self, context: ToolContext, arguments: dict[str, Any]) -> str:
        self.runs.append(arguments)
        return f"deployed to {arguments.get('env')}"

    def registry(self) -> ToolRegistry:
        registry = builtin_registry()
        registry.register(
            ToolSpec(
                name="deploy",
                description="Deploy the service",
                parameters={"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
                run=self.run,
                requires_approval=True,
            )
        )
        return registry


def bot_settings(dc: DiscordEmulator, **overrides: Any) -> dict[str, Any]:
    return {
        "discord_token": dc.token,
        "discord_api_base": dc.api_base,
        "discord_gateway_url": dc.gateway_url,
        **overrides,
    }


@asynccontextmanager
async def running_bot(
    dc: DiscordEmulator,
    db: Database,
    openai: OpenAIEmulator,
    *,
    registry: ToolRegistry | None = None,
    retriever: Retriever | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[DiscordAdapter, Engine]]:
    # As bot/runtime.py wires it: tools read conversations through the adapter's reader.
    readers = PlatformReaders()
    engine = make_engine(
        db, openai.base_url, registry=registry, retriever=retriever, tool_services=ToolServices(conversations=readers),
        **bot_settings(dc, **overrides),
    )
    adapter = DiscordAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), tuning=tuning_for(dc.time_scale))
    readers.register(adapter.platform, adapter.reader)
    # point_discord_py_at restores discord.py's globals that the adapter's settings changed.
    with point_discord_py_at(dc):
        await adapter.start()
        try:
            yield adapter, engine
        finally:
            await adapter.close()


def bot_messages(dc: DiscordEmulator, channel_id: int) -> list[StoredMessage]:
    return [m for m in dc.messages(channel_id) if m.author_id == dc.bot_user_id]


async def wait_for_text(
    dc: DiscordEmulator, channel_id: int, text: str, *, timeout: float = WAIT_S
) -> list[StoredMessage]:
    """Waits until the bot's messages in a channel, joined, equal `text`."""

    def joined() -> list[StoredMessage] | None:
        found = [m for m in bot_messages(dc, channel_id) if not m.components and not m.embeds]
        return found if "".join(m.content for m in found) == text else None

    return await dc.wait_for(joined, timeout, what=f"answer {text[:40]!r} in {channel_id}")


def approval_message(dc: DiscordEmulator, channel_id: int) -> StoredMessage | None:
    # An answer's Stop button (rb:s:…) is no approval.
    found = [m for m in bot_messages(dc, channel_id) if any(not i.startswith("rb:s:") for i in button_ids(m))]
    return found[-1] if found else None


def button_ids(message: StoredMessage, *, enabled_only: bool = False) -> list[str]:
    ids: list[str] = []
    for row in message.components:
        for button in row.get("components", []):
            if not enabled_only or not button.get("disabled"):
                ids.append(button["custom_id"])
    return ids

