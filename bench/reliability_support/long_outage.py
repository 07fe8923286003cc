"""Scenario (g): the database down for 30 s while 20 questions are asked; every one answered after, or told."""

from __future__ import annotations

import asyncio
import time

from .harness import Question, Stage
from .slack_side import SlackSide
from .tally import Outcome

G_OUTAGE_S = 30.0
G_DURING = 20
G_AFTER = 5
G_CHANNELS = 10
# The questions spread over the outage, the last a few seconds before Postgres is back.
G_PACE_S = (G_OUTAGE_S - 5.0) / G_DURING
# Slack redelivers an unacked event after a minute: the settle waits that out, and nothing changes meanwhile.
G_SETTLE_S = 180.0
G_STALL_S = 90.0


async def database_down_30_s(stage: Stage) -> None:
    """(g): Postgres stopped (`pg_ctl stop -m fast`) for 30 s; 20 questions asked during it, then 5 more 1 s after it
    is back (Slack: each event redelivered on Slack's own schedule while not acked — at once, after a minute,
    after five; Discord: the gateway sends each once)."""
    side, figures = stage.side, stage.figures
    assert side is not None
    figures.sentence_ok = True
    stage.strict = True
    bot = stage.process("A")
    await stage.start(bot)
    deliveries: list[asyncio.Task[int | None]] = []
    during: list[Question] = []
    await asyncio.to_thread(stage.pg.stop, mode="fast")
    stopped = time.monotonic()
    try:
        for index in range(G_DURING):
            marker = f"Qg{index:03d}"
            stage.script.plan(marker, chars=400, chunk_chars=40, chunk_delay_s=0.05)
            if isinstance(side, SlackSide):
                question = await side.ask(marker, channel_index=index % G_CHANNELS, deliver=False)
                deliveries.append(asyncio.create_task(side.deliver_on_slacks_schedule(question)))
            else:
                question = await side.ask(marker, channel_index=index % G_CHANNELS)  # type: ignore[assignment]
            during.append(question)
            await asyncio.sleep(G_PACE_S)
        await asyncio.sleep(max(0.0, G_OUTAGE_S - (time.monotonic() - stopped)))
    finally:
        await asyncio.to_thread(stage.pg.start)
    figures.check("process survived the outage", bot.running)
    await asyncio.sleep(1.0)
    after: list[Question] = []
    after_deliveries: list[asyncio.Task[int | None]] = []
    for index in range(G_AFTER):
        marker = f"Qg{G_DURING + index:03d}"
        stage.script.plan(marker, chars=400, chunk_chars=40, chunk_delay_s=0.05)
        if isinstance(side, SlackSide):
            question = await side.ask(marker, channel_index=index, deliver=False)
            after_deliveries.append(asyncio.create_task(side.deliver_on_slacks_schedule(question)))
        else:
            question = await side.ask(marker, channel_index=index)  # type: ignore[assignment]
        after.append(question)
    settled = await stage.settle(during + after, limit_s=G_SETTLE_S, stall_s=G_STALL_S)
    unacked = 0
    for name, tasks in (("during", deliveries), ("after", after_deliveries)):
        if not tasks:
            continue
        # The last redelivery is five minutes on: an event still unacked by now is cut short and counted.
        for task in tasks:
            if not task.done():
                task.cancel()
        attempts = await asyncio.gather(*tasks, return_exceptions=True)
        taken = [a for a in attempts if isinstance(a, int)]
        spread = {n: taken.count(n) for n in sorted(set(taken))}
        figures.note(f"Slack deliveries {name} the outage acked at attempt "
                     + (", ".join(f"{n}: {c}" for n, c in spread.items()) or "-")
                     + f"; {len(attempts) - len(taken)} never acked")
        unacked += len(attempts) - len(taken)
    stage.tally(during + after)
    outcomes = [stage.reading(q).outcome for q in during]
    figures.note(f"asked during the outage: {outcomes.count(Outcome.ANSWERED)} answered after it, "
                 f"{outcomes.count(Outcome.SENTENCE)} told")
    answered_after = sum(1 for q in after if stage.reading(q).outcome is Outcome.ANSWERED)
    figures.check(f"questions after the outage answered ({answered_after}/{G_AFTER})", answered_after == G_AFTER)
    figures.check("every question settled in time", settled)
    figures.check("health check green", await bot.healthy())
    if isinstance(side, SlackSide):
        figures.check("every Slack event acked in the end", unacked == 0)
