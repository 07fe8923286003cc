"""At most N answers played at once by one platform adapter: the rest wait their turn in arrival order, and learn
when the process stops before it comes."""

from __future__ import annotations

import asyncio
from collections import deque

# Answers beyond this wait: past the platforms' posting budgets more at once only buys memory (each holds a
# streamer, its tasks and its text) and longer collector pauses, never an earlier answer.
ANSWERS_IN_FLIGHT_MAX = 100


class AnswerSlots:
    """A first-come, first-served semaphore that can be closed: a closed one admits nobody and wakes every waiter."""

    def __init__(self, limit: int = ANSWERS_IN_FLIGHT_MAX) -> None:
        if limit < 1:
            raise ValueError("an answer slot limit is at least 1")
        self.limit = limit
        self._free = limit
        self._waiting: deque[asyncio.Future[bool]] = deque()
        self._closed = False

    @property
    def queued(self) -> int:
        """Answers waiting for a slot."""
        return sum(1 for turn in self._waiting if not turn.done())

    @property
    def playing(self) -> int:
        return self.limit - self._free

    def reserve(self) -> asyncio.Future[bool]:
        """A turn: done at once when a slot is free, else once one frees. Its result True: play the answer and call
        release() after; False: the process stopped first. Cancelled: the runner was abandoned."""
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self._closed:
            turn.set_result(False)
        elif self._free > 0 and not self.queued:
            self._free -= 1
            turn.set_result(True)
        else:
            self._waiting.append(turn)
        return turn

    async def take(self) -> bool:
        """reserve(), awaited."""
        turn = self.reserve()
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.result():
                self.release()  # handed a slot in the same moment it was cancelled: pass it on
            else:
                turn.cancel()
            raise

    def release(self) -> None:
        """A played answer ended: its slot goes to the oldest waiter still waiting."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(True)
                return
        self._free += 1

    def abandon(self) -> None:
        """Closed without a word (a bare close): every waiter's turn is cancelled."""
        self._closed = True
        while self._waiting:
            self._waiting.popleft().cancel()

    def close(self) -> None:
        """The process is stopping: every waiter is told (take returns False) and nobody is admitted after."""
        self._closed = True
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(False)
