"""An in-memory retriever implementing core.retrieval.retriever.Retriever, for engine tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from core.events import SourceItem
from core.retrieval.retriever import SourceScope


@dataclass(kw_only=True)
class MemoryDoc:
    title: str
    text: str
    source: str = "docs"
    exposure: str = "prefetch"
    uri: str = ""


@dataclass(kw_only=True)
class InMemoryRetriever:
    """Ranks documents by shared words with the query; records every search."""

    docs: list[MemoryDoc] = field(default_factory=list)
    searches: list[tuple[str, str | None]] = field(default_factory=list)
    scopes: list[SourceScope | None] = field(default_factory=list)

    async def search(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: str | None = None,
        sources: Sequence[str] | None = None,
        scope: SourceScope | None = None,
    ) -> list[SourceItem]:
        self.searches.append((query, exposure))
        self.scopes.append(scope)
        words = set(query.lower().split())
        scored = []
        for doc in self.docs:
            if exposure is not None and doc.exposure != exposure:
                continue
            if sources and doc.source not in sources:
                continue
            if scope is not None and scope.only is not None and doc.source not in scope.only:
                continue
            score = len(words & set(doc.text.lower().split()))
            if score:
                scored.append((score, doc))
        scored.sort(key=lambda pair: -pair[0])
        found, used = [], 0
        for score, doc in scored[:limit]:
            cost = len(doc.text) // 4  # a rough token count is enough for a test retriever
            if token_budget is not None and used + cost > token_budget:
                break
            used += cost
            found.append(SourceItem(title=doc.title, uri=doc.uri, text=doc.text, source=doc.source, score=float(score)))
        return found

    async def has_sources(self, exposure: str, *, scope: SourceScope | None = None) -> bool:
        return any(doc.exposure == exposure for doc in self.docs)
