"""Kept finals are claimed a few at a time: a process slow on one final never holds the others from every other
live process (it claimed every final of the platform at once and delivered them one after another)."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.answers import FINALS_PER_CLAIM, AnswerRunner
from core.approvals import ApprovalView
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.heartbeats import Heartbeats
from core.store.pending_finals import PendingFinals
from tests.support.ports import ports_for


class Approvals:
    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None: ...

    async def withdraw(self, continuation_id: str) -> bool:
        return True

    async def view(self, continuation_id: str) -> ApprovalView | None:
        return None


class Channel:
    """A platform where posting into `slow_channel` waits for `released`."""

    def __init__(self, slow_channel: str) -> None:
        self.slow_channel = slow_channel
        self.released = asyncio.Event()
        self.posted: list[tuple[str, str]] = []
        self.waiting = asyncio.Event()

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        if final.channel == self.slow_channel:
            self.waiting.set()
            await self.released.wait()
        self.posted.append((final.answer_id, text))
        return f"m-{final.answer_id}-{index}"

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None: ...


async def test_a_process_slow_on_one_final_leaves_the_others_to_another_process(db: Database) -> None:
    gone = PendingFinals(db, owner="gone-claims")
    count = FINALS_PER_CLAIM + 4
    for n in range(count):
        final = PendingFinal(answer_id=f"claim-{n}", platform="claims", workspace="W", channel=f"C{n}", thread="",
                             parts=(FinalPart(text=f"answer {n}"),))
        await gone.keep(final)
        await gone.release(final.answer_id)
        await asyncio.sleep(0.01)  # created in order: the oldest is claimed first
    a_ports, b_ports = ports_for(db), ports_for(db)
    for ports in (a_ports, b_ports):
        await Heartbeats(db, owner=ports.outbox.owner).beat()  # type: ignore[attr-defined]
    a = AnswerRunner(platform="claims", approvals=Approvals(), live=a_ports.live, outbox=a_ports.outbox)
    b = AnswerRunner(platform="claims", approvals=Approvals(), live=b_ports.live, outbox=b_ports.outbox)
    slow = Channel(slow_channel="C0")
    passing = asyncio.create_task(a.deliver_pending(slow))  # A claims the oldest first and waits on its channel
    await asyncio.wait_for(slow.waiting.wait(), 10)
    fast = Channel(slow_channel="none")
    delivered_by_b = await b.deliver_pending(fast)
    # B delivers all but what A holds now (at most one claim's worth), instead of nothing.
    assert delivered_by_b >= count - FINALS_PER_CLAIM, fast.posted
    slow.released.set()
    delivered_by_a = await asyncio.wait_for(passing, 10)
    assert delivered_by_a + delivered_by_b == count
    assert sorted(answer for answer, _ in slow.posted + fast.posted) == sorted(f"claim-{n}" for n in range(count))
