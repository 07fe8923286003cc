"""Runs the real SlackAdapter (HTTP or Socket Mode) against the Slack and OpenAI emulators."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from core.engine import Engine
from core.retrieval.retriever import Retriever
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.tools import ToolRegistry, ToolServices, ToolSpec, builtin_registry
from core.tools.read_conversation import PlatformReaders
from tests.emulators.slack import SlackEmulator, app_mention_event, channel_message_event, dm_message_event
from tests.support.engine import make_engine
from tests.support.ports import ports_for

POLL_LIMIT_S = 15.0
ALICE = "U0000ALICE"
BOB = "U0000BOB"
CAROL = "U0000CAROL"


@dataclass(kw_only=True)
class SlackBot:
    adapter: SlackAdapter
    engine: Engine
    http: HttpServer
    live: LiveMessages  # this bot's live-answer records, owned by it as by a process of its own

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}/slack/events"

    async def stop(self) -> None:
        await self.adapter.stop_accepting()
        await self.adapter.close()
        await self.http.stop()


async def start_bot(
    db: Database, slack: SlackEmulator, llm_url: str, *, registry: ToolRegistry | None = None,
    retriever: Retriever | None = None, socket_mode: bool = False, **overrides: Any,
) -> SlackBot:
    settings: dict[str, Any] = {
        "slack_bot_token": slack.bot_token,
        "slack_signing_secret": slack.signing_secret,
        "slack_api_url": slack.api_url,
        "slack_app_token": slack.app_token if socket_mode else None,
        "http_port": 0,
        # Most tests check post+update; native streaming's own tests turn it on ("auto").
        "slack_native_streaming": "off",
    }
    settings.update(overrides)
    # As bot/runtime.py wires it: tools read conversations through the adapter's reader.
    readers = PlatformReaders()
    engine = make_engine(db, llm_url, registry=registry, retriever=retriever,
                         tool_services=ToolServices(conversations=readers), **settings)
    http = HttpServer(host="127.0.0.1", port=0)
    ports = ports_for(db)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports, http=http, time_scale=slack.time_scale)
    readers.register(adapter.platform, adapter.reader)
    await http.start()
    await adapter.start()
    assert isinstance(ports.live, LiveMessages)
    return SlackBot(adapter=adapter, engine=engine, http=http, live=ports.live)


def deploy_registry(deploys: list[str] | None = None) -> ToolRegistry:
    """The built-in tools plus `deploy`, a side effect that needs approval; each run's env lands in `deploys`."""
    async def deploy(context: Any, arguments: dict[str, Any]) -> str:
        if deploys is not None:
            deploys.append(arguments["env"])
        return f"deployed to {arguments['env']}"

    tools = builtin_registry()
    tools.register(ToolSpec(
        name="deploy", description="Deploy the service",
        parameters={"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
        run=deploy, requires_approval=True,
    ))
    return tools


async def eventually(predicate: Callable[[], bool], *, limit_s: float = POLL_LIMIT_S) -> bool:
    """Polls a condition (bounded): work in other tasks must finish first."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def mention(slack: SlackEmulator, channel: str, text: str, *, user: str = ALICE,
            thread_ts: str | None = None, user_team: str | None = None) -> dict[str, Any]:
    """A person's message mentioning the bot, stored in the emulator, as its app_mention event;
    `user_team`: the person's own workspace in a Slack Connect channel."""
    full = f"<@{slack.bot_user_id}> {text}"
    ts = slack.add_user_message(channel, full, user, thread_ts)
    return app_mention_event(text=full, user=user, channel=channel, ts=ts, team_id=slack.team_id,
                             thread_ts=thread_ts, user_team=user_team)


def dm(slack: SlackEmulator, channel: str, text: str, *, user: str = ALICE,
       thread_ts: str | None = None, user_team: str | None = None) -> dict[str, Any]:
    ts = slack.add_user_message(channel, text, user, thread_ts)
    return dm_message_event(text=text, user=user, channel=channel, ts=ts, team_id=slack.team_id,
                            thread_ts=thread_ts, user_team=user_team)


def channel_message(slack: SlackEmulator, channel: str, text: str, *, user: str = ALICE,
                    thread_ts: str | None = None, user_team: str | None = None,
                    subtype: str | None = None) -> dict[str, Any]:
    ts = slack.add_user_message(channel, text, user, thread_ts)
    return channel_message_event(text=text, user=user, channel=channel, ts=ts, team_id=slack.team_id,
                                 thread_ts=thread_ts, user_team=user_team, subtype=subtype)


def bot_replies(slack: SlackEmulator, channel: str, thread_ts: str) -> list[Any]:
    """This bot's messages in the thread (not other apps')."""
    return [m for m in slack.thread(channel, thread_ts) if m.bot_id == slack.bot_id]


def final_answer_texts(slack: SlackEmulator, channel: str) -> list[str]:
    return [m.text for m in slack.messages(channel) if m.is_bot and not m.blocks]


def model_request_text(request: dict[str, Any]) -> str:
    parts = []
    for message in request.get("messages", []):
        content = message.get("content")
        parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)
