"""Every Slack Web API call of a bot shares one HTTP session: answers' calls reuse connections instead of opening
(and, against slack.com, TLS-handshaking) one per call."""

from __future__ import annotations

from tests.e2e.slack_harness import bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

CHANNEL = "C0000GENRL"


async def test_three_answers_one_after_another_reuse_the_bots_connections(
    db, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        before = len(slack.calls)
        for n in range(3):
            openai_emulator.script(Text(f"Answer number {n}."))
            event = mention(slack, CHANNEL, f"question {n}")
            await slack.deliver_event(bot.url, event)
            assert await eventually(lambda: any(
                m.text == f"Answer number {n}." for m in bot_replies(slack, CHANNEL, event["ts"])))
        calls = slack.calls[before:]
        connections = {call.connection for call in calls}
        assert "" not in connections
        # One after another, each call finds an earlier one's connection idle (HTTP keep-alive; a sign's call beside
        # a post may need a second); a client without a session of its own opens a connection for every call.
        assert len(calls) >= 6 and len(connections) <= 3, (len(calls), connections)
    finally:
        await bot.stop()
