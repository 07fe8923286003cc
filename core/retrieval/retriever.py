"""The retriever interface the agents search through; core/retrieval provides the Postgres one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from core.events import SourceItem
from core.learning.model import Audience

Exposure = Literal["prefetch", "agentic_tool"]
# The owner of a source that belongs to no team: this deployment's own (sources.owner '').
DEPLOYMENT_OWNER = ""


@dataclass(frozen=True, kw_only=True)
class SourceScope:
    """Which sources one conversation may search: of the sources `owners` hold (its team's, `slack:T1`, and
    '' — the deployment's own — where its platform shares them), every open one, plus the restricted ones
    granted to one of `audiences` (its channel, or its workspace's DMs); `only` narrows that to some names.

    A search given no scope sees the deployment's open sources only: a caller that forgets to say where it
    searches from never sees a restricted source, nor a team's. `every_restricted` (and `owners=None`, every
    owner) are for operators' tools (the bench), never for a conversation.

    A learned channel's source (kind 'channel') is seen by the visibility rule instead of its grants
    (core/learning/visibility.py): only where everyone `audience` names can read that channel; no audience, none.
    """

    audiences: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    every_restricted: bool = False
    owners: tuple[str, ...] | None = (DEPLOYMENT_OWNER,)
    audience: Audience | None = None  # who will see the answer (Runs.config sets it from the request)

    def may_see(self, *, name: str, restricted: bool, granted: bool, owner: str = DEPLOYMENT_OWNER) -> bool:
        if self.owners is not None and owner not in self.owners:
            return False  # another team's source: its grants and names mean nothing here
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
