"""A burst of Slack questions over the signs' budgets: the status and the 👀 are sent only while their budgets have
calls (never a 429), every answer is still complete, and every 👀 that went up comes down — its removal waiting for
its own budget. Real Bolt and Postgres on the Slack and OpenAI emulators, Slack time scaled."""

from __future__ import annotations

import asyncio

import pytest

from adapters.slack.working import REACTION
from core.store.db import Database
from tests.e2e.slack_harness import bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.emulators.slack.limits import MethodLimit

pytestmark = pytest.mark.timeout(120)

TIME_SCALE = 0.05  # a Slack minute lasts 3 real seconds
QUESTIONS = 12
# As told to the bot (SLACK_STATUS_PER_MINUTE): 6 a minute, so a burst of one (ten seconds' calls).
STATUS_PER_MINUTE = 6
ANSWER = "Every answer arrives whole."


async def test_a_burst_past_the_status_budget_gets_no_429_and_every_sign_that_went_up_comes_down(
    db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    limits = {
        "assistant.threads.setStatus": MethodLimit(calls=STATUS_PER_MINUTE, window_s=60.0, burst=1),
        # Slack's documented tiers: reactions.add Tier 3, reactions.remove Tier 2 (small bursts).
        "reactions.add": MethodLimit(calls=50, window_s=60.0, burst=5),
        "reactions.remove": MethodLimit(calls=20, window_s=60.0, burst=2),
    }
    openai_emulator.script_fn(lambda body: Text(ANSWER, chunk_chars=4, delay_s=0.05))
    async with SlackEmulator(time_scale=TIME_SCALE, limits=limits) as slack:
        bot = await start_bot(db, slack, openai_emulator.base_url, slack_status_per_minute=STATUS_PER_MINUTE)
        try:
            events = [mention(slack, f"C00SIGN{n:03d}", f"question {n}") for n in range(QUESTIONS)]
            deliveries = await asyncio.gather(*(slack.deliver_event(bot.url, event) for event in events))
            assert all(delivery.status == 200 for delivery in deliveries)

            def answered() -> bool:
                return all(any(ANSWER in (m.text or "") for m in bot_replies(slack, e["channel"], e["ts"]))
                           for e in events)

            assert await eventually(answered, limit_s=60)
            statuses = [s for s in slack.statuses if s.status]
            added = [c for c in slack.calls if c.method == "reactions.add" and c.error is None]
            assert 1 <= len(statuses) < QUESTIONS  # the budget let one (or a refill's few) go, not all twelve
            assert added, "past the status budget, the 👀 stands in"

            def signs_down() -> bool:
                return all(REACTION not in slack.reactions_on(e["channel"], e["ts"]) for e in events)

            assert await eventually(signs_down, limit_s=60)
            assert slack.count_429 == {}, slack.count_429
        finally:
            await bot.stop()
