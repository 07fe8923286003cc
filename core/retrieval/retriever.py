"""The retriever interface the agents search through; core/retrieval provides the Postgres one."""

from __future__ import annotations

from typing import Literal, Protocol, Sequence

from core.events import SourceItem

Exposure = Literal["prefetch", "agentic_tool"]


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
    ) -> list[SourceItem]:
        """Best passages first; at most `limit`, and within `token_budget` tokens of text when given."""
        ...

    async def has_sources(self, exposure: Exposure) -> bool:
        """Whether any source is exposed this way (the classic agent offers internal_search only then)."""
        ...
