"""internal_search: the tool through which a model searches the team's documents itself."""

from __future__ import annotations

from typing import Any

from core.sources import render_numbered
from core.tools.context import ToolContext
from core.tools.registry import ToolError, ToolSpec

DEFAULT_RESULTS = 6


async def _search(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    retriever, collector = ctx.retriever, ctx.sources
    if retriever is None or collector is None:
        raise ToolError("document search is not available in this conversation")
    limit = ctx.retrieval_chunks or DEFAULT_RESULTS
    items = await retriever.search(arguments["query"], limit=limit, exposure=ctx.search_exposure, scope=ctx.source_scope)
    if not items:
        return "No matching passages were found. Try other words, or answer without the documents."
    numbers = collector.add(items)
    return "Passages (cite as [n]):\n\n" + render_numbered(items, numbers)


INTERNAL_SEARCH = ToolSpec(
    name="internal_search",
    description=(
        "Search the team's documents and knowledge base. Returns numbered passages; cite them as [n] "
        "in the answer. Use short, specific queries."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for.", "minLength": 1}},
        "required": ["query"],
        "additionalProperties": False,
    },
    run=_search,
    timeout_s=30.0,
)
