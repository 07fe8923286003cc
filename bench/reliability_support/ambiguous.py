"""Scenario (h): ambiguous failures — 10 % of posts and edits are carried out by the platform, then their reply is lost."""

from __future__ import annotations

import asyncio

from .harness import Question, Stage
from .slack_side import SlackSide

H_QUESTIONS = 30
H_CHANNELS = 10
H_PACE_S = 0.3
H_LONG_EVERY = 5  # every fifth answer is long enough to be split over several messages
H_SHARE = 0.10
H_SEED = 29  # each method draws on its own: with 29 the third chat.startStream loses its reply
# Posts, edits and native-stream calls: each does its work and then the connection drops before the reply.
H_SLACK_METHODS = ["chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream", "chat.stopStream"]
H_DISCORD_ROUTES = ["message_create", "message_edit", "thread_from_message"]
H_SETTLE_S = 150.0
H_STALL_S = 45.0


async def lost_replies(stage: Stage) -> None:
    """(h): one process; from its first question on, a seeded 10 % of its posts and edits (Slack: native stream
    calls too; Discord: thread creation too) succeed but the connection drops before the reply. Nothing may be
    shown twice: no second message, no delta appended twice, no part posted again (strict reading)."""
    side, figures = stage.side, stage.figures
    assert side is not None
    stage.strict = True
    bot = stage.process("A")
    await stage.start(bot)
    if isinstance(side, SlackSide):
        side.slack.lose_replies_randomly(H_SHARE, methods=H_SLACK_METHODS, seed=H_SEED)
    else:
        side.dc.fail_after_work_randomly(H_SHARE, routes=H_DISCORD_ROUTES, kind="drop", seed=H_SEED)
    questions: list[Question] = []
    for index in range(H_QUESTIONS):
        marker = f"Qh{index:03d}"
        if index % H_LONG_EVERY == H_LONG_EVERY - 1:
            stage.script.plan(marker, chars=5000, chunk_chars=100, chunk_delay_s=0.05)
        else:
            stage.script.plan(marker, chars=800, chunk_chars=25, chunk_delay_s=0.08)
        questions.append(await side.ask(marker, channel_index=index % H_CHANNELS))  # type: ignore[arg-type]
        await asyncio.sleep(H_PACE_S)
    settled = await stage.settle(questions, limit_s=H_SETTLE_S, stall_s=H_STALL_S)
    if isinstance(side, SlackSide):
        lost = side.slack.random_lost_reply_count
        side.slack.lose_replies_randomly(0)
        calls = [c for c in side.slack.calls if c.method in H_SLACK_METHODS]
        by_method = {m: sum(1 for c in calls if c.method == m) for m in H_SLACK_METHODS}
        figures.note(f"{lost} replies lost of {len(calls)} posts/edits/stream calls ("
                     + ", ".join(f"{m.removeprefix('chat.')} {n}" for m, n in by_method.items() if n) + ")")
    else:
        lost = side.dc.after_work_faults
        side.dc.fail_after_work_randomly(0, routes=[])
        calls = [r for r in side.dc.request_log if r.route in H_DISCORD_ROUTES]
        figures.note(f"{lost} replies lost (connection dropped after the work) of {len(calls)} posts/edits/threads")
    stage.tally(questions)
    figures.check("some replies were lost (the scenario tested something)", lost > 0)
    figures.check("every question settled in time", settled)
    figures.check("health check green", await bot.healthy())
