"""Who may see a learned channel's passages: everyone who will see the answer must be able to read the channel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from core.api_access import API_PLATFORM
from core.learning.model import Audience, ChannelPlace, Place
from core.learning.ports import ChannelFacts

log = logging.getLogger(__name__)
T = TypeVar("T")

# A search waits at most this long for the platform's facts (a cold cache reads them through the paced door);
# what is not known by then is left out of that answer, and the reads made so far stay cached for the next.
FACTS_DEADLINE_S = 5.0


class ChannelVisibility:
    """The visibility rule of issue 24 over the facts each platform lends (`attach`, one per adapter).

    - No audience (a resumed run, a caller that does not say): no learned channel.
    - Another team's channel: never (the sources' owners say so too).
    - A DM or an assistant thread (`Audience.direct`): the channels the asker can read (one `readable_by`).
    - A channel C: C's own passages; other channels' only when C has no guests, is not shared and is not a DM,
      and the other channel is public and not shared — never a private channel into a channel whose members differ.
    - The HTTP API (no facts): only the channels granted to the key.
    A facts call that fails, or is not back within the search's deadline, leaves its channels out (fail closed),
    logged once per search with the reason.
    """

    def __init__(self, *, deadline_s: float = FACTS_DEADLINE_S) -> None:
        self._facts: dict[str, ChannelFacts] = {}
        self._deadline_s = deadline_s

    def attach(self, platform: str, facts: ChannelFacts) -> None:
        self._facts[platform] = facts

    async def readable(
        self, audience: Audience | None, places: Sequence[ChannelPlace], *, granted: frozenset[str] = frozenset(),
        private: frozenset[str] = frozenset(),
    ) -> frozenset[str]:
        """The keys of `places` whose passages `audience` may be shown. `granted`: the keys granted to the
        audience (the HTTP API's key grants; nothing else reads them); `private`: keys stored as private, which
        never reach another channel, so their facts are not read for one (a public one's still are)."""
        if audience is None or not places:
            return frozenset()
        if audience.platform == API_PLATFORM:
            return frozenset(place.key for place in places if place.key in granted)
        ours = [p for p in places if p.platform == audience.platform and p.workspace == audience.workspace]
        if not ours:
            return frozenset()
        reading = _Reading(deadline=asyncio.get_running_loop().time() + self._deadline_s, deadline_s=self._deadline_s)
        try:
            if audience.direct:
                return await self._for_asker(audience, ours, reading)
            # One stored as private never reaches another channel: the platform need not be asked about it.
            maybe = [place for place in ours if place.channel == audience.channel or place.key not in private]
            return await self._in_channel(audience, maybe, reading)
        finally:
            if reading.left_out:
                log.warning("%d learned channel(s) left out of an answer in %s:%s: %s", reading.left_out,
                            audience.platform, audience.workspace, reading.reason)

    async def _for_asker(self, audience: Audience, ours: list[ChannelPlace], reading: _Reading) -> frozenset[str]:
        facts = self._facts.get(audience.platform)
        if facts is None:
            reading.note(len(ours), f"no facts for platform {audience.platform!r}")
            return frozenset()
        channels = sorted({place.channel for place in ours})
        can_read = await reading.ask(facts.readable_by(audience.workspace, audience.asker, channels), "readable_by",
                                     leaves_out=len(ours))
        if can_read is None:
            return frozenset()
        return frozenset(place.key for place in ours if place.channel in can_read)

    async def _in_channel(self, audience: Audience, ours: list[ChannelPlace], reading: _Reading) -> frozenset[str]:
        own = frozenset(place.key for place in ours if place.channel == audience.channel)
        others = [place for place in ours if place.channel != audience.channel]
        if not others:
            return own
        facts = self._facts.get(audience.platform)
        if facts is None:
            reading.note(len(others), f"no facts for platform {audience.platform!r}")
            return own
        here = await reading.ask(facts.place(audience.workspace, audience.channel), "place of the answering channel",
                                 leaves_out=len(others))
        if here is None:
            return own
        if here.has_guests or here.shared or here.direct:
            return own
        seen = set(own)
        # One after another: warm, the facts answer from memory (a task each would cost more than the read);
        # cold, the platform's door paces the reads anyway. Past the deadline only cached answers come back.
        for place in others:
            there = await reading.ask(facts.place(audience.workspace, place.channel), f"place of {place.key}")
            if there is not None and there.public and not there.shared and not there.direct:
                seen.add(place.key)
        return frozenset(seen)


@dataclass
class _Reading:
    """One search's reads of the facts: one deadline for them all, and why channels were left out."""

    deadline: float
    deadline_s: float
    left_out: int = 0
    reason: str = ""  # the first

    async def ask(self, call: Awaitable[T], what: str, *, leaves_out: int = 1) -> T | None:
        """The call's answer, or None when it fails or is not back by the deadline (fail closed: `leaves_out`
        channels are left out, noted)."""
        try:
            async with asyncio.timeout_at(self.deadline):
                return await call
        except TimeoutError:
            self.note(leaves_out, f"{what}: no answer from the platform within {self.deadline_s:g} s")
        except Exception as error:  # any failure of the platform's answer
            self.note(leaves_out, f"{what} failed: {_reason(error)}")
        return None

    def note(self, count: int, reason: str) -> None:
        self.left_out += count
        self.reason = self.reason or reason

def _reason(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:300]
