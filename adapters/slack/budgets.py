"""Slack's rate limits as the bot's rate budgets (one per limit Slack counts, per process, each its share), on Slack time."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from adapters.streaming import Clock, RateBudget
from adapters.streaming.budget_map import BudgetMap, Shares
from adapters.streaming.learned_rate import LEARNED_RATE_FLOOR_PER_S
from adapters.streaming.rate_budget import BURST_SHARE_OF_MINUTE, PLATFORM_BURST_RESERVE_CALLS

# Tier 3: about 50 chat.update calls a minute for the whole workspace; Slack tolerates short
# bursts over a tier's rate (counted like a token bucket of about this many calls).
EDIT_CALLS_PER_MINUTE = 50.0
EDIT_BURST_CALLS = 10.0
# chat.postMessage: about one a second per channel, with a small burst.
POST_CALLS_PER_S = 1.0
POST_BURST_CALLS = 2.0
# conversations.replies and conversations.history (reading a thread or channel), per workspace, by
# SLACK_HISTORY_TIER: `internal` (Tier 3, about 50 calls a minute, up to 1,000 messages a page) or `limited`
# (commercially distributed apps outside the Marketplace: 1 call a minute, 15 messages a page).
HistoryTier = Literal["internal", "limited"]
READ_CALLS_PER_MINUTE: dict[HistoryTier, float] = {"internal": 50.0, "limited": 1.0}
READ_PAGE_MESSAGES: dict[HistoryTier, int] = {"internal": 200, "limited": 15}
# Tier 3's short bursts, as chat.update's: sized as Slack's bucket, the refill runs just under the tier's rate (a
# backfill reads at ~0.98 of it), where a window-safe budget would keep a tenth of every minute back.
READ_PLATFORM_BURST_CALLS = EDIT_BURST_CALLS
# The limited tier allows one call a minute and no burst: one call, then one every 1/0.9 minutes (~6.7 s of margin
# against the clocks' drift; a window-safe budget that small would keep half the rate back).
LIMITED_READ_RATE_SHARE = 0.9
# The other methods' tiers (calls a minute per workspace), for those that are not Tier 3: the deadline lane's
# reactions and modals, App Home. assistant.threads.setStatus has "special" limits, with no number given
# (SLACK_STATUS_PER_MINUTE; 429s slow it down either way).
METHOD_CALLS_PER_MINUTE: dict[str, float] = {
    "reactions.remove": 20.0,  # Tier 2
    "views.open": 100.0, "views.push": 100.0, "views.update": 100.0, "views.publish": 100.0,  # Tier 4
    "chat.postEphemeral": 100.0, "users.info": 100.0, "chat.getPermalink": 100.0,  # Tier 4
}
STATUS_METHOD = "assistant.threads.setStatus"
DEFAULT_STATUS_PER_MINUTE = 600
# A status is one call per answer, shown at once: a burst of questions may take this many seconds' calls together.
STATUS_BURST_S = 10.0
# Where the bot starts when SLACK_WORKSPACE_POSTS_PER_MINUTE is unset (Slack gives no number); 429s
# teach it the real limit. Five posts a second is far more than a team's answers need, and close
# enough to a low limit that two overloads find it.
UNKNOWN_WORKSPACE_POSTS_PER_MINUTE = 300
# An unknown limit is probed with a small burst: a burst of answers then costs a few 429s, not dozens
# sent together before the first one comes back.
UNKNOWN_WORKSPACE_POSTS_BURST = 10.0
# A budget not handed out for this long (Slack seconds) is full again, so a fresh one is the same:
# it is dropped, and the maps stay as small as the channels in use.
IDLE_BUDGET_S = 600.0


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


def workspace_scope(team_id: str) -> str:
    """A workspace's budgets among the processes' shares (core/store/shares.py)."""
    return f"slack:{team_id}"


def workspace_posts_scope(team_id: str) -> str:
    """A workspace's chat.postMessage limit among the limits the processes learnt."""
    return f"slack:{team_id}:chat.postMessage"


class SlackBudgets:
    """One budget per limit Slack counts; per process, each taking `share` of Slack's rate.

    `share` None (SLACK_RATE_SHARE unset): each workspace's budgets take this process's share of the workspace
    among the live processes once it `follow`s them (whole until then), changed on the heartbeat's beat; per-channel
    posting stays whole. A chat.postMessage limit measured by any process (an untold one) is used by all. A `share`
    given is fixed: `follow` changes nothing."""

    def __init__(
        self, *, clock: Clock, share: float | None, workspace_posts_per_minute: int | None = None,
        history_tier: HistoryTier = "internal", status_per_minute: int = DEFAULT_STATUS_PER_MINUTE,
        companions: tuple[Any, ...] = (),
    ) -> None:
        self._clock = clock
        self._status_per_minute = float(status_per_minute)
        # Other budgets of the same workspaces (the native streams'): they follow the same shares.
        self._companions = companions
        self._fixed = share is not None
        self._share = 1.0 if share is None else share
        self.history_tier: HistoryTier = history_tier
        self._workspace_posts_per_minute = workspace_posts_per_minute
        self._edits: BudgetMap[str] = BudgetMap(self._new_edit, keep_idle_s=IDLE_BUDGET_S)
        self._posts: BudgetMap[tuple[str, str]] = BudgetMap(self._new_post, keep_idle_s=IDLE_BUDGET_S)
        self._workspace_posts: BudgetMap[str] = BudgetMap(self._new_workspace_posts, keep_idle_s=IDLE_BUDGET_S)
        self._reads: BudgetMap[tuple[str, str]] = BudgetMap(self._new_read, keep_idle_s=IDLE_BUDGET_S)
        self._shares: Shares | None = None
        self._adopted: dict[str, float] = {}  # the measured chat.postMessage limit each workspace's budget took

    def follow(self, shares: Shares) -> None:
        """From now on, the workspaces' budgets take their shares (and measured limits) from `shares`, unless fixed."""
        for companion in self._companions:
            companion.follow(shares)
        if self._fixed:
            return
        self._shares = shares
        shares.follow(self._reshare)
        self._reshare()

    def _reshare(self) -> None:
        for team_id, budget in self._edits.items() + self._workspace_posts.items():
            budget.set_share(self._share_of(team_id))
        for (team_id, _), budget in self._reads.items():
            budget.set_share(self._share_of(team_id))
        for team_id, budget in self._workspace_posts.items():
            self._take_measured(team_id, budget)

    def _share_of(self, team_id: str) -> float:
        return self._share if self._shares is None else self._shares.serve(workspace_scope(team_id))

    def _shared(self, team_id: str, whole: RateBudget) -> RateBudget:
        """`whole` (built for all of Slack's rate) at this process's share of the workspace."""
        whole.set_share(self._share_of(team_id))
        return whole

    def _take_measured(self, team_id: str, budget: RateBudget) -> None:
        if self._shares is None or self._workspace_posts_per_minute:
            return
        measured = self._shares.learned(workspace_posts_scope(team_id))
        if measured is not None and self._adopted.get(team_id) != measured:
            self._adopted[team_id] = measured
            budget.take_measured(measured)

    def edit(self, team_id: str) -> RateBudget:
        return self._edits(team_id)

    def post(self, team_id: str, channel: str) -> RateBudget:
        """chat.postMessage in one channel, counted against the workspace's chat.postMessage budget too."""
        return self._posts((team_id, channel))

    def workspace_posts(self, team_id: str) -> RateBudget:
        """The workspace-wide chat.postMessage limit: configured when known, and learnt from 429s either way."""
        return self._workspace_posts(team_id)

    def read(self, team_id: str, method: str) -> RateBudget:
        """A reading method (conversations.replies, conversations.history) in one workspace."""
        return self._reads((team_id, method))

    def delete(self, team_id: str) -> RateBudget:
        """chat.delete in one workspace: Tier 3 like the reads, and never held up by chat.update's 429s."""
        return self._reads((team_id, "chat.delete"))

    def other(self, team_id: str, method: str) -> RateBudget:
        """Any other method (users.info, views.publish, reactions.add …) on a budget of its own: its tier's rate
        (METHOD_CALLS_PER_MINUTE), Tier 3 when not listed."""
        return self._reads((team_id, method))

    @property
    def page_messages(self) -> int:
        """Messages asked for in one page of conversations.replies / history (the tier's most)."""
        return READ_PAGE_MESSAGES[self.history_tier]

    def _new_read(self, key: tuple[str, str]) -> RateBudget:
        method, burst = key[1], None
        if method in ("conversations.replies", "conversations.history"):
            calls = READ_CALLS_PER_MINUTE[self.history_tier]
            if self.history_tier == "limited":
                return self._limited_read(key)
            burst = READ_PLATFORM_BURST_CALLS
        elif method == STATUS_METHOD:
            # Slack's own burst is taken as ten seconds' calls, less the usual reserve (a burst sent while the
            # process is busy reaches Slack bunched with the calls after it).
            calls = self._status_per_minute
            burst = calls * STATUS_BURST_S / 60.0
        else:
            calls = METHOD_CALLS_PER_MINUTE.get(method, READ_CALLS_PER_MINUTE["internal"])
        share = 1.0 if self._shares is not None else self._share
        budget = RateBudget.per_minute(calls, share=share, clock=self._clock, platform_burst=burst)
        return self._shared(key[0], budget) if self._shares is not None else budget

    def _limited_read(self, key: tuple[str, str]) -> RateBudget:
        share = 1.0 if self._shares is not None else self._share
        calls_per_s = READ_CALLS_PER_MINUTE["limited"] * LIMITED_READ_RATE_SHARE * share / 60.0
        budget = RateBudget(capacity=1.0, refill_per_s=calls_per_s, clock=self._clock)
        return self._shared(key[0], budget) if self._shares is not None else budget

    def _new_edit(self, team_id: str) -> RateBudget:
        if self._shares is not None:
            return self._shared(team_id, RateBudget.per_minute(
                EDIT_CALLS_PER_MINUTE, clock=self._clock, platform_burst=EDIT_BURST_CALLS
            ))
        return RateBudget.per_minute(
            EDIT_CALLS_PER_MINUTE, share=self._share, clock=self._clock, platform_burst=EDIT_BURST_CALLS
        )

    def _new_post(self, key: tuple[str, str]) -> RateBudget:
        share = self._share if self._shares is None else 1.0
        return RateBudget(
            capacity=POST_BURST_CALLS, refill_per_s=POST_CALLS_PER_S * share, clock=self._clock,
            parent=self.workspace_posts(key[0]),
        )

    def _new_workspace_posts(self, team_id: str) -> RateBudget:
        if self._shares is None:
            return self._workspace_posts_at(self._share)
        budget = self._shared(team_id, self._workspace_posts_at(1.0))
        shares = self._shares
        budget.on_measured = lambda per_s: shares.learn(workspace_posts_scope(team_id), per_s)
        self._adopted.pop(team_id, None)
        self._take_measured(team_id, budget)
        return budget

    def _workspace_posts_at(self, share: float) -> RateBudget:
        told = self._workspace_posts_per_minute
        if told:
            # The burst keeps a few calls back: one sent while the process is busy with many answers
            # reaches Slack bunched with the calls after it. Window-safe still (the refill gains them).
            burst = max(1.0, told * share * BURST_SHARE_OF_MINUTE - PLATFORM_BURST_RESERVE_CALLS)
            sized = RateBudget.per_minute(told, share=share, clock=self._clock, burst=burst)
            # Trusted at least half-way: 429s of other causes (a busy Slack) never talk it down to a trickle.
            return RateBudget(
                capacity=sized.capacity, refill_per_s=sized.refill_per_s, clock=self._clock, learns=True,
                learned_floor_per_s=sized.refill_per_s / 2, known_limit=True,
            )
        guess = RateBudget.per_minute(UNKNOWN_WORKSPACE_POSTS_PER_MINUTE, share=share, clock=self._clock)
        return RateBudget(
            capacity=min(guess.capacity, UNKNOWN_WORKSPACE_POSTS_BURST), refill_per_s=guess.refill_per_s,
            clock=self._clock, learns=True, learned_floor_per_s=LEARNED_RATE_FLOOR_PER_S, known_limit=False,
        )

    @property
    def kept(self) -> int:
        """How many budgets are kept now (posts and edits)."""
        return len(self._posts) + len(self._edits)
