"""Budget shares from the live processes' heartbeats (issue 26): 1/N each, a newcomer from what is left, a dead one's share
taken over at the first beat after its stamp is stale, the last share kept while the database is down, never above 1 in
sum; a workspace budget changes its rate live without losing its waiters; SLACK_RATE_SHARE overrides; a measured limit
is used by every process."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from adapters.slack.budgets import SlackBudgets, workspace_posts_scope
from adapters.slack.native_streaming import NativeStreaming
from adapters.streaming import Priority, RateBudget
from adapters.streaming.learned_rate import LEARNED_RATE_UNDER_MEASURED
from core.store.db import Database
from core.store.heartbeats import HEARTBEAT_INTERVAL_S, STALE_AFTER_S, Heartbeats
from core.store.shares import fair_share
from tests.adapters.streaming_fakes import FakeClock
from tests.support.outage import DatabaseOutage

pytestmark = pytest.mark.timeout(60)

WORKSPACE = "slack:T1"
SUM_SLACK = 1e-9


def stepped(db: Database, owner: str) -> Heartbeats:
    """A process that beats only when the test says (a new scope's beat at once is its own test)."""
    return Heartbeats(db, owner=owner, prompt=False)


def shares_of(processes: list[Heartbeats], scope: str = WORKSPACE) -> list[float]:
    return [process.shares.served().get(scope, 0.0) for process in processes]


async def age(db: Database, process: Heartbeats, seconds: float) -> None:
    """The process's last stamp is `seconds` old (as if it stopped beating then)."""
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE process_heartbeats SET seen_at = now() - make_interval(secs => %s) WHERE owner = %s",
            (seconds, process.owner),
        )


async def beat_all(processes: list[Heartbeats], rounds: int = 1) -> None:
    for _ in range(rounds):
        for process in processes:
            await process.beat()


async def clean(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM process_heartbeats")
        await conn.execute("DELETE FROM learned_limits")


def test_the_rule_gives_one_nth_and_never_more_than_the_others_leave() -> None:
    assert fair_share([]) == 1.0
    assert fair_share([0.5]) == 0.5
    assert fair_share([1.0]) == 0.0  # joining: nothing until the other makes room
    assert fair_share([0.5, 0.0]) == pytest.approx(1 / 3)
    assert fair_share([0.9, 0.3]) == 0.0  # never below nothing


def test_with_weights_a_process_takes_its_weights_part_and_still_never_more_than_the_others_leave() -> None:
    assert fair_share([0.25, 0.25, 0.25], weight=3, weights=[3, 2, 2]) == pytest.approx(0.25)  # all that is left
    assert fair_share([0.3, 0.2, 0.2], weight=3, weights=[3, 2, 2]) == pytest.approx(0.3)
    assert fair_share([0.5], weight=1, weights=[3]) == pytest.approx(0.25)
    assert fair_share([0.0], weight=0, weights=[0]) == pytest.approx(0.5)  # nobody weighs anything: 1/N


async def test_n_live_processes_serving_a_workspace_take_one_nth_each(db: Database) -> None:
    await clean(db)
    processes = [stepped(db, f"p{n}") for n in range(3)]
    for process in processes:
        process.shares.serve(WORKSPACE)
    await beat_all(processes, rounds=3)
    assert shares_of(processes) == pytest.approx([1 / 3] * 3)
    # A process serving another workspace only does not count for this one.
    other = stepped(db, "elsewhere")
    other.shares.serve("slack:T2")
    await beat_all([other, *processes])
    assert shares_of(processes) == pytest.approx([1 / 3] * 3)
    assert other.shares.served() == {"slack:T2": 1.0}


async def test_a_process_joining_starts_with_what_is_left_and_gets_its_share_once_counted(db: Database) -> None:
    await clean(db)
    first = stepped(db, "first")
    assert first.shares.serve(WORKSPACE) == 0.0  # counted at the beat it asks for at once
    await first.beat()
    assert shares_of([first]) == [1.0]
    joining = stepped(db, "joining")
    joining.shares.serve(WORKSPACE)
    await joining.beat()
    assert shares_of([first, joining]) == [1.0, 0.0]  # the first still uses it all: nothing is left yet
    await first.beat()
    assert shares_of([first, joining]) == [0.5, 0.0]  # it counted the newcomer and made room
    await joining.beat()
    assert shares_of([first, joining]) == [0.5, 0.5]


async def test_a_new_scope_asks_for_a_beat_at_once(db: Database) -> None:
    await clean(db)
    process = Heartbeats(db, owner="solo")
    process.shares.serve(WORKSPACE)
    for _ in range(200):
        if process.shares.served()[WORKSPACE] == 1.0:
            break
        await asyncio.sleep(0.01)
    assert process.shares.served()[WORKSPACE] == 1.0


async def test_a_dead_process_share_is_taken_over_at_the_first_beat_after_its_stamp_is_stale(db: Database) -> None:
    await clean(db)
    alive, dying = stepped(db, "alive"), stepped(db, "dying")
    for process in (alive, dying):
        process.shares.serve(WORKSPACE)
    await beat_all([alive, dying], rounds=2)
    assert shares_of([alive, dying]) == [0.5, 0.5]
    # Killed: no more beats. One beat short of stale (the constants: STALE_AFTER_S) it still counts.
    await age(db, dying, STALE_AFTER_S - HEARTBEAT_INTERVAL_S)
    await alive.beat()
    assert shares_of([alive]) == [0.5]
    # Stale: the next beat of the survivor takes its share.
    await age(db, dying, STALE_AFTER_S + 0.5)
    await alive.beat()
    assert shares_of([alive]) == [1.0]


async def test_a_cleanly_stopped_process_share_is_taken_over_at_the_next_beat(db: Database) -> None:
    await clean(db)
    staying, leaving = stepped(db, "staying"), stepped(db, "leaving")
    for process in (staying, leaving):
        process.shares.serve(WORKSPACE)
    await beat_all([staying, leaving], rounds=2)
    await leaving.stop()
    await staying.beat()
    assert shares_of([staying]) == [1.0]


async def test_a_process_that_cannot_reach_the_database_keeps_its_last_share(
    db: Database, outage: DatabaseOutage
) -> None:
    await clean(db)
    cut_off, other = stepped(db, "cut-off"), stepped(db, "other")
    for process in (cut_off, other):
        process.shares.serve(WORKSPACE)
    await beat_all([cut_off, other], rounds=2)
    cut_off.shares.serve("slack:T9")  # a scope never counted yet
    await outage.down()
    try:
        # The pool waits for a connection that never comes; the beat given up (or failed) changes nothing.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(cut_off.beat(), 1.0)
        assert cut_off.shares.served()[WORKSPACE] == 0.5
        # Never counted: the smallest share of the processes last seen using it (none here).
        assert cut_off.shares.served()["slack:T9"] == 1.0
    finally:
        await outage.up()
    await cut_off.beat()
    assert cut_off.shares.served()[WORKSPACE] == 0.5


async def churn(
    db: Database, rng: random.Random, steps: int, *, die_below: float,
    between: Callable[[list[Heartbeats]], None] = lambda live: None,
) -> list[Heartbeats]:
    """Processes join (15 % of steps), die (`die_below`) and beat in a seeded random order, `between` called each
    step before a beat; the shares never sum above 1 at any step. The processes still live."""
    live: list[Heartbeats] = []
    made = 0
    for step in range(steps):
        move = rng.random()
        if move < 0.15 or not live:
            made += 1
            joining = stepped(db, f"p{made}")
            joining.shares.serve(WORKSPACE)
            live.append(joining)
        elif move < die_below and len(live) > 1:
            dead = live.pop(rng.randrange(len(live)))
            await age(db, dead, STALE_AFTER_S + 1)  # killed: its stamp goes stale, it never beats again
        between(live)
        await rng.choice(live).beat()
        assert sum(shares_of(live)) <= 1 + SUM_SLACK, (step, shares_of(live))
    return live


async def test_shares_never_sum_above_one_whatever_order_processes_join_beat_and_die(db: Database) -> None:
    await clean(db)
    live = await churn(db, random.Random(26), 120, die_below=0.25)
    await beat_all(live, rounds=3)
    assert shares_of(live) == pytest.approx([1 / len(live)] * len(live))


async def test_weighted_shares_never_sum_above_one_and_settle_on_each_weights_part(db: Database) -> None:
    await clean(db)
    rng = random.Random(2026)
    weights: dict[str, int] = {}

    def guilds_come_and_go(live: list[Heartbeats]) -> None:
        if rng.random() < 0.3:
            process = rng.choice(live)
            weights[process.owner] = rng.randint(0, 5)
            process.shares.weigh(WORKSPACE, weights[process.owner])

    live = await churn(db, rng, 150, die_below=0.22, between=guilds_come_and_go)
    await beat_all(live, rounds=4)
    total = sum(weights.get(process.owner, 1) for process in live)
    expected = [weights.get(process.owner, 1) / total if total else 1 / len(live) for process in live]
    assert shares_of(live) == pytest.approx(expected)


async def test_a_limit_one_process_measured_is_used_by_every_process(db: Database) -> None:
    await clean(db)
    measuring, other = stepped(db, "measuring"), stepped(db, "other")
    scope = workspace_posts_scope("T1")
    for process in (measuring, other):
        process.shares.serve(WORKSPACE)
    await beat_all([measuring, other], rounds=2)
    clock = FakeClock()
    budgets = SlackBudgets(clock=clock, share=None)
    budgets.follow(other.shares)
    before = budgets.workspace_posts("T1").refill_per_s
    measuring.shares.learn(scope, 1.0)  # one call a second for the whole workspace
    await measuring.beat()
    assert other.shares.learned(scope) is None  # read on the beat, never per call
    await other.beat()
    assert other.shares.learned(scope) == 1.0
    posts = budgets.workspace_posts("T1")
    assert posts.refill_per_s == pytest.approx(0.5 * LEARNED_RATE_UNDER_MEASURED)
    assert posts.refill_per_s < before


async def test_the_measure_of_a_workspace_posts_budget_is_published_in_whole_calls(db: Database) -> None:
    await clean(db)
    process = stepped(db, "measuring")
    process.shares.serve(WORKSPACE)
    await process.beat()
    budgets = SlackBudgets(clock=FakeClock(), share=None)
    budgets.follow(process.shares)
    posts = budgets.workspace_posts("T1")
    assert posts.on_measured is not None
    posts.on_measured(2.0)
    assert process.shares.learned(workspace_posts_scope("T1")) == 2.0
    await process.beat()
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT per_s, learned_by FROM learned_limits")
        assert await cursor.fetchall() == [(2.0, "measuring")]


async def test_a_budget_changes_its_rate_live_and_keeps_its_waiters_in_order() -> None:
    clock = FakeClock()
    budget = RateBudget(capacity=2, refill_per_s=1.0, clock=clock)

    async def scenario() -> list[tuple[int, float]]:
        granted: list[tuple[int, float]] = []

        async def call(n: int) -> None:
            await budget.acquire(Priority.FINAL, requester_key=n, since=float(n))
            granted.append((n, clock.now()))

        budget.set_share(0.5)  # capacity 1, a call every 2 s
        tasks = [asyncio.ensure_future(call(n)) for n in range(4)]
        await clock.sleep(0.1)
        budget.set_share(0.0)  # nothing while it has no share: the waiters stay queued
        await clock.sleep(10)
        assert len(granted) == 1
        budget.set_share(1.0)
        await asyncio.gather(*tasks)
        return granted

    granted = await clock.run(scenario())
    assert [n for n, _ in granted] == [0, 1, 2, 3]
    # After the share came back (at 10.1 s), one call a second.
    assert [round(at, 1) for _, at in granted[1:]] == [11.1, 12.1, 13.1]


def test_a_budget_scaled_down_and_back_is_what_it_was() -> None:
    budget = RateBudget.per_minute(240, clock=FakeClock(), burst=21)
    whole = (budget.capacity, budget.refill_per_s)
    budget.set_share(0.5)
    assert (budget.capacity, budget.refill_per_s) == pytest.approx((whole[0] / 2, whole[1] / 2))
    budget.set_share(0.0)
    budget.set_share(1.0)
    assert (budget.capacity, budget.refill_per_s) == pytest.approx(whole)


async def test_workspace_budgets_follow_the_share_and_per_channel_posts_stay_whole(db: Database) -> None:
    await clean(db)
    first, second = stepped(db, "first"), stepped(db, "second")
    budgets = SlackBudgets(clock=FakeClock(), share=None, workspace_posts_per_minute=240)
    budgets.follow(first.shares)
    posts, edits, channel = budgets.workspace_posts("T1"), budgets.edit("T1"), budgets.post("T1", "C1")
    await first.beat()
    assert posts.share == edits.share == 1.0
    whole = posts.refill_per_s
    second.shares.serve(WORKSPACE)
    await beat_all([second, first, second])
    assert posts.share == edits.share == 0.5 and posts.refill_per_s == pytest.approx(whole / 2)
    assert channel.share == 1.0
    # Two processes at their shares never go past the told cap: burst plus a minute's refill within 240.
    assert 2 * (posts.capacity + 60 * posts.refill_per_s) <= 240


async def test_native_stream_budgets_follow_the_workspaces_share_too(db: Database) -> None:
    await clean(db)
    first, second = stepped(db, "first"), stepped(db, "second")
    native = NativeStreaming(setting="auto", clock=FakeClock(), share=None)
    budgets = SlackBudgets(clock=FakeClock(), share=None, companions=(native,))
    budgets.follow(first.shares)  # as bot/runtime.py does: the native streams' budgets come along
    start, append, stop = native.start("T1"), native.append("T1"), native.stop("T1")
    await first.beat()
    assert start.share == append.share == stop.share == 1.0
    whole = start.refill_per_s
    second.shares.serve(WORKSPACE)
    await beat_all([second, first, second])
    assert start.share == append.share == stop.share == 0.5 and start.refill_per_s == pytest.approx(whole / 2)
    fixed = NativeStreaming(setting="auto", clock=FakeClock(), share=0.25)
    fixed.follow(first.shares)
    assert fixed.start("T1").share == 0.25


async def test_slack_rate_share_set_is_a_fixed_override(db: Database) -> None:
    from adapters.http.server import HttpServer
    from adapters.slack.adapter import SlackAdapter
    from tests.support.engine import make_engine
    from tests.support.ports import ports_for

    await clean(db)
    process = stepped(db, "override")
    for rate_share, follows in ((0.25, False), (None, True)):
        extra = {} if rate_share is None else {"slack_rate_share": rate_share}
        engine = make_engine(db, "http://127.0.0.1:1/v1", slack_bot_token="xoxb-1", slack_signing_secret="s", **extra)
        adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db), http=HttpServer(host="127.0.0.1", port=0))
        adapter.budgets.follow(process.shares)  # as bot/runtime.py does
        posts = adapter.budgets.workspace_posts("T1")
        await process.beat()
        other = stepped(db, f"other-{follows}")
        other.shares.serve(WORKSPACE)
        await beat_all([other, process])
        # Following: half once another process serves the workspace; fixed: SLACK_RATE_SHARE's quarter, whatever the others.
        assert posts.share == (0.5 if follows else 1.0)
        if not follows:
            assert adapter.budgets.workspace_posts("T1").refill_per_s == pytest.approx(
                RateBudget.per_minute(300, share=0.25, clock=FakeClock()).refill_per_s
            )
        await other.stop()


async def test_discords_global_budget_follows_the_bots_share_and_its_channels_stay_whole(db: Database) -> None:
    from adapters.discord.transport import DiscordBudgets, bot_key

    await clean(db)
    first, second = stepped(db, "first"), stepped(db, "second")
    budgets = DiscordBudgets(calls_per_window=4, window_s=5.0, clock=FakeClock(), global_calls=50, bot=bot_key("token"))
    whole = budgets.global_budget.refill_per_s if budgets.global_budget else 0.0
    budgets.follow(first.shares)
    await first.beat()
    assert budgets.global_budget is not None and budgets.global_budget.share == 1.0
    second.shares.serve(f"discord:{bot_key('token')}")
    await beat_all([second, first, second])
    assert budgets.global_budget.share == 0.5 and budgets.global_budget.refill_per_s == pytest.approx(whole / 2)
    assert budgets(123).share == 1.0
    # Another bot's processes are not counted for this one.
    other_bot = stepped(db, "other-bot")
    other_bot.shares.serve(f"discord:{bot_key('another token')}")
    await beat_all([other_bot, first])
    assert budgets.global_budget.share == 0.5
    # Its shards hold 3 guilds, the other process's 1: three quarters of the bot-wide budget are its.
    budgets.weigh(3)
    second.shares.weigh(f"discord:{bot_key('token')}", 1)
    await beat_all([second, first, second, first])
    assert budgets.global_budget.share == pytest.approx(0.75)
    assert second.shares.served()[f"discord:{bot_key('token')}"] == pytest.approx(0.25)
    budgets.weigh(0)  # no guild (yet): still some of it, for DMs and the guild about to arrive
    await beat_all([first, second, first])
    assert budgets.global_budget.share == pytest.approx(0.5)


async def test_a_process_short_of_its_share_looks_again_before_its_next_beat(db: Database) -> None:
    await clean(db)
    first = stepped(db, "first")
    first.shares.serve(WORKSPACE)
    await first.beat()
    joining = Heartbeats(db, owner="joining", interval_s=HEARTBEAT_INTERVAL_S)  # beats between beats
    joining.shares.serve(WORKSPACE)  # counted at once: nothing left while the first uses it all
    for _ in range(200):
        if WORKSPACE in (await shares_in_db(db)).get("joining", {}):
            break
        await asyncio.sleep(0.01)
    assert joining.shares.served()[WORKSPACE] == 0.0 and joining.shares.short
    await first.beat()  # made room: the newcomer takes it without waiting for its own 10 s beat
    for _ in range(400):
        if joining.shares.served()[WORKSPACE] == 0.5:
            break
        await asyncio.sleep(0.01)
    assert shares_of([first, joining]) == [0.5, 0.5] and not joining.shares.short
    await joining.stop()


async def shares_in_db(db: Database) -> dict[str, dict[str, float]]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT owner, shares FROM process_heartbeats")
        return {owner: shares for owner, shares in await cursor.fetchall()}


def test_a_learning_budget_keeps_what_it_learnt_through_a_share_change() -> None:
    budget = RateBudget(capacity=10, refill_per_s=4.0, clock=FakeClock(), learns=True, learned_floor_per_s=2.0)
    budget.penalize(1.0)  # a told limit: a tenth slower
    assert budget.refill_per_s == pytest.approx(3.6)
    budget.set_share(0.5)
    assert budget.refill_per_s == pytest.approx(1.8)
    budget.set_share(1.0)
    assert budget.refill_per_s == pytest.approx(3.6)
