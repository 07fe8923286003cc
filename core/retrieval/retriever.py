"""The retriever interface the agents search through; core/retrieval provides the Postgres one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from core.events import SourceItem

Exposure = Literal["prefetch", "agentic_tool"]


@dataclass(frozen=True, kw_only=True)
class SourceScope:
    """Which sources one conversation may search: every open source, plus the restricted ones granted
    to one of `audiences` (its channel, or its workspace's DMs); `only` narrows that to some names.

    A search given no scope sees open sources only: a caller that forgets to say where it searches
    from never sees a restricted one. `every_restricted` is for operators' tools (the bench), never
    for a conversation.
    """

    audiences: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    every_restricted: bool = False

    def may_see(self, *, name: str, restricted: bool, granted: bool) -> bool:
        if self.only is not None and name not in self.only:
            return False
        return not restricted or granted or self.every_restricted


OPEN_SOURCES = SourceScope()


class Retriever(Protocol):
    """Finds citable passages for a query."""

    async def search(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: Exposure | None = None,
        sources: Sequence[str] | None = None,
        scope: SourceScope | None = None,
    ) -> list[SourceItem]:
        """Best passages first; at most `limit`, and within `token_budget` tokens of text when given;
        only from sources `scope` may see (None: open sources only)."""
        ...

    async def has_sources(self, exposure: Exposure, *, scope: SourceScope | None = None) -> bool:
        """Whether any source `scope` may see is exposed this way (the classic agent offers internal_search only then)."""
        ...
