"""The Slack emulator's message shortcuts (`message_action`) against a real slack_bolt AsyncApp: signed like clicks,
the message as Slack shows it, and the response_url's ephemeral reply in the message's thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import SlackEmulator

CHANNEL = "C0000SHCUT"
CALLBACK = "emulator_shortcut"


async def eventually(predicate: Callable[[], bool], limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


@pytest.fixture
async def bolt_app(slack_emulator: SlackEmulator) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A Bolt app's URL, and the shortcut bodies it received."""
    slack = slack_emulator
    app = AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), signing_secret=slack.signing_secret)
    seen: list[dict[str, Any]] = []

    @app.shortcut(CALLBACK)
    async def on_shortcut(ack: Callable, body: dict, respond: Callable) -> None:  # type: ignore[type-arg]
        await ack()
        seen.append(body)
        await respond(text=f"shortcut on {body['message']['ts']} by {body['user']['id']}", response_type="ephemeral")

    runner = web.AppRunner(app.web_app(path="/slack/events"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events", seen
    await runner.cleanup()


async def test_a_message_shortcut_reaches_bolt_signed_and_its_reply_is_ephemeral_in_the_thread(
    slack_emulator: SlackEmulator, bolt_app: tuple[str, list[dict[str, Any]]]
) -> None:
    slack = slack_emulator
    bolt_url, seen = bolt_app
    root = slack.add_user_message(CHANNEL, "a question", "U0000ALICE")
    reply = await AsyncWebClient(token=slack.bot_token, base_url=slack.api_url).chat_postMessage(
        channel=CHANNEL, thread_ts=root, text="an answer",
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "an answer"}}],
    )
    payload = slack.message_shortcut(CHANNEL, reply["ts"], user="U0000BOB", callback_id=CALLBACK)
    assert payload["type"] == "message_action" and payload["callback_id"] == CALLBACK
    assert payload["message_ts"] == reply["ts"] and payload["channel"]["id"] == CHANNEL
    assert payload["message"]["bot_id"] == slack.bot_id and payload["message"]["blocks"][0]["type"] == "section"
    assert payload["message"]["thread_ts"] == root

    assert (await slack.deliver_interaction(bolt_url, payload, sign=False)).status == 401
    assert (await slack.deliver_interaction(bolt_url, payload)).status == 200
    assert await eventually(lambda: bool(slack.ephemerals))
    [told] = slack.ephemerals
    assert told.user == "U0000BOB" and told.channel == CHANNEL and told.thread_ts == root
    assert told.text == f"shortcut on {reply['ts']} by U0000BOB"
    assert [body["callback_id"] for body in seen] == [CALLBACK]
