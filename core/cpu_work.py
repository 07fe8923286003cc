"""Input-sized CPU work (page extraction, PDF and Office parsing) in a worker thread or a child, a few at a time: memory is
bounded by a few inputs' worth however many arrive at once, and past the cores more threads buy no speed."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# One per core, at least two: a 2 MB page peaks at ~15 MB while it is parsed.
CPU_WORK_AT_ONCE = max(2, os.cpu_count() or 2)

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _gate() -> asyncio.Semaphore:
    # A semaphore belongs to one event loop: each loop (a test's, the process's) gets its own.
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(CPU_WORK_AT_ONCE)
    return gate


def cpu_turn() -> asyncio.Semaphore:
    """One of CPU_WORK_AT_ONCE turns (`async with`), for work of this kind done elsewhere (a child process)."""
    return _gate()


async def in_worker(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """fn(*args) in a worker thread once one of CPU_WORK_AT_ONCE turns is free."""
    async with _gate():
        return await asyncio.to_thread(fn, *args, **kwargs)
