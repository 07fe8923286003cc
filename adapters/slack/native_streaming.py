"""Whether Slack's native streams are used, and where: the stream methods' budgets per workspace, the workspaces that refused them, and the answers counted by the way they went."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from adapters.streaming import Clock, RateBudget
from adapters.streaming.budget_map import BudgetMap, Shares

from .budgets import IDLE_BUDGET_S, workspace_scope
from .controls import StreamRuns
from .surface import ReplyTarget

logger = logging.getLogger(__name__)

NativeSetting = Literal["auto", "off"]
# chat.startStream is Tier 2 (about 20 a minute per workspace), chat.appendStream Tier 4 (100+); chat.stopStream
# is counted like starting (one per stream). The bot keeps a call of each burst in reserve.
START_CALLS_PER_MINUTE = 20.0
START_BURST_CALLS = 4.0
APPEND_CALLS_PER_MINUTE = 100.0
APPEND_BURST_CALLS = 15.0
STOP_CALLS_PER_MINUTE = 20.0
STOP_BURST_CALLS = 4.0
RATE_MARGIN = 0.98
# A workspace that refused the stream methods (method_not_supported, an Enterprise org or GovSlack host, a
# missing scope) is not asked again for this long (Slack seconds).
REFUSED_RETRY_S = 3600.0


@dataclass


class NativeCounts:
    """Answers so far: streamed natively (and of those, switched to post+update), or posted and updated from the start."""

    native: int = 0
    fell_back: int = 0
    post_update: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class NativeStreaming:
    """One per adapter: whether native streams are used, the three methods' budgets per workspace, and the
    workspaces that refused them."""

    def __init__(
        self, *, setting: NativeSetting, clock: Clock, share: float | None, streams: StreamRuns | None = None,
    ) -> None:
        self.setting = setting
        # Each stream's run, for the "Stop this answer" shortcut (a stream takes no Stop button).
        self.streams = streams or StreamRuns(None)
        self._clock = clock
        # None (SLACK_RATE_SHARE unset): each workspace's share among the live processes once it `follow`s them.
        self._share = share
        self._shares: Shares | None = None
        self._refused_until: dict[str, float] = {}
        self.counts = NativeCounts()
        # Streams this process's answers are sending now: a look-up for an unseen start never takes one of them.
        self.live_streams: set[str] = set()
        self._starts: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(team, START_CALLS_PER_MINUTE, START_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )
        self._appends: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(team, APPEND_CALLS_PER_MINUTE, APPEND_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )
        self._stops: BudgetMap[str] = BudgetMap(
            lambda team: self._budget(team, STOP_CALLS_PER_MINUTE, STOP_BURST_CALLS), keep_idle_s=IDLE_BUDGET_S
        )

    def follow(self, shares: Shares) -> None:
        """From now on each workspace's stream budgets take this process's share of it (as SlackBudgets' do)."""
        if self._share is not None:
            return
        self._shares = shares
        shares.follow(self._reshare)
        self._reshare()

    def _reshare(self) -> None:
        for team_id, budget in self._starts.items() + self._appends.items() + self._stops.items():
            budget.set_share(self._share_of(team_id))

    def _share_of(self, team_id: str) -> float:
        if self._share is not None:
            return self._share
        return 1.0 if self._shares is None else self._shares.serve(workspace_scope(team_id))

    def _budget(self, team_id: str, per_minute: float, burst: float) -> RateBudget:
        budget = RateBudget(capacity=burst, refill_per_s=per_minute * RATE_MARGIN / 60.0, clock=self._clock)
        budget.set_share(self._share_of(team_id))
        return budget

    def start(self, team_id: str) -> RateBudget:
        return self._starts(team_id)

    def append(self, team_id: str) -> RateBudget:
        return self._appends(team_id)

    def stop(self, team_id: str) -> RateBudget:
        return self._stops(team_id)

    def usable(self, target: ReplyTarget) -> bool:
        """Streams need a thread, and in channels the recipient and their team; a refusing workspace waits."""
        if self.setting == "off" or not target.thread_ts:
            return False
        if not target.channel.startswith("D") and not (target.recipient_user and target.recipient_team):
            return False
        return self._refused_until.get(target.team_id, float("-inf")) <= self._clock.now()

    def refused(self, team_id: str, error: str) -> None:
        logger.warning("Slack refused native streaming in %s (%s); answers there use post+update for a while", team_id, error)
        self._refused_until[team_id] = self._clock.now() + REFUSED_RETRY_S

    def fell_back(self, reason: str) -> None:
        self.counts.fell_back += 1
        self.counts.reasons[reason] = self.counts.reasons.get(reason, 0) + 1
