"""Slack start-up, readiness and shutdown against the emulator: one auth.test per process, a Socket Mode close that
does not wait for Slack, readiness as /readyz reports it, 429s counted by method, and run ids on the streamer's lines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.slack import adapter as slack_adapter
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, bot_replies, channel_message, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.observe import records_with, run_context_on, sample

CHANNEL = "C0LIFECYC"
# Guards against a hang only (a close that waited for Slack would never return here): not a measurement.
HANG_GUARD_S = 30.0


async def test_a_burst_of_events_at_start_asks_auth_test_once(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        # Messages in a channel the bot does not follow: each still goes through Bolt's authorization.
        events = [channel_message(slack, "C0BURST", f"chatter {index}", user=ALICE) for index in range(100)]
        deliveries = await asyncio.gather(*(slack.deliver_event(bot.url, event) for event in events))
        assert all(delivery.status == 200 for delivery in deliveries)
        assert slack.call_names().count("auth.test") == 1
    finally:
        await bot.stop()


async def test_socket_mode_close_does_not_wait_for_slack_to_answer_the_close(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, socket_mode=True)
    try:
        assert await slack.wait_socket_connected(timeout_s=5.0)
        assert await bot.adapter.readiness() is None
        client = bot.adapter._socket_handler.client  # type: ignore[union-attr]
        never = asyncio.Event()
        waited: list[str] = []

        async def unanswered(*args: Any, **kwargs: Any) -> None:
            # A Slack that never acknowledges the close: slack_sdk's close() and disconnect() wait here.
            waited.append("close handshake")
            await never.wait()

        monkeypatch.setattr(client, "disconnect", unanswered)
        monkeypatch.setattr(client.current_session, "close", unanswered)
        await asyncio.wait_for(bot.adapter.close(), HANG_GUARD_S)

        assert client.closed and client.aiohttp_client_session.closed
        assert await bot.adapter.readiness() == "the Socket Mode connection is not open"
        # The socket is really closed: the emulator sees the connection go.
        assert await eventually(lambda: slack.socket_connection_count == 0)
        assert waited in ([], ["close handshake"])  # at most the close frame was offered, never waited for
    finally:
        await bot.http.stop()


async def test_http_mode_readiness_is_the_last_auth_test(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        assert await bot.adapter.readiness() is None
        monkeypatch.setattr(slack_adapter, "AUTH_CHECK_INTERVAL_S", 0.0)  # every maintain() checks
        slack.fail_next("auth.test", error="invalid_auth")
        await bot.adapter.maintain()
        assert await bot.adapter.readiness() == "auth.test failed (invalid_auth)"
        await bot.adapter.maintain()
        assert await bot.adapter.readiness() is None
    finally:
        await bot.stop()


async def test_429s_are_counted_by_method_and_the_streamers_lines_carry_the_run(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    limited = sample("relaybot_rate_limited_total", platform="slack", method="chat.postMessage")
    try:
        with run_context_on(caplog):
            # The placeholder's post: a 429, then a failure the editor task logs and retries.
            slack.fail_next("chat.postMessage", retry_after_s=1)
            slack.fail_next("chat.postMessage", error="internal_error")
            openai_emulator.script(Text("Here it is."))
            event = mention(slack, CHANNEL, "anything?")
            assert (await slack.deliver_event(bot.url, event)).status == 200
            assert await eventually(lambda: any(m.text == "Here it is." for m in bot_replies(slack, CHANNEL, event["ts"])))
            assert await eventually(lambda: bool(records_with(caplog, event="answer")))
        assert sample("relaybot_rate_limited_total", platform="slack", method="chat.postMessage") == limited + 1
        [answer] = records_with(caplog, event="answer")
        conversation = f"slack:{slack.team_id}:{CHANNEL}:{event['ts']}"
        assert answer.platform == "slack" and answer.conversation == conversation
        # The editor task's own lines (a retried update or final), from a task created before the run named its conversation.
        editor = [r for r in caplog.records if r.name == "adapters.streaming.streamer"]
        assert editor, [r.getMessage() for r in caplog.records]
        assert all((r.run_id, r.conversation) == (answer.run_id, conversation) for r in editor)
    finally:
        await bot.stop()
