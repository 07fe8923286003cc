"""Which way one answer goes (a native stream, or post+update from its first post or its first trouble on), and the budget its streamer draws on for that way."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Literal

from adapters.streaming import Priority, RateBudget

from .native_streaming import NativeCounts, NativeStreaming

Mode = Literal["undecided", "native", "classic"]


class NativeAnswer:
    """Which way one answer goes: decided by its first post, and switched to classic for good on any trouble."""

    def __init__(self, native: NativeStreaming) -> None:
        self.mode: Mode = "undecided"
        self._native = native

    def to_classic(self, reason: str) -> None:
        if self.mode == "native":
            self._native.fell_back(reason)
        self.mode = "classic"


class BudgetSwitch:
    """The RateBudget the streamer draws on for one answer: the stream method's while it streams natively,
    the post+update one otherwise. The posting one decides the answer's way at its first post: a stream
    when a chat.startStream token is free now (never for a final), post+update otherwise."""

    def __init__(self, answer: NativeAnswer, *, native: RateBudget, classic: RateBudget, counts: NativeCounts | None) -> None:
        self._answer = answer
        self._native = native
        self._classic = classic
        self._counts = counts  # given to the posting switch only: it counts the decision
        self._granted: RateBudget | None = None

    @property
    def _target(self) -> RateBudget:
        return self._native if self._answer.mode == "native" else self._classic

    def _decide(self, priority: Priority | None, shows_text: bool) -> bool:
        """True when this request was granted by deciding on a native stream."""
        if self._counts is None or self._answer.mode != "undecided":
            return False
        if priority is Priority.FIRST and self._native.try_acquire(priority, shows_text=shows_text):
            self._answer.mode = "native"
            self._counts.native += 1
            self._granted = self._native
            return True
        self._answer.mode = "classic"
        self._counts.post_update += 1
        return False

    def _next_stream(self, priority: Priority | None, shows_text: bool) -> bool:
        """A later message of a streaming answer (after a roll-over) streams only if a start is free now;
        otherwise the rest of the answer posts and updates rather than wait on the low tier."""
        if self._counts is None or self._answer.mode != "native" or priority is not Priority.FIRST:
            return False
        if self._native.try_acquire(priority, shows_text=shows_text):
            self._granted = self._native
            return True
        self._answer.to_classic("start_budget")
        return False

    async def acquire(
        self, priority: Priority, requester_key: Hashable = None, *, shows_text: bool = False,
        promote: asyncio.Event | None = None,
    ) -> None:
        if self._decide(priority, shows_text) or self._next_stream(priority, shows_text):
            return
        target = self._target
        await target.acquire(priority, requester_key, shows_text=shows_text, promote=promote)
        self._granted = target

    def try_acquire(self, priority: Priority | None = None, *, shows_text: bool = False) -> bool:
        if self._decide(priority, shows_text) or self._next_stream(priority, shows_text):
            return True
        target = self._target
        if target.try_acquire(priority, shows_text=shows_text):
            self._granted = target
            return True
        return False

    def penalize(self, retry_after_s: float, *, wide: bool = True) -> None:
        (self._granted or self._target).penalize(retry_after_s, wide=wide)

    def release(self) -> None:
        (self._granted or self._target).release()
