"""ANSWERS_IN_FLIGHT_MAX: a runner plays at most N answers at once, the rest in arrival order; a stop tells the waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters import wording
from adapters.answer_slots import AnswerSlots
from adapters.answers import AnswerRunner
from core.events import AnswerDelta, Done, Event
from tests.adapters.streaming_fakes import FakeClock
from tests.adapters.test_answers import Approvals, MemoryLive, RecordingSurface


async def test_slots_admit_in_arrival_order_and_a_closed_one_tells_every_waiter() -> None:
    slots = AnswerSlots(1)
    assert await slots.take()
    order: list[str] = []

    async def wait(name: str) -> None:
        order.append(f"{name}:{await slots.take()}")

    first = asyncio.create_task(wait("first"))
    second = asyncio.create_task(wait("second"))
    third = asyncio.create_task(wait("third"))
    await asyncio.sleep(0)
    assert slots.queued == 3
    slots.release()
    await first
    assert order == ["first:True"]
    third.cancel()  # a waiter that gave up is skipped, not handed the slot
    await asyncio.gather(third, return_exceptions=True)
    slots.release()
    await second
    assert order == ["first:True", "second:True"]
    slots.release()
    assert slots.playing == 0
    assert await slots.take()
    late = asyncio.create_task(wait("late"))
    await asyncio.sleep(0)
    slots.close()
    await late
    assert order[-1] == "late:False"
    assert not await slots.take()


def test_a_slot_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        AnswerSlots(0)


class _Gate:
    """A run that answers when let through, so a test decides when each answer ends."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.open: dict[str, asyncio.Event] = {}

    def run(self, name: str) -> AsyncIterator[Event]:
        self.open[name] = asyncio.Event()

        async def events() -> AsyncIterator[Event]:
            self.started.append(name)
            await self.open[name].wait()
            yield AnswerDelta(text=f"answer {name}")
            yield Done(answer=f"answer {name}")

        return events()


async def test_a_runner_plays_at_most_its_limit_and_the_next_question_starts_when_one_ends() -> None:
    clock = FakeClock()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), in_flight_max=2)
    gate = _Gate()
    surfaces = {name: RecordingSurface(clock) for name in "abc"}

    async def scenario() -> None:
        plays = [asyncio.create_task(runner.play(gate.run(name), surfaces[name])) for name in "abc"]
        await clock.sleep(5)
        assert gate.started == ["a", "b"]
        assert runner.queued == 1
        gate.open["a"].set()
        await plays[0]
        await clock.sleep(5)
        assert gate.started == ["a", "b", "c"]
        assert runner.queued == 0
        gate.open["b"].set()
        gate.open["c"].set()
        await asyncio.gather(*plays)

    await clock.run(scenario())
    assert [surfaces[name].transport.final_texts() for name in "abc"] == [["answer a"], ["answer b"], ["answer c"]]


async def test_a_question_still_waiting_at_a_stop_is_told_the_bot_is_restarting_and_never_started() -> None:
    clock = FakeClock()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), in_flight_max=1)
    gate = _Gate()
    playing, waiting = RecordingSurface(clock), RecordingSurface(clock)

    async def scenario() -> None:
        first = asyncio.create_task(runner.play(gate.run("first"), playing))
        second = asyncio.create_task(runner.play(gate.run("second"), waiting))
        await clock.sleep(5)
        assert runner.queued == 1
        await runner.interrupt_all()
        await asyncio.gather(first, second, return_exceptions=True)

    await clock.run(scenario())
    assert gate.started == ["first"]
    assert waiting.notices == [wording.shutting_down()]
    assert waiting.transport.texts == {}
    assert playing.transport.final_texts() == [wording.interrupted()]


async def test_a_submitted_answer_waits_without_its_callers_task_and_its_last_step_runs_after_it() -> None:
    clock = FakeClock()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), in_flight_max=1)
    gate = _Gate()
    surfaces = {name: RecordingSurface(clock) for name in "ab"}
    ended: list[str] = []

    def last_step(name: str) -> Any:
        async def step() -> None:
            ended.append(name)
        return step

    async def scenario() -> None:
        for name in "ab":
            runner.submit(gate.run(name), surfaces[name], then=last_step(name))  # returns at once: no task is kept
        await clock.sleep(5)
        assert gate.started == ["a"] and runner.queued == 1 and ended == []
        gate.open["a"].set()
        await clock.sleep(5)
        assert ended == ["a"] and gate.started == ["a", "b"]
        gate.open["b"].set()
        await clock.sleep(5)

    await clock.run(scenario())
    assert ended == ["a", "b"]
    assert [surfaces[name].transport.final_texts() for name in "ab"] == [["answer a"], ["answer b"]]


async def test_a_submitted_answer_still_waiting_at_a_stop_is_told_and_its_last_step_runs() -> None:
    clock = FakeClock()
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive(), in_flight_max=1)
    gate = _Gate()
    playing, waiting = RecordingSurface(clock), RecordingSurface(clock)
    ended: list[str] = []

    async def note_end() -> None:
        ended.append("waiting")

    async def scenario() -> None:
        runner.submit(gate.run("first"), playing)
        runner.submit(gate.run("second"), waiting, then=note_end)
        await clock.sleep(5)
        await runner.interrupt_all()

    await clock.run(scenario())
    assert gate.started == ["first"]
    assert waiting.notices == [wording.shutting_down()] and ended == ["waiting"]
    assert playing.transport.final_texts() == [wording.interrupted()]
