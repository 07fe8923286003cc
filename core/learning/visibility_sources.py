"""Which sources one search may read: the scope's rows, and the visibility rule for the learned channels among them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import AsyncConnection

from core.learning.model import ChannelPlace
from core.learning.visibility import ChannelVisibility
from core.requests import team_key
from core.retrieval.retriever import Exposure, SourceScope

log = logging.getLogger(__name__)

CHANNEL_KIND = "channel"
CHANNEL_NAME_PREFIX = "channel"
_unruled_warned = False


@dataclass(frozen=True, kw_only=True)
class ScopedSource:
    """One source as a search's scoping reads it."""

    id: int
    name: str
    exposure: str
    restricted: bool
    granted: bool  # restricted and granted to one of the scope's audiences
    has_documents: bool
    owner: str
    kind: str

    @property
    def place(self) -> ChannelPlace | None:
        """A learned channel's place, from its name `channel:<platform>:<workspace>:<channel>`; None for any
        other source, and for a channel row whose name and owner disagree (left out: nothing vouches for it)."""
        if self.kind != CHANNEL_KIND:
            return None
        parts = self.name.split(":")
        if len(parts) != 4 or parts[0] != CHANNEL_NAME_PREFIX or not all(parts[1:]):
            return None
        _, platform, workspace, channel = parts
        if self.owner != team_key(platform, workspace):
            return None
        return ChannelPlace(platform=platform, workspace=workspace, channel=channel)


async def source_rows(conn: AsyncConnection, scope: SourceScope, *, with_documents: bool = False) -> list[ScopedSource]:
    """Every source, with whether it is granted to one of the scope's audiences (and has documents, when asked)."""
    cursor = await conn.execute(
        "SELECT s.id, s.name, s.exposure, s.restricted,"
        " s.restricted AND EXISTS (SELECT 1 FROM source_grants g WHERE g.source_id = s.id AND g.audience = ANY(%s)),"
        + (" EXISTS (SELECT 1 FROM documents d WHERE d.source_id = s.id)" if with_documents else " true")
        + ", s.owner, s.kind FROM sources s",
        (list(scope.audiences),),
    )
    return [
        ScopedSource(id=int(r[0]), name=r[1], exposure=r[2], restricted=bool(r[3]), granted=bool(r[4]),
                     has_documents=bool(r[5]), owner=r[6], kind=r[7])
        for r in await cursor.fetchall()
    ]


def candidates(
    rows: Sequence[ScopedSource], scope: SourceScope, *, exposure: Exposure | None, sources: Sequence[str] | None
) -> list[ScopedSource]:
    """The rows the scope may see before the visibility rule: a learned channel passes its restriction here, as
    the rule (needs_rule / apply_rule), not a grant, decides who sees it; owners and names narrow it as any source."""
    return [
        row
        for row in rows
        if row.exposure != "off"
        and (exposure is None or row.exposure == exposure)
        and (sources is None or row.name in sources)
        and scope.may_see(name=row.name, restricted=row.restricted, granted=row.granted or row.kind == CHANNEL_KIND,
                          owner=row.owner)
    ]


def needs_rule(rows: Sequence[ScopedSource], scope: SourceScope) -> bool:
    """Whether apply_rule has anything to decide: a learned channel among the rows, in a conversation's scope
    (operators' tools, every_restricted, see every source)."""
    return not scope.every_restricted and any(row.kind == CHANNEL_KIND for row in rows)


async def apply_rule(
    rows: Sequence[ScopedSource], scope: SourceScope, visibility: ChannelVisibility | None
) -> list[ScopedSource]:
    """The rows without the learned channels the scope's audience may not be shown."""
    channels = [row for row in rows if row.kind == CHANNEL_KIND]
    if not channels or scope.every_restricted:
        return list(rows)
    places = [row.place for row in channels]
    readable: frozenset[str] = frozenset()
    if visibility is not None:
        granted = frozenset(place.key for row, place in zip(channels, places) if place is not None and row.granted)
        readable = await visibility.readable(scope.audience, [p for p in places if p is not None], granted=granted)
    elif scope.audience is not None:
        _warn_unruled()
    kept = {row.id for row, place in zip(channels, places) if place is not None and place.key in readable}
    return [row for row in rows if row.kind != CHANNEL_KIND or row.id in kept]


def _warn_unruled() -> None:
    global _unruled_warned
    if not _unruled_warned:
        _unruled_warned = True
        log.warning("learned channels are left out of every answer: the retriever was given no ChannelVisibility")
