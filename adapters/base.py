"""What the composition root expects of a platform adapter."""

from __future__ import annotations

from typing import Protocol

from core.notifier import Notifier


class PlatformAdapter(Protocol):
    """A platform connection: started after the engine, stopped before the database closes."""

    platform: str
    notifier: Notifier

    async def start(self) -> None:
        """Connect, mark answers a crash left unfinished as interrupted, and begin taking events."""
        ...

    async def stop_accepting(self) -> None:
        """Stop taking new questions and clicks (the first step of a graceful shutdown)."""
        ...

    async def interrupt_inflight(self) -> None:
        """Mark answers still streaming after the grace period as interrupted."""
        ...

    async def close(self) -> None:
        """Disconnect from the platform."""
        ...
