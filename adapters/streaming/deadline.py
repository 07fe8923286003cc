"""The editor task's bounded waits: a platform call cut at its deadline (time queued on a budget not counted), and a wait cut short by an event."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from .answer_place import QueueWait, answer_context
from .clock import Clock
from .transport import TransientSendError

T = TypeVar("T")


class CallDeadline:
    """Awaits transport calls, each bounded by `timeout_s` on `clock`."""

    def __init__(self, clock: Clock, timeout_s: float) -> None:
        self._clock = clock
        self._timeout_s = timeout_s

    async def __call__(self, call: Awaitable[T]) -> T:
        """Awaits `call`, bounded by the deadline. Time the call spends queued on a budget of its own (a transport
        that paces a fallback) is not counted: it keeps its place in that queue instead of being cut and asking
        again at the back. Past the deadline the call is cancelled and TransientSendError raised."""
        wait = QueueWait(self._clock)
        if asyncio.iscoroutine(call):
            call_task: asyncio.Future[T] = asyncio.get_running_loop().create_task(
                call, context=answer_context(wait=wait)
            )
        else:
            call_task = asyncio.ensure_future(call)
        try:
            await self._until_done_or_late(call_task, wait)
        except BaseException:
            call_task.cancel()
            raise
        if not call_task.done():
            call_task.cancel()
            raise TransientSendError(f"no answer within {self._timeout_s:g} s")
        return call_task.result()

    async def _until_done_or_late(self, call_task: asyncio.Future[T], wait: QueueWait) -> None:
        started_at = self._clock.now()
        while True:
            left_s = started_at + self._timeout_s + wait.waited_s() - self._clock.now()
            if left_s <= 0:
                return
            timer = asyncio.ensure_future(self._clock.sleep(left_s))
            try:
                await asyncio.wait({call_task, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if call_task.done():
                return


async def unless_set(waiting: Awaitable[object], event: asyncio.Event) -> bool:
    """Awaits `waiting` unless `event` is set first; True when it completed."""
    work = asyncio.ensure_future(waiting)
    ending = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({work, ending}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        work.cancel()
        raise
    finally:
        ending.cancel()
    if not work.done():
        work.cancel()
        return False
    work.result()
    return True
