"""Scenario (f): 1,000 malformed or forged events and clicks; the process must stay up, healthy, and keep answering."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp

from .discord_side import DiscordSide
from .harness import Question, Stage
from .junk_discord import DiscordJunk
from .junk_slack import SlackJunk
from .slack_side import SlackSide
from .tally import leaks_traceback

F_BIG_QUESTIONS = 20
F_REPLAYS_EACH = 3
F_BATCH = 25  # deliveries in flight at once
F_SETTLE_S = 120.0
BIG_CHARS = 100_000


def big_question(marker: str) -> str:
    """A 100 KB question whose marker survives the engine's middle truncation (it is at the start)."""
    head = f"Question {marker}: please read all of this. "
    return head + ("lorem ipsum " * (BIG_CHARS // 12))[: BIG_CHARS - len(head)]


async def _in_batches(sends: list, *, batch: int = F_BATCH) -> list:  # type: ignore[type-arg]
    results: list = []  # type: ignore[type-arg]
    for start in range(0, len(sends), batch):
        results += await asyncio.gather(*(send() for send in sends[start:start + batch]), return_exceptions=True)
    return results


async def _status(port: int, path: str) -> int:
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=5)) as response:
                return response.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return 0


async def junk(stage: Stage) -> None:
    """(f): 20 questions of 100 KB each and 3 replays of each, among 920 malformed or forged events and clicks;
    then one ordinary question. Slack is served in HTTP mode so bodies can be anything."""
    side, figures = stage.side, stage.figures
    assert side is not None
    if isinstance(side, SlackSide):
        bot = stage.process("A", SLACK_TEAM_IDS=side.slack.team_id)
    else:
        assert isinstance(side, DiscordSide)
        discord_junk = DiscordJunk(side)
        await discord_junk.prepare()
        bot = stage.process("A", DISCORD_GUILD_IDS=str(side.guild_id))
    await stage.start(bot)
    url = f"http://127.0.0.1:{bot.port}/slack/events"
    big: list[Question] = []
    for index in range(F_BIG_QUESTIONS):
        marker = f"Qf{index:03d}"
        stage.script.plan(marker, chars=300)
        if isinstance(side, SlackSide):
            big.append(await side.ask(marker, channel_index=index % 10, text=big_question(marker), url=url))
        else:
            big.append(await side.ask(marker, channel_index=index % 10, text=big_question(marker)))
    replays = [
        (lambda q=q: side.redeliver(q, url=url)) if isinstance(side, SlackSide) else (lambda q=q: side.redeliver(q))
        for q in big for _ in range(F_REPLAYS_EACH)
    ]
    if isinstance(side, SlackSide):
        made = SlackJunk(side.slack, url).all()
    else:
        discord_junk.template_message_id = big[0].message_id  # type: ignore[union-attr]
        made = discord_junk.all()
    kinds = Counter(kind for kind, _ in made)
    results = await _in_batches([send for _, send in made] + replays)
    figures.note(f"{len(made) + len(replays) + len(big)} events: {len(big)} big questions, {len(replays)} replays, "
                 + ", ".join(f"{count} {kind}" for kind, count in kinds.items()))
    failed_sends = [result for result in results if isinstance(result, BaseException)]
    if failed_sends:
        figures.note(f"{len(failed_sends)} sends failed on the emulator side ({type(failed_sends[0]).__name__})")
    statuses = Counter(getattr(result, "status", None) for result in results if hasattr(result, "status"))
    if statuses:
        figures.note("HTTP answers: " + ", ".join(f"{status}×{count}" for status, count in sorted(statuses.items())))
    leaked = sum(1 for result in results if leaks_traceback(getattr(result, "body", "") or ""))
    if leaked:
        figures.note(f"{leaked} HTTP answers carried a traceback")
    await asyncio.sleep(2.0)
    figures.check("process still running", bot.running)
    # The health check, then an ordinary question: the process still works.
    final_marker = f"Qf{F_BIG_QUESTIONS:03d}"
    stage.script.plan(final_marker, chars=300)
    if isinstance(side, SlackSide):
        final = await side.ask(final_marker, channel_index=0, url=url)
    else:
        final = await side.ask(final_marker, channel_index=0)
    questions = big + [final]
    settled = await stage.settle(questions, limit_s=F_SETTLE_S)
    stage.tally(questions)
    figures.check("process still running after", bot.running)
    figures.check("/healthz 200", await _status(bot.port, "/healthz") == 200)
    ready = await _status(bot.port, "/readyz")
    figures.check(f"/readyz 200 (got {ready})" if ready not in (200, 404) else "/readyz 200", ready in (200, 404))
    figures.check("every question settled in time", settled)
    figures.note(f"{stage.script.unknown} model calls for junk that reached the engine")
