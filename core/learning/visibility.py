"""Who may see a learned channel's passages: everyone who will see the answer must be able to read the channel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from core.api_access import API_PLATFORM
from core.learning.model import Audience, ChannelPlace, Place
from core.learning.ports import ChannelFacts

log = logging.getLogger(__name__)

# At most this many `place` reads at once for one search (the facts cache them; a cold cache queues on the door).
PLACE_READS_AT_ONCE = 8


class ChannelVisibility:
    """The visibility rule of issue 24 over the facts each platform lends (`attach`, one per adapter).

    - No audience (a resumed run, a caller that does not say): no learned channel.
    - Another team's channel: never (the sources' owners say so too).
    - A DM or an assistant thread (`Audience.direct`): the channels the asker can read (one `readable_by`).
    - A channel C: C's own passages; other channels' only when C has no guests, is not shared and is not a DM,
      and the other channel is public and not shared — never a private channel into a channel whose members differ.
    - The HTTP API (no facts): only the channels granted to the key.
    A facts call that fails leaves that channel out (fail closed), logged once per search with the reason.
    """

    def __init__(self) -> None:
        self._facts: dict[str, ChannelFacts] = {}

    def attach(self, platform: str, facts: ChannelFacts) -> None:
        self._facts[platform] = facts

    async def readable(
        self, audience: Audience | None, places: Sequence[ChannelPlace], *, granted: frozenset[str] = frozenset()
    ) -> frozenset[str]:
        """The keys of `places` whose passages `audience` may be shown; `granted`: the keys granted to the
        audience (the HTTP API's key grants; nothing else reads them)."""
        if audience is None or not places:
            return frozenset()
        if audience.platform == API_PLATFORM:
            return frozenset(place.key for place in places if place.key in granted)
        ours = [p for p in places if p.platform == audience.platform and p.workspace == audience.workspace]
        if not ours:
            return frozenset()
        failures: list[str] = []
        try:
            if audience.direct:
                return await self._for_asker(audience, ours, failures)
            return await self._in_channel(audience, ours, failures)
        finally:
            if failures:
                log.warning("%d learned channel(s) left out of an answer in %s:%s: %s", len(failures),
                            audience.platform, audience.workspace, failures[0])

    async def _for_asker(self, audience: Audience, ours: list[ChannelPlace], failures: list[str]) -> frozenset[str]:
        facts = self._facts.get(audience.platform)
        if facts is None:
            failures.extend([f"no facts for platform {audience.platform!r}"] * len(ours))
            return frozenset()
        channels = sorted({place.channel for place in ours})
        try:
            can_read = await facts.readable_by(audience.workspace, audience.asker, channels)
        except Exception as error:  # fail closed: any failure of the platform's answer
            failures.extend([f"readable_by failed: {_reason(error)}"] * len(ours))
            return frozenset()
        return frozenset(place.key for place in ours if place.channel in can_read)

    async def _in_channel(self, audience: Audience, ours: list[ChannelPlace], failures: list[str]) -> frozenset[str]:
        own = frozenset(place.key for place in ours if place.channel == audience.channel)
        others = [place for place in ours if place.channel != audience.channel]
        if not others:
            return own
        facts = self._facts.get(audience.platform)
        if facts is None:
            failures.extend([f"no facts for platform {audience.platform!r}"] * len(others))
            return own
        try:
            here = await facts.place(audience.workspace, audience.channel)
        except Exception as error:  # fail closed: the answering channel's members are not known
            failures.extend([f"place of the answering channel failed: {_reason(error)}"] * len(others))
            return own
        if here.has_guests or here.shared or here.direct:
            return own
        found = await self._places(facts, audience.workspace, others, failures)
        return own | frozenset(key for key, there in found.items() if there.public and not there.shared and not there.direct)

    async def _places(
        self, facts: ChannelFacts, workspace: str, places: list[ChannelPlace], failures: list[str]
    ) -> dict[str, Place]:
        gate = asyncio.Semaphore(PLACE_READS_AT_ONCE)

        async def read(place: ChannelPlace) -> Place | None:
            async with gate:
                try:
                    return await facts.place(workspace, place.channel)
                except Exception as error:  # fail closed: that channel alone is left out
                    failures.append(f"place of {place.key} failed: {_reason(error)}")
                    return None

        read_places = await asyncio.gather(*(read(place) for place in places))
        return {place.key: there for place, there in zip(places, read_places) if there is not None}


def _reason(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:300]
