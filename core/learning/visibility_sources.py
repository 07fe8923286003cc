"""Which sources one search may read: the scope's rows, and the visibility rule for the learned channels among them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import AsyncConnection

from core.api_access import API_PLATFORM
from core.learning.model import CHANNEL_KIND, ChannelPlace
from core.learning.visibility import ChannelVisibility
from core.requests import team_key
from core.retrieval.retriever import DEPLOYMENT_OWNER, Exposure, SourceScope

log = logging.getLogger(__name__)

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
    learned: ChannelPlace | None = None  # its learned_channels row's channel
    private: bool = False  # that row's: private when learning began (the facts say what it is now)

    @property
    def place(self) -> ChannelPlace | None:
        """A learned channel's place; None for any other source, and for a channel source with no learned_channels
        row or whose owner is not that channel's team (left out: nothing vouches for it)."""
        if self.kind != CHANNEL_KIND or self.learned is None:
            return None
        return self.learned if self.owner == team_key(self.learned.platform, self.learned.workspace) else None


async def source_rows(conn: AsyncConnection, scope: SourceScope, *, with_documents: bool = False) -> list[ScopedSource]:
    """Every source, with whether it is granted to one of the scope's audiences (and has documents, when asked),
    and a learned channel's place, in one query."""
    cursor = await conn.execute(
        "SELECT s.id, s.name, s.exposure, s.restricted,"
        " s.restricted AND EXISTS (SELECT 1 FROM source_grants g WHERE g.source_id = s.id AND g.audience = ANY(%s)),"
        + (" EXISTS (SELECT 1 FROM documents d WHERE d.source_id = s.id)" if with_documents else " true")
        + ", s.owner, s.kind, lc.platform, lc.workspace, lc.channel, lc.private"
        " FROM sources s LEFT JOIN learned_channels lc ON lc.source_id = s.id",
        (list(scope.audiences),),
    )
    return [
        ScopedSource(id=int(r[0]), name=r[1], exposure=r[2], restricted=bool(r[3]), granted=bool(r[4]),
                     has_documents=bool(r[5]), owner=r[6], kind=r[7], private=bool(r[11]),
                     learned=ChannelPlace(platform=r[8], workspace=r[9], channel=r[10]) if r[8] is not None else None)
        for r in await cursor.fetchall()
    ]


def candidates(
    rows: Sequence[ScopedSource], scope: SourceScope, *, exposure: Exposure | None, sources: Sequence[str] | None
) -> list[ScopedSource]:
    """The rows the scope may see before the visibility rule: a learned channel passes its restriction here, as
    the rule (needs_rule / apply_rule), not a grant, decides who sees it; owners and names narrow it as any source.
    An API key's scope holds a team's learned channel granted to the key (`relaybot keys create --sources`, the
    operator's choice): the key is the deployment's, the channel its team's, and the grant is what joins them."""
    api = scope.audience is not None and scope.audience.platform == API_PLATFORM
    return [
        row
        for row in rows
        if row.exposure != "off"
        and (exposure is None or row.exposure == exposure)
        and (sources is None or row.name in sources)
        and scope.may_see(name=row.name, restricted=row.restricted, granted=row.granted or row.kind == CHANNEL_KIND,
                          owner=DEPLOYMENT_OWNER if api and row.kind == CHANNEL_KIND and row.granted else row.owner)
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
        known = [(row, place) for row, place in zip(channels, places) if place is not None]
        readable = await visibility.readable(
            scope.audience, [place for _, place in known],
            granted=frozenset(place.key for row, place in known if row.granted),
            private=frozenset(place.key for row, place in known if row.private))
    elif scope.audience is not None:
        _warn_unruled()
    kept = {row.id for row, place in zip(channels, places) if place is not None and place.key in readable}
    return [row for row in rows if row.kind != CHANNEL_KIND or row.id in kept]


def _warn_unruled() -> None:
    global _unruled_warned
    if not _unruled_warned:
        _unruled_warned = True
        log.warning("learned channels are left out of every answer: the retriever was given no ChannelVisibility")
