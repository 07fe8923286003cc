"""bench/conversations.py's backfill and live parts: the real SlackAdapter against the Slack emulator, the engine's
ChannelLearningService over the bench's database, on a Slack clock where the platform is the bound.

Backfill: 20,000 messages in 2,000 threads (a root and 9 replies each, 40 people) read at Tier 3 (SLACK_HISTORY_TIER
internal: conversations.history and conversations.replies each 50 calls a Slack minute, a burst of 50). Printed:
messages/s; the platform's bound — each method's calls less its burst at its rate, the slower method bounding (they
are counted apart and overlap) — and the ratio of the bound's time to the time taken (target ≥ 0.9); the bound of
the bot's own read budget beside it (sized as Tier 3's bucket: chat.update's burst less a reserve, its refill just
under the rate — adapters/slack/budgets.py); RSS growth over the
backfill (target ≤ 50 MB; the emulator's 20,000 messages are made before the first reading); the fetch rate
(messages over the time spent in the history door, its pacing included) and the index rate (messages over the rest).

Live: a learned channel, then LIVE_RATE_PER_S new messages a second, each event delivered as Slack posts it
(signed, through Bolt): event → searchable (a new message's unique word found by search) and delete → not
retrievable, p95 of each (target ≤ 2 s).

The bot shares this process with the emulators. At TIME_SCALE 0.1 a Slack minute lasts 6 s: at 0.05 the engine's
own work per thread (its documents written and indexed: about 60 ms a thread of 10 here) was the bound, not
Slack's rate (3.6 s of 15.6 s in the door at a tenth of the data); at 0.1 the door's pacing takes four fifths of
the time and the rest overlaps it. A full run takes about 4.5 minutes.

Measured here (2 cores, idle): 20,000 messages in 246.5 s, 81 messages/s; the platform bound 234 s, ratio 0.95.
(With the read budget sized window-safe, which kept a tenth of every minute back: 269 s, ratio 0.87.) RSS +3 MB.
Live: p95 24 ms to searchable, 23 ms to gone. Run by bench/conversations.py (its PARTS "backfill" and "live").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from adapters.slack.budgets import READ_PLATFORM_BURST_CALLS
from adapters.streaming.rate_budget import PLATFORM_BURST_RESERVE_CALLS, PLATFORM_RATE_MARGIN
from core.learning.model import ChannelInfo, ChannelMessage, ChannelPlace, HistoryPage
from core.learning.ports import ChannelHistory
from core.learning.service import ChannelLearningService
from core.retrieval.retriever import SourceScope
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.emulators.slack import SlackEmulator, channel_message_event
from tests.emulators.slack.limits import DEFAULT_LIMITS
from tests.support.engine import make_engine
from tests.support.ports import ports_for

TIME_SCALE = 0.1
MESSAGES = 20_000
THREADS = 2_000
PEOPLE = 40
CHANNEL = "C0000BENCH"
LIVE_EVENTS = 40
LIVE_RATE_PER_S = 5.0
LIVE_HISTORY = 200
POLL_S = 0.01
LIVE_WAIT_S = 10.0
BACKFILL_WAIT_S = 1800.0
RATIO_TARGET = 0.9
RSS_TARGET_MB = 50.0
LAG_TARGET_S = 2.0
EVERY_SOURCE = SourceScope(owners=None, every_restricted=True)


def target(label: str, ok: bool) -> str:
    return f"{label}: {'ok' if ok else 'MISSES TARGET'}"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


class TimedHistory:
    """The adapter's history door, timing the calls the service makes through it (pacing included)."""

    def __init__(self, door: ChannelHistory) -> None:
        self._door = door
        self.seconds = 0.0
        self.messages = 0

    async def _timed(self, call: object) -> HistoryPage:
        started = time.perf_counter()
        try:
            page = await call  # type: ignore[misc]
        finally:
            self.seconds += time.perf_counter() - started
        self.messages += len(page.messages)
        return page

    async def info(self, workspace: str, channel: str) -> ChannelInfo:
        return await self._door.info(workspace, channel)

    async def history(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        return await self._timed(self._door.history(workspace, channel, oldest=oldest, cursor=cursor))

    async def threads(self, workspace: str, channel: str, *, oldest: datetime, cursor: str) -> HistoryPage:
        return await self._timed(self._door.threads(workspace, channel, oldest=oldest, cursor=cursor))

    async def replies(self, workspace: str, channel: str, thread: str, *, cursor: str) -> HistoryPage:
        return await self._timed(self._door.replies(workspace, channel, thread, cursor=cursor))

    async def permalink(self, workspace: str, channel: str, message: ChannelMessage) -> str:
        return await self._door.permalink(workspace, channel, message)


@dataclass(kw_only=True)
class Bench:
    slack: SlackEmulator
    adapter: SlackAdapter
    http: HttpServer
    learning: ChannelLearningService
    door: TimedHistory

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}/slack/events"

    @property
    def place(self) -> ChannelPlace:
        return ChannelPlace(platform="slack", workspace=self.slack.team_id, channel=CHANNEL)


@asynccontextmanager
async def bot(db: Database, slack: SlackEmulator) -> AsyncIterator[Bench]:
    engine = make_engine(db, "http://127.0.0.1:9/v1", slack_bot_token=slack.bot_token,
                         slack_signing_secret=slack.signing_secret, slack_api_url=slack.api_url, http_port=0,
                         slack_native_streaming="off")
    learning = ChannelLearningService(db, embedder=None, settings=engine.settings)
    http = HttpServer(host="127.0.0.1", port=0)
    adapter = SlackAdapter(settings=engine.settings, engine=engine, ports=ports_for(db, learning=learning), http=http,
                           time_scale=slack.time_scale)
    door = TimedHistory(adapter.channel_history)
    learning.attach(adapter.platform, door)
    await http.start()
    await adapter.start()
    try:
        yield Bench(slack=slack, adapter=adapter, http=http, learning=learning, door=door)
    finally:
        await adapter.stop_accepting()
        await adapter.close()
        await http.stop()
        await learning.close()


def write_channel(slack: SlackEmulator, *, threads: int, replies: int) -> int:
    """Threads of a root and `replies` replies, a minute apart, ending a day ago; returns the messages written."""
    slack.add_channel(CHANNEL, name="incidents", members=[f"U{n:08d}" for n in range(PEOPLE)])
    start = time.time() - 86_400.0 - threads * 60.0
    written = 0
    for t in range(threads):
        at = start + t * 60.0
        root = slack.add_user_message(CHANNEL, f"thread {t}: the service {t % 97} paged at step {t}",
                                      f"U{t % PEOPLE:08d}", at=at)
        for r in range(replies):
            slack.add_user_message(CHANNEL, f"reply {r} in thread {t}: looked at host {r * t % 503}",
                                   f"U{(t + r + 1) % PEOPLE:08d}", root, at=at + r + 1)
        written += 1 + replies
    return written


async def until_live(bench: Bench, *, limit_s: float) -> None:
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        await bench.learning.run_due()
        learned = await bench.learning.get(bench.place)
        if learned is not None and learned.state == "live":
            await bench.learning.settled()
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the backfill did not finish")


def method_bound_s(slack: SlackEmulator, method: str, *, budget: bool) -> float:
    """Slack seconds `method`'s answered calls need at least: at Slack's rate and burst, or the bot's budget's."""
    calls = sum(1 for c in slack.calls if c.method == method and c.status == 200)
    limit = DEFAULT_LIMITS[method]
    per_s = limit.calls / limit.window_s
    if budget:  # RateBudget.per_minute with platform_burst, as adapters/slack/budgets.py sizes Tier 3's reads
        burst = max(1.0, READ_PLATFORM_BURST_CALLS - PLATFORM_BURST_RESERVE_CALLS)
        return max(0.0, calls - burst) / (per_s * (1 - PLATFORM_RATE_MARGIN))
    return max(0.0, calls - limit.burst) / per_s


async def run_backfill(db: Database, *, scale: float = 1.0) -> bool:
    threads = max(10, round(THREADS * scale))
    async with SlackEmulator(time_scale=TIME_SCALE) as slack:
        written = write_channel(slack, threads=threads, replies=MESSAGES // THREADS - 1)
        async with bot(db, slack) as bench:
            before_mb = rss_mb()
            started = time.perf_counter()
            await bench.learning.add(bench.place, since_days=30 + threads // 1440, keep_days=None)
            await until_live(bench, limit_s=BACKFILL_WAIT_S)
            elapsed = time.perf_counter() - started
            grown_mb = rss_mb() - before_mb
            door = bench.door
        methods = ("conversations.history", "conversations.replies")
        bound_s = max(method_bound_s(slack, m, budget=False) for m in methods) * TIME_SCALE
        budget_s = max(method_bound_s(slack, m, budget=True) for m in methods) * TIME_SCALE
        learned_n = written
        print(f"backfill: {learned_n} messages in {threads} threads, {elapsed:.1f} s "
              f"({learned_n / elapsed:.0f} messages/s; a Slack minute lasts {60 * TIME_SCALE:g} s)")
        print(f"  calls: {', '.join(f'{m} {sum(1 for c in slack.calls if c.method == m and c.status == 200)}' for m in methods)}, "
              f"429s {sum(slack.count_429.get(m, 0) for m in methods)}")
        ratio = bound_s / elapsed if elapsed else 0.0
        print(f"  platform bound {bound_s:.1f} s ({learned_n / bound_s:.0f} messages/s): ratio {ratio:.2f} "
              f"(target ≥ {RATIO_TARGET}) — {target('ratio', ratio >= RATIO_TARGET)}")
        print(f"  the bot's budget's own bound {budget_s:.1f} s: ratio {budget_s / elapsed:.2f}")
        print(f"  fetch rate {door.messages / max(door.seconds, 1e-9):.0f} messages/s ({door.seconds:.1f} s in the door), "
              f"index rate {learned_n / max(elapsed - door.seconds, 1e-9):.0f} messages/s "
              f"({elapsed - door.seconds:.1f} s outside it)")
        print(f"  RSS growth {grown_mb:.1f} MB (target ≤ {RSS_TARGET_MB:g}) — {target('memory', grown_mb <= RSS_TARGET_MB)}")
        return ratio >= RATIO_TARGET and grown_mb <= RSS_TARGET_MB


async def found(retriever: PgRetriever, word: str) -> bool:
    return any(word in item.text for item in await retriever.search(word, limit=5, scope=EVERY_SOURCE))


async def wait_for(retriever: PgRetriever, word: str, *, present: bool) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < LIVE_WAIT_S:
        if await found(retriever, word) == present:
            return time.perf_counter() - started
        await asyncio.sleep(POLL_S)
    return float("inf")


async def run_live(db: Database, *, scale: float = 1.0) -> bool:
    events = max(5, round(LIVE_EVENTS * scale))
    retriever = PgRetriever(db, None)
    async with SlackEmulator(time_scale=TIME_SCALE) as slack:
        write_channel(slack, threads=LIVE_HISTORY // 10, replies=9)
        async with bot(db, slack) as bench:
            await bench.learning.add(bench.place, since_days=30, keep_days=None)
            await until_live(bench, limit_s=BACKFILL_WAIT_S)
            added: list[float] = []
            deleted: list[float] = []

            async def one(n: int) -> None:
                word, user = f"zqxlive{n}", f"U{n % PEOPLE:08d}"
                ts = slack.add_user_message(CHANNEL, f"the rollout {word} finished", user)
                event = channel_message_event(text=f"the rollout {word} finished", user=user, channel=CHANNEL, ts=ts,
                                              team_id=slack.team_id)
                started = time.perf_counter()
                await slack.deliver_event(bench.url, event)
                added.append(time.perf_counter() - started + await wait_for(retriever, word, present=True))
                started = time.perf_counter()
                await slack.deliver_events(bench.url, slack.delete_message(CHANNEL, ts))
                deleted.append(time.perf_counter() - started + await wait_for(retriever, word, present=False))

            # A steady stream: each event measured by its own task while the next ones arrive.
            tasks = []
            for n in range(events):
                tasks.append(asyncio.create_task(one(n)))
                await asyncio.sleep(1 / LIVE_RATE_PER_S)
            await asyncio.gather(*tasks)
    p95_added, p95_deleted = percentile(added, 0.95), percentile(deleted, 0.95)
    print(f"live: {events} new messages at {LIVE_RATE_PER_S:g} a second, each deleted once found")
    print(f"  event → searchable p95 {p95_added * 1000:.0f} ms (median {percentile(added, 0.5) * 1000:.0f} ms; target ≤ "
          f"{LAG_TARGET_S:g} s) — {target('lag', p95_added <= LAG_TARGET_S)}")
    print(f"  delete → not retrievable p95 {p95_deleted * 1000:.0f} ms (median {percentile(deleted, 0.5) * 1000:.0f} ms; "
          f"target ≤ {LAG_TARGET_S:g} s) — {target('delete', p95_deleted <= LAG_TARGET_S)}")
    return p95_added <= LAG_TARGET_S and p95_deleted <= LAG_TARGET_S


async def run(db: Database, *, scale: float = 1.0) -> bool:
    """Both parts, one after the other, on the same database (the live part's channel is another source)."""
    backfilled = await run_backfill(db, scale=scale)
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    return await run_live(db, scale=scale) and backfilled
