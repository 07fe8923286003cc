"""Scenario (j), Slack: an incident — 60 s of 503/429 on every Web API method, a process restarted during it — then
recovery: every kept final delivered, paced (no 429 of Slack's own limits once it is over)."""

from __future__ import annotations

import asyncio
import time

from .harness import Question, Stage
from .slack_side import SlackSide

J_BEFORE = 10  # questions streaming when the incident starts
J_DURING = 50  # asked during it: five or more kept finals a channel, past chat.postMessage's burst of 3
J_DURING_PACE_S = 0.5
J_CHANNELS = 10
J_INCIDENT_S = 60.0
J_SHARE_503 = 0.5
J_RETRY_AFTER_S = (1, 10)
J_SEED = 30
J_LONG_EVERY = 5
# A deploy (or an operator) restarts A during the incident: its kept finals are B's to deliver, looked up first
# where a post was attempted; A comes back once Slack does (apps.connections.open fails until then).
J_SIGTERM_AT_S = 30.0
# Backoff on transient failures is capped at 5 minutes; and the workspace's chat.postMessage rate, learnt down by
# the incident's 429s, grows back slowly (about 5 minutes for 60 finals in one run): measured, not cut short.
J_SETTLE_S = 420.0
J_STALL_S = 150.0
J_POLL_S = 1.0
DELIVERY_METHODS = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream", "chat.stopStream")


async def slack_incident(stage: Stage) -> None:
    """(j): two processes; 10 answers streaming when every Web API call starts failing (half 503
    service_unavailable, half 429 with Retry-After 1–10 s) for 60 s, 50 more questions during it, A SIGTERMed
    30 s in; then Slack recovers and A starts again."""
    side, figures = stage.side, stage.figures
    assert isinstance(side, SlackSide)
    slack = side.slack
    stage.strict = True
    first, second = stage.process("A", of=2), stage.process("B", of=2)
    await stage.start(first)
    await stage.start(second)
    questions: list[Question] = []

    def plan(index: int) -> str:
        marker = f"Qj{index:03d}"
        if index % J_LONG_EVERY == J_LONG_EVERY - 1:
            stage.script.plan(marker, chars=5000, chunk_chars=100, chunk_delay_s=0.05)
        else:
            stage.script.plan(marker, chars=800, chunk_chars=25, chunk_delay_s=0.15)
        return marker

    for index in range(J_BEFORE):
        questions.append(await side.ask(plan(index), channel_index=index % J_CHANNELS))
    await asyncio.sleep(2.0)
    incident = slack.start_incident(share_503=J_SHARE_503, retry_after_s=J_RETRY_AFTER_S, seed=J_SEED)
    began = time.monotonic()
    kept_peak, watch = 0, True

    async def watch_outbox() -> None:
        nonlocal kept_peak
        while watch:
            rows = await stage.count_rows("pending_finals")
            kept_peak = max(kept_peak, rows or 0)
            await asyncio.sleep(J_POLL_S)

    watcher = asyncio.create_task(watch_outbox())
    try:
        for index in range(J_BEFORE, J_BEFORE + J_DURING):
            questions.append(await side.ask(plan(index), channel_index=index % J_CHANNELS))
            await asyncio.sleep(J_DURING_PACE_S)
        await asyncio.sleep(max(0.0, J_SIGTERM_AT_S - (time.monotonic() - began)))
        code = await first.terminate()
        figures.check(f"A stopped cleanly on SIGTERM during the incident (exit {code})", code == 0)
        await asyncio.sleep(max(0.0, J_INCIDENT_S - (time.monotonic() - began)))
    finally:
        slack.end_incident()
    recovered = time.monotonic()
    await stage.start(first)
    figures.note(f"incident: {incident.count_503} calls answered 503, {incident.count_429} answered 429")
    settled = await stage.settle(questions, limit_s=J_SETTLE_S, stall_s=J_STALL_S)
    watch = False
    await watcher
    last_delivery = max((c.at_s for c in slack.calls if c.method in DELIVERY_METHODS and c.status == 200 and not c.error),
                        default=recovered)
    after = [c for c in slack.calls if c.at_s >= recovered]
    limited = [c for c in after if c.status == 429]
    methods = sorted({c.method for c in limited})
    figures.note(f"after recovery: {len(limited)} 429s of {len(after)} calls"
                 + (f" ({', '.join(methods)})" if methods else "")
                 + f"; time to settle {max(0.0, last_delivery - recovered):.0f} s (the last answer call after recovery)")
    posts = [c for c in after if c.method == "chat.postMessage" and c.status == 200]
    if len(posts) > 1:
        span = posts[-1].at_s - posts[0].at_s
        figures.note(f"chat.postMessage after recovery: {len(posts)} in {span:.0f} s "
                     f"({60 * (len(posts) - 1) / max(span, 1e-9):.0f} a minute)")
    left = await stage.count_rows("pending_finals")
    figures.note(f"kept finals: at most {kept_peak} in the outbox at once, {left} left at the end")
    dropped = first.log_lines(r"dropping it|cannot be delivered") + second.log_lines(r"dropping it|cannot be delivered")
    stage.tally(questions)
    figures.check(f"every kept final delivered (outbox empty, {len(dropped)} dropped)", left == 0 and not dropped)
    figures.check(f"paced after recovery ({len(limited)} 429s, target 0)", not limited)
    figures.check("some finals were kept (the scenario tested the outbox)", kept_peak > 0)
    figures.check("every question settled in time", settled)
    figures.check("health checks green", await first.healthy() and await second.healthy())
