"""Scenarios (a) and (b): two processes on one database, one stopped by SIGTERM or killed by SIGKILL mid-work."""

from __future__ import annotations

import asyncio

from .harness import REPAIR_STALL_S, Question, Stage

A_QUESTIONS = 50
A_CHANNELS = 10
A_PACE_S = 0.25
A_SIGTERM_AFTER = 20  # questions asked before process A gets SIGTERM
A_REDELIVER_EVERY = 5
A_LONG_EVERY = 10  # every tenth answer is long enough to be split over several messages
A_SETTLE_S = 180.0
B_QUESTIONS = 5
B_SETTLE_S = 90.0


async def two_processes_and_a_rolling_restart(stage: Stage) -> None:
    """(a): 50 mentions over two processes plus redeliveries; A gets SIGTERM mid-answers and starts again."""
    side, figures = stage.side, stage.figures
    assert side is not None
    first, second = stage.process("A", of=2), stage.process("B", of=2)
    await stage.start(first)
    await stage.start(second)
    questions: list[Question] = []
    redelivered = 0
    restart: asyncio.Task[None] | None = None

    async def rolling_restart() -> None:
        code = await first.terminate()
        if code != 0:
            figures.note(f"A exited {code} on SIGTERM")
        await stage.start(first)

    for index in range(A_QUESTIONS):
        marker = f"Qa{index:03d}"
        long = index % A_LONG_EVERY == A_LONG_EVERY - 3
        if long:
            stage.script.plan(marker, chars=5000, chunk_chars=100, chunk_delay_s=0.05)
        else:
            stage.script.plan(marker, chars=500, chunk_chars=25, chunk_delay_s=0.1)
        questions.append(await side.ask(marker, channel_index=index % A_CHANNELS))  # type: ignore[arg-type]
        if index % A_REDELIVER_EVERY == A_REDELIVER_EVERY - 1:
            await side.redeliver(questions[index - 2])  # type: ignore[arg-type]
            redelivered += 1
        if index == A_SIGTERM_AFTER:
            restart = asyncio.create_task(rolling_restart())
        await asyncio.sleep(A_PACE_S)
    if restart is not None:
        await restart
    # Redeliveries after the restart too: the restarted process must not answer them again.
    for question in questions[:: A_LONG_EVERY]:
        await side.redeliver(question)  # type: ignore[arg-type]
        redelivered += 1
    settled = await stage.settle(questions, limit_s=A_SETTLE_S, stall_s=REPAIR_STALL_S)
    stage.tally(questions)
    figures.note(f"{redelivered} redeliveries")
    figures.check("every question settled in time", settled)
    figures.check("A restarted", first.starts == 2)


async def approval_survives_a_crash(stage: Stage) -> None:
    """(b): A posts approval messages and is killed (SIGKILL); B, already running, takes the clicks."""
    side, figures = stage.side, stage.figures
    assert side is not None
    first, second = stage.process("A", of=2), stage.process("B", of=2)
    await stage.start(first)
    questions: list[Question] = []
    for index in range(B_QUESTIONS):
        marker = f"Qb{index:03d}"
        stage.script.plan(marker, chars=300, reminder=True)
        questions.append(await side.ask(marker, channel_index=index))  # type: ignore[arg-type]
    shown = await _wait(lambda: all(side.approval_messages(q) for q in questions), limit_s=60)  # type: ignore[arg-type]
    figures.check("every approval message shown", shown)
    await stage.start(second)
    await first.kill()
    await stage.wait_connected()
    approved = 0
    for question in questions:
        if await side.approve(question):  # type: ignore[arg-type]
            approved += 1
    figures.approvals = approved
    settled = await stage.settle(questions, limit_s=B_SETTLE_S, stall_s=REPAIR_STALL_S)
    stage.tally(questions)
    runs = await stage.reminder_runs()
    figures.runs_per_call = [runs.get(q.marker, 0) for q in questions]
    figures.tool_runs = sum(figures.runs_per_call)
    figures.check("every question settled in time", settled)
    taken = len(second.log_lines(r"approved create_reminder"))
    figures.check(f"the clicks were taken by the surviving process ({taken}/{approved})", taken == approved)
    figures.check("every question got one approval message",
                  all(side.approval_count(q) == 1 for q in questions))  # type: ignore[arg-type]


async def _wait(predicate, *, limit_s: float) -> bool:  # type: ignore[no-untyped-def]
    for _ in range(int(limit_s / 0.2)):
        if predicate():
            return True
        await asyncio.sleep(0.2)
    return bool(predicate())
