"""An answer's age in the budget queues is when its question was asked (the platform's stamp), when recent."""

from __future__ import annotations

import time

from slack_sdk.web.async_client import AsyncWebClient

from adapters.discord.surface import DiscordSurfaces
from adapters.discord.transport import DiscordBudgets
from adapters.slack.surface import ReplyTarget, SlackSurfaces
from adapters.slack.transport import ScaledClock, SlackBudgets
from adapters.streaming.answer_place import ASKED_AGE_MAX_S, asked_at
from adapters.streaming import StreamLimits
from adapters.streaming.clock import MonotonicClock


def _ts(epoch_s: float) -> str:
    micros = int(epoch_s * 1_000_000)
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def test_a_recent_stamp_reaches_back_and_an_old_or_future_one_counts_from_now() -> None:
    clock = MonotonicClock()
    before = clock.now()
    assert asked_at(clock, None) >= before
    assert asked_at(clock, time.time() - 2.0) < before
    assert asked_at(clock, time.time() - ASKED_AGE_MAX_S - 60) >= before  # a redelivery: from now
    assert asked_at(clock, time.time() + 60) >= before  # a skewed clock: from now


def test_the_stamp_reaches_back_in_the_clocks_own_seconds() -> None:
    scaled = ScaledClock(time_scale=0.5)  # a Slack second lasts half a real one
    asked = time.time() - 1.0
    assert asked_at(scaled, asked, time_scale=0.5) < scaled.now() - 1.5


def test_slack_answers_rank_by_when_their_questions_were_asked_not_by_when_they_were_read() -> None:
    clock = ScaledClock()
    surfaces = SlackSurfaces(client=AsyncWebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/"),
                             budgets=SlackBudgets(clock=clock, share=1.0), clock=clock)
    now = time.time()
    # Read in the other order than asked (a burst's deliveries race), the first asked still ranks first.
    asked_second = surfaces.at(ReplyTarget(team_id="T1", channel="C2", thread_ts=None, question_ts=_ts(now - 0.010)))
    asked_first = surfaces.at(ReplyTarget(team_id="T1", channel="C1", thread_ts=None, question_ts=_ts(now - 0.020)))
    assert asked_first.pacing.since is not None and asked_second.pacing.since is not None
    assert asked_first.pacing.since < asked_second.pacing.since
    # Without a question of its own (a notice, a click's answer), from when it is made.
    made_at = clock.now()
    unasked = surfaces.at(ReplyTarget(team_id="T1", channel="C3", thread_ts=None))
    assert unasked.pacing.since is not None and unasked.pacing.since >= made_at
    garbled = surfaces.at(ReplyTarget(team_id="T1", channel="C4", thread_ts=None, question_ts="not-a-ts"))
    assert garbled.pacing.since is not None and garbled.pacing.since >= made_at


class _Channel:
    """Enough of a discord.py channel for a surface to be made (nothing is sent)."""

    id = 42


def test_discord_answers_rank_by_when_their_questions_were_asked_too() -> None:
    clock = MonotonicClock()
    surfaces = DiscordSurfaces(budgets=DiscordBudgets(calls_per_window=4, window_s=5.0, clock=clock),
                               limits=StreamLimits(max_chars=2000), clock=clock)
    now = time.time()
    asked_second = surfaces.in_channel(_Channel(), channel_id=2, workspace="G1", asked_epoch_s=now - 0.010)  # type: ignore[arg-type]
    asked_first = surfaces.in_channel(_Channel(), channel_id=1, workspace="G1", asked_epoch_s=now - 0.020)  # type: ignore[arg-type]
    assert asked_first.pacing.since is not None and asked_second.pacing.since is not None
    assert asked_first.pacing.since < asked_second.pacing.since
    made_at = clock.now()
    unasked = surfaces.in_channel(_Channel(), channel_id=3, workspace="G1")  # type: ignore[arg-type]
    assert unasked.pacing.since is not None and unasked.pacing.since >= made_at
