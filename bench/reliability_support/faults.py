"""Scenarios (c) and (d): the database stopped mid-answers, and the language model failing in every way it can."""

from __future__ import annotations

import asyncio
from collections import deque

from tests.emulators.openai_server import Call, Fault, Reply, ToolCalls

from .harness import Question, Stage

C_IN_FLIGHT = 10
C_AFTER = 10
C_OUTAGE_S = 10.0
C_STOP_AFTER_S = 2.0  # after the last question in flight was asked
C_SETTLE_S = 150.0
D_REPEAT = 2  # questions per fault kind
D_SETTLE_S = 120.0
D_IDLE_TIMEOUT_S = 3  # LLM_IDLE_TIMEOUT_S, so a stalled stream is noticed quickly
BROKEN_ARGUMENTS = '{"expression": "2+'


async def database_outage(stage: Stage) -> None:
    """(c): questions streaming when Postgres stops (`pg_ctl stop -m fast`) for 10 s; more questions after it is back."""
    side, figures = stage.side, stage.figures
    assert side is not None
    figures.sentence_ok = True
    bot = stage.process("A")
    await stage.start(bot)
    in_flight: list[Question] = []
    for index in range(C_IN_FLIGHT):
        marker = f"Qc{index:03d}"
        stage.script.plan(marker, chars=1000, chunk_chars=25, chunk_delay_s=0.15)  # about 6 s of streaming
        in_flight.append(await side.ask(marker, channel_index=index))  # type: ignore[arg-type]
    await asyncio.sleep(C_STOP_AFTER_S)
    await asyncio.to_thread(stage.pg.stop, mode="fast")
    try:
        await asyncio.sleep(C_OUTAGE_S)
    finally:
        await asyncio.to_thread(stage.pg.start)
    figures.check("process survived the outage", bot.running)
    await asyncio.sleep(1.0)
    after: list[Question] = []
    for index in range(C_AFTER):
        marker = f"Qc{C_IN_FLIGHT + index:03d}"
        stage.script.plan(marker, chars=400, chunk_chars=50, chunk_delay_s=0.02)
        after.append(await side.ask(marker, channel_index=index))  # type: ignore[arg-type]
    settled = await stage.settle(in_flight + after, limit_s=C_SETTLE_S)
    stage.tally(in_flight + after)
    answered_after = sum(1 for q in after if stage.reading(q).outcome.value == "answered")
    figures.note(f"in flight: {sum(1 for q in in_flight if stage.reading(q).outcome.value == 'answered')} answered, "
                 f"{sum(1 for q in in_flight if stage.reading(q).outcome.value == 'sentence')} ended with a sentence")
    figures.check(f"next questions answered without a restart ({answered_after}/{C_AFTER})", answered_after == C_AFTER)
    figures.check("every question settled in time", settled)
    figures.check("health check green", await bot.healthy())


def _fault_cases() -> list[tuple[str, list[Reply], bool]]:
    """(name, replies before the answer, whether they repeat forever)."""
    broken = ToolCalls([Call("calculator", BROKEN_ARGUMENTS)])
    return [
        ("500 always", [Fault("500")], True),
        ("500 once", [Fault("500")], False),
        ("429 always", [Fault("429", retry_after_s=1.0)], True),
        ("429 once", [Fault("429", retry_after_s=1.0)], False),
        ("stall after text", [Fault("stall", text="Partial answer ")], False),
        ("stall before text", [Fault("stall", text="")], False),
        ("cut after text", [Fault("cut", text="Partial answer ")], False),
        ("cut before text", [Fault("cut", text="")], False),
        ("malformed tool-call JSON once", [broken], False),
        ("malformed tool-call JSON always", [broken], True),
    ]


async def model_faults(stage: Stage) -> None:
    """(d): 500, 429 with Retry-After, stalls, cut streams, malformed tool-call JSON — once, or for good."""
    side, figures = stage.side, stage.figures
    assert side is not None
    figures.sentence_ok = True
    bot = stage.process("A", LLM_IDLE_TIMEOUT_S=str(D_IDLE_TIMEOUT_S))
    await stage.start(bot)
    questions: list[Question] = []
    kinds: dict[str, str] = {}
    for index, (name, before, repeat) in enumerate(case for case in _fault_cases() for _ in range(D_REPEAT)):
        marker = f"Qd{index:03d}"
        stage.script.plan(marker, chars=300, before=deque(before), repeat_before=repeat)
        kinds[marker] = name
        questions.append(await side.ask(marker, channel_index=index % 10))  # type: ignore[arg-type]
    settled = await stage.settle(questions, limit_s=D_SETTLE_S)
    stage.tally(questions)
    for question in questions:
        outcome = stage.reading(question).outcome.value
        if outcome == "lost":
            figures.note(f"{kinds[question.marker]}: lost")
    figures.check("every question settled in time", settled)
    figures.check("health check green", await bot.healthy())
