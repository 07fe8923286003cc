"""Shutdown (issue 22): an answer whose final text is delivered is done — what follows it (sources, 👍/👎, Stop's
removal) is cosmetic, and a run is not counted as still running while it waits on those."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.answers import AnswerPlace, AnswerRunner, Pacing
from adapters.streaming import MonotonicClock, RateBudget, StreamLimits
from core.approvals import ApprovalView
from core.citations import Citation
from core.requests import Actor, ConversationKey, Request
from core.store.db import Database
from tests.adapters.streaming_fakes import MemoryTransport
from tests.adapters.test_answers import Approvals, MemoryLive
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine

pytestmark = pytest.mark.timeout(60)

ANSWER = "The deploy went out at noon."


class SlowControlsSurface:
    """A surface whose 👍/👎 (a post after the answer) waits until released: a workspace whose posting budget is
    spent, or a slow Slack."""

    def __init__(self) -> None:
        clock = MonotonicClock()
        self.transport = MemoryTransport(clock=clock, latency_s=0.0)  # type: ignore[arg-type]
        budget = RateBudget(capacity=10, refill_per_s=10, clock=clock)
        self.place = AnswerPlace(platform="test", workspace="W", channel="C")
        self.pacing = Pacing(limits=StreamLimits(max_chars=500), edit_budget=budget, post_budget=budget, clock=clock)
        self.feedback_asked = asyncio.Event()
        self.feedback_released = asyncio.Event()

    async def post(self, text: str, *, key: str | None = None) -> str:
        return await self.transport.post(text, key=key)

    async def edit(self, message_id: str, text: str) -> None:
        await self.transport.edit(message_id, text)

    async def show_working(self) -> None:
        pass

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        raise AssertionError("no approval in this test")

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        pass

    async def show_notice(self, text: str) -> None:
        pass

    # AnswerControls: only its 👍/👎 does anything.
    async def show_stop(self, run_id: str) -> None:
        pass

    async def end_stop(self) -> None:
        pass

    async def clear_stop(self) -> None:
        pass

    async def will_finish(self, run_id: str) -> None:
        pass

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        self.feedback_asked.set()
        await self.feedback_released.wait()


async def test_a_delivered_answer_waiting_on_its_feedback_post_is_not_still_running(
    db: Database, openai_emulator: OpenAIEmulator,
) -> None:
    openai_emulator.script(Text(ANSWER))
    engine = make_engine(db, openai_emulator.base_url)
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    surface = SlowControlsSurface()
    request = Request(question="when did the deploy go out?",
                      conversation=ConversationKey(platform="test", workspace="W", channel="C-shutdown"),
                      user=Actor(id="U1", name="Ada"))
    playing = asyncio.create_task(runner.play(engine.ask(request), surface))
    try:
        await asyncio.wait_for(surface.feedback_asked.wait(), 30)
        assert surface.transport.final_texts() == [ANSWER]
        # What shutdown waits for (bot/runtime.py: engine.drain over the grace period) is over at once.
        assert await engine.drain(5.0)
        assert engine.active_runs == 0
        assert not playing.done()  # only the cosmetic post is left, and a shutdown may drop it
    finally:
        surface.feedback_released.set()
        await asyncio.wait_for(playing, 10)
