"""The bot's own Slack rate budgets: chat.update per workspace, chat.postMessage per channel."""

from __future__ import annotations

import asyncio
import time

from adapters.streaming import Clock, RateBudget

# Tier 3: about 50 chat.update calls a minute for the whole workspace; Slack tolerates short
# bursts over a tier's rate (counted like a token bucket of about this many calls).
EDIT_CALLS_PER_MINUTE = 50.0
EDIT_BURST_CALLS = 10.0
# chat.postMessage: about one a second per channel, with a small burst.
POST_CALLS_PER_S = 1.0
POST_BURST_CALLS = 2.0


class ScaledClock:
    """Slack time: `time_scale` 1.0 is real time; 0.05 makes a Slack minute last 3 real seconds.

    Matching an emulator's time scale keeps the bot's budgets and pacing in step with it.
    """

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale

    def now(self) -> float:
        return time.monotonic() / self.time_scale

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) * self.time_scale)


class SlackBudgets:
    """One budget per limit Slack counts; per process, each taking `share` of Slack's rate."""

    def __init__(self, *, clock: Clock, share: float) -> None:
        self._clock = clock
        self._share = share
        self._edits: dict[str, RateBudget] = {}
        self._posts: dict[tuple[str, str], RateBudget] = {}

    def edit(self, team_id: str) -> RateBudget:
        budget = self._edits.get(team_id)
        if budget is None:
            budget = RateBudget.per_minute(
                EDIT_CALLS_PER_MINUTE, share=self._share, clock=self._clock, platform_burst=EDIT_BURST_CALLS
            )
            self._edits[team_id] = budget
        return budget

    def post(self, team_id: str, channel: str) -> RateBudget:
        budget = self._posts.get((team_id, channel))
        if budget is None:
            budget = RateBudget(
                capacity=POST_BURST_CALLS, refill_per_s=POST_CALLS_PER_S * self._share, clock=self._clock
            )
            self._posts[(team_id, channel)] = budget
        return budget
