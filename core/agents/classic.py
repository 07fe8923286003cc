"""ClassicAgent: prefetch documents into the prompt; internal_search only for agentic_tool sources."""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence

from core.agents.base import AgentOutput, BaseAgent
from core.agents.token_budget import HistoryTurn


class ClassicAgent(BaseAgent):
    agent_type = "classic"
    search_exposure = "agentic_tool"

    async def _gen_inner(
        self, query: str, *, history: Sequence[HistoryTurn], extra_parts: Sequence[dict[str, Any]]
    ) -> AsyncIterator[AgentOutput]:
        documents = await self.prefetch(query, exposure="prefetch")
        retriever = self.deps.retriever
        mixed = retriever is not None and await retriever.has_sources("agentic_tool", scope=self.config.source_scope)
        built = self.build(system_prompt=self.system_prompt(documents), query=query, history=history, extra_parts=extra_parts)
        state = self.new_state(built, offered_tools=self.offered_tools(internal_search=mixed))
        async for event in self.run_loop(state):
            yield event
