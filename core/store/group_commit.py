"""Group commit: writes asked for while one statement runs join the next, so a burst costs a statement, not a commit
(and a lock queue) per caller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Items written in one statement at most (a burst of thousands goes in several).
BATCH_MAX = 500
# A write that has not answered by then is given up (its callers are told), so the items behind it get theirs.
WRITE_TIMEOUT_S = 5.0


@dataclass(eq=False)
class _Asked(Generic[Item, Result]):
    item: Item
    future: asyncio.Future[Result] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupCommit(Generic[Item, Result]):
    """`write(items)` returns one result per item, in order; each caller of `ask` gets its item's. A lone item is
    written at once; items asked while a write runs wait for the next one. `unheard(item, result)`: a result whose
    caller stopped waiting (a timeout, a cancelled task) though the write was made."""

    def __init__(
        self, write: Callable[[list[Item]], Awaitable[list[Result]]], *,
        unheard: Callable[[Item, Result], None] = lambda item, result: None,
        batch_max: int = BATCH_MAX, timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self._write = write
        self._unheard = unheard
        self._batch_max = batch_max
        self._timeout_s = timeout_s
        self._next: list[_Asked[Item, Result]] = []
        self._writer: asyncio.Task[None] | None = None

    async def ask(self, item: Item) -> Result:
        asked: _Asked[Item, Result] = _Asked(item)
        self._next.append(asked)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_while_asked())
        return await asked.future

    async def _write_while_asked(self) -> None:
        try:
            while self._next:
                batch, self._next = self._next[: self._batch_max], self._next[self._batch_max:]
                try:
                    results = await asyncio.wait_for(self._write([asked.item for asked in batch]), self._timeout_s)
                except asyncio.CancelledError:
                    for asked in batch:
                        asked.future.cancel()
                    raise
                except Exception as error:
                    for asked in batch:
                        if not asked.future.done():
                            asked.future.set_exception(error)
                    continue
                for asked, result in zip(batch, results, strict=True):
                    if asked.future.done():
                        self._unheard(asked.item, result)
                    else:
                        asked.future.set_result(result)
        finally:
            self._writer = None
            for asked in self._next:  # only when cancelled itself: the loop runs until nobody is waiting
                asked.future.cancel()
            self._next = []


def last_per_key(items: list[Item], key: Callable[[Item], Hashable]) -> list[Item]:
    """Of several items for one key in a batch, the last (writes of one key keep their order: the last one wins)."""
    latest: dict[Hashable, Item] = {}
    for item in items:
        latest.pop(key(item), None)
        latest[key(item)] = item
    return list(latest.values())
