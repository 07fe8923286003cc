"""Scenario (e): 100 mentions at once in 100 channels, under a workspace-wide (Slack) or bot-wide (Discord) limit."""

from __future__ import annotations

import asyncio

from .harness import Question, Stage

E_QUESTIONS = 100
E_WORKSPACE_POSTS_PER_MINUTE = 100
E_RANDOM_429_SHARE = 0.05
E_RETRY_AFTER_S = (1, 3)
# The cap lets all 100 first posts through in about a minute; twice that is the bound.
E_SETTLE_S = 120.0


async def burst(stage: Stage, *, tell_the_cap: bool = True) -> None:
    """Slack: the emulator caps chat.postMessage at 100 a minute across the workspace and answers 5 % of
    every call 429 (Retry-After 1–3 s); the process is told the cap (SLACK_WORKSPACE_POSTS_PER_MINUTE)
    or not. Discord: the emulator's bot-wide limit (50 requests a second) besides the per-channel ones."""
    side, figures = stage.side, stage.figures
    assert side is not None
    extra = {"SLACK_WORKSPACE_POSTS_PER_MINUTE": str(E_WORKSPACE_POSTS_PER_MINUTE)} if tell_the_cap else {}
    bot = stage.process("A", **(extra if figures.platform == "slack" else {}))
    await stage.start(bot)
    slack = getattr(side, "slack", None)
    if slack is not None:
        slack.cap_workspace_posts(E_WORKSPACE_POSTS_PER_MINUTE)
        # Only once connected: the random 429s hit every method, apps.connections.open included.
        slack.rate_limit_randomly(E_RANDOM_429_SHARE, retry_after_s=E_RETRY_AFTER_S, seed=10)
    markers = [f"Qe{index:03d}" for index in range(E_QUESTIONS)]
    for marker in markers:
        stage.script.plan(marker, chars=300, chunk_chars=30, chunk_delay_s=0.05)
    questions: list[Question] = list(await asyncio.gather(
        *(side.ask(marker, channel_index=index) for index, marker in enumerate(markers))  # type: ignore[arg-type]
    ))
    settled = await stage.settle(questions, limit_s=E_SETTLE_S)
    stage.tally(questions)
    if slack is not None:
        figures.note(f"{slack.random_429_count} random 429s, {sum(slack.count_429.values())} 429s in all")
        last = max((call.at_s for call in slack.calls), default=0.0)
        recent = sum(1 for call in slack.calls
                     if call.method == "chat.postMessage" and call.status == 200 and call.at_s > last - 60)
        figures.note(f"chat.postMessage accepted in the last minute: {recent} (the cap allows {E_WORKSPACE_POSTS_PER_MINUTE})")
        gave_up = bot.log_lines(r"gave up|dropping it")
        if gave_up:
            figures.note(f"{len(gave_up)} 'gave up'/'dropping it' log lines")
    else:
        dc = side.dc  # type: ignore[union-attr]
        figures.note(f"{dc.count_429} 429s ({dc.count_global_429} global)")
    figures.check("every question settled in time", settled)
