"""Helpers for tests that run `relaybot run` as a plain process: a free port, its health, one answer per platform."""

from __future__ import annotations

import socket

import aiohttp

from tests.e2e.slack_harness import ALICE, eventually
from tests.emulators.discord import DiscordEmulator
from tests.emulators.slack import SlackEmulator, app_mention_event


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def healthy(port: int) -> bool:
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                return response.status == 200
    except aiohttp.ClientError:
        return False


async def answer_once_on_each_platform(
    port: int, slack: SlackEmulator, discord: DiscordEmulator, *, channel: str, discord_channel: int, asker: int,
    question: str, answer: str,
) -> None:
    """A mention on Slack (HTTP mode, signed) and one on Discord, each answered with `answer`."""
    text = f"<@{slack.bot_user_id}> {question}"
    ts = slack.add_user_message(channel, text, ALICE)
    delivery = await slack.deliver_event(
        f"http://127.0.0.1:{port}/slack/events",
        app_mention_event(text=text, user=ALICE, channel=channel, ts=ts, team_id=slack.team_id),
    )
    assert delivery.status == 200
    assert await eventually(lambda: any(m.text == answer for m in slack.messages(channel)))
    asked = await discord.send_user_message(discord_channel, asker, question, mentions_bot=True)
    thread = await discord.wait_for(lambda: discord.thread_of(asked), what="thread", timeout=15)
    await discord.wait_for(lambda: any(m.content == answer for m in discord.messages(thread.id)), what="answer", timeout=15)
