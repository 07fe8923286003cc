"""A bot process's learning from channels: one service lent to every adapter, each adapter's door and facts attached, its jobs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from adapters.base import PlatformAdapter
from bot.jobs import OneAtATime
from core.config import Settings
from core.learning.ports import LearnsChannels
from core.learning.service import ChannelLearningService
from core.learning.visibility import ChannelVisibility
from core.retrieval.embeddings import EmbeddingProvider
from core.store.db import Database

# How often channels with work (a backfill, the catch-up after a start) are looked for; a run under way is not doubled,
# so a backfill paced at the platform's read limit goes on across ticks.
LEARN_CHECK_S = 2.0
# Retention (each channel's "keep for N days").
PURGE_LEARNED_INTERVAL_S = 3600.0
# At shutdown, the documents of live changes already taken are rebuilt within this (a burst waits ~0.5 s between
# builds), not cancelled: a message kept but not yet searchable would stay unsearchable until its document changes.
SETTLE_AT_CLOSE_S = 5.0

log = logging.getLogger(__name__)

Job = tuple[Callable[[], Awaitable[None]], float, str]


class ProcessLearning:
    """The service and the visibility rule of one process, and what they were lent: `attach` takes each adapter that
    can be learned from (core.learning.ports.LearnsChannels); the others are neither read nor asked."""

    def __init__(self, settings: Settings, db: Database, *, embedder: EmbeddingProvider | None,
                 visibility: ChannelVisibility) -> None:
        self.service = ChannelLearningService(db, embedder=embedder, settings=settings)
        self.visibility = visibility
        self.platforms: list[str] = []  # those whose channels this process backfills and keeps current
        self._due = OneAtATime(self.service.run_due, what="learn from the chosen channels")
        self._purge = OneAtATime(self.service.purge_expired, what="purge what learned channels keep no longer")

    def attach(self, adapters: Sequence[PlatformAdapter]) -> None:
        for adapter in adapters:
            if isinstance(adapter, LearnsChannels):
                self.service.attach(adapter.platform, adapter.channel_history)
                self.visibility.attach(adapter.platform, adapter.channel_facts)
                self.platforms.append(adapter.platform)

    def jobs(self) -> list[Job]:
        """(coroutine function, interval, id) for the scheduler: the backfill only where a platform is attached."""
        jobs: list[Job] = [(self._purge.tick, PURGE_LEARNED_INTERVAL_S, "purge-learned-channels")]
        if self.platforms:
            jobs.append((self._due.tick, LEARN_CHECK_S, "learn-from-channels"))
        return jobs

    async def stop(self) -> None:
        """Before the adapters close: a backfill under way is cancelled (its last page's checkpoint is stored with
        the page, so the next start goes on from there), not failed on a closed door."""
        await self._due.stop()
        await self._purge.stop()

    async def close(self) -> None:
        """After the adapters closed (no change comes any more), before the database closes."""
        await self.stop()
        try:
            async with asyncio.timeout(SETTLE_AT_CLOSE_S):
                await self.service.settled()
        except TimeoutError:
            log.warning("some learned channels' documents were not rebuilt within %.0f s of the shutdown; they are "
                        "rebuilt when their messages next change", SETTLE_AT_CLOSE_S)
        await self.service.close()
