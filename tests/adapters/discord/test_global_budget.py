"""Discord's bot-wide budget: how fast it sends a burst, and that its shares together stay within a window."""

from __future__ import annotations

from adapters.discord.transport import DiscordBudgets
from adapters.streaming import Priority
from tests.adapters.discord.test_units import FakeClock  # virtual time moved on by each sleep


async def test_the_bot_wide_budget_sends_a_burst_at_its_rate_and_its_shares_together_stay_within_a_window() -> None:
    """Issue 26's Discord burst: C calls take (C - burst) / (allowed - burst) s, so a burst of two calls (a lone
    answer's thread and message) sends 190 faster than a tenth of the limit did; at 1/16 share each (a burst rounded
    up to one call apiece) sixteen processes' calls in any one-second window still sum to no more than the whole
    budget's 45 (50 less the margin; the rounded-up bursts came on top: 48)."""
    whole_clock = FakeClock()
    whole = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=whole_clock, global_calls=50).global_budget
    assert whole is not None
    for _ in range(190):
        await whole.acquire(Priority.FIRST)
    assert whole_clock.now() <= (190 - 2) / (45 - 2) + 1e-9
    times: list[float] = []
    for _ in range(16):
        clock = FakeClock()
        budget = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=clock, global_calls=50).global_budget
        assert budget is not None
        budget.set_share(1 / 16)
        for _ in range(20):
            await budget.acquire(Priority.FIRST)
            times.append(clock.now())
    assert max(sum(1 for t in times if start <= t < start + 1.0) for start in times) <= 45
