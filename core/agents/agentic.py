"""AgenticAgent: no prefetch; the model searches the documents itself through internal_search."""

from __future__ import annotations

from typing import Any, AsyncIterator, Sequence

from core.agents.base import AgentOutput, BaseAgent
from core.agents.token_budget import HistoryTurn

SEARCH_HINT = (
    "\n\nUse the internal_search tool to look up the team's documents before answering questions about them, "
    "and cite what you use as [n]."
)


class AgenticAgent(BaseAgent):
    agent_type = "agentic"
    search_exposure = None  # every source that is not off

    async def _gen_inner(
        self, query: str, *, history: Sequence[HistoryTurn], extra_parts: Sequence[dict[str, Any]]
    ) -> AsyncIterator[AgentOutput]:
        tools = self.offered_tools(internal_search=True)
        prompt = self.system_prompt() + (SEARCH_HINT if "internal_search" in tools else "")
        built = self.build(system_prompt=prompt, query=query, history=history, extra_parts=extra_parts)
        async for event in self.run_loop(self.new_state(built, offered_tools=tools)):
            yield event
