"""The steps that open a new run: system prompt with documents, tools offered, messages, first loop state."""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from core.agents.run_values import AgentConfig, AgentDeps, RunContext
from core.agents.state import RunState
from core.agents.token_budget import BuiltMessages, HistoryTurn, build_messages
from core.events import SourceItem
from core.sources import SourceCollector, render_numbered
from core.tools.client_tools import client_tool_json
from core.tools.internal_search import INTERNAL_SEARCH as INTERNAL_SEARCH_TOOL

INTERNAL_SEARCH = INTERNAL_SEARCH_TOOL.name
# Prefetched documents leave the question, history and reply room even in a small context.
MAX_DOCUMENT_FRACTION = 0.4


class NewRunSteps:
    """Building blocks an agent type's first steps are made of (BaseAgent has them)."""

    agent_type: ClassVar[str]
    deps: AgentDeps
    config: AgentConfig
    context: RunContext
    sources: SourceCollector

    def system_prompt(self, documents: Sequence[SourceItem] = ()) -> str:
        """The configured prompt, plus numbered documents when there are any."""
        prompt = self.config.system_prompt
        if documents:
            # Prefetched text is already within the document token budget: rendered whole.
            rendered = render_numbered(documents, self.sources.add(documents), max_chars=None)
            prompt += (
                "\n\nDocuments from the team's knowledge base (cite them as [n] where you use them):\n\n" + rendered
            )
        return prompt

    def offered_tools(self, *, internal_search: bool) -> list[str]:
        tools = [name for name in self.config.base_tools if name != INTERNAL_SEARCH]
        if internal_search and self.deps.retriever is not None and INTERNAL_SEARCH in self.deps.executor.registry:
            tools.append(INTERNAL_SEARCH)
        return tools + [tool.name for tool in self.config.client_tools]

    def build(self, *, system_prompt: str, query: str, history: Sequence[HistoryTurn], extra_parts: Sequence[dict[str, Any]]) -> BuiltMessages:
        return build_messages(
            system_prompt=system_prompt,
            query=query,
            history=history,
            counter=self.deps.counter,
            context_limit=self.deps.model.context_limit,
            max_tokens=self.config.max_tokens,
            extra_parts=extra_parts,
        )

    @property
    def document_budget(self) -> int:
        """Tokens of documents a prompt may carry: the setting, but never most of a small model's context."""
        return min(self.config.retrieval_doc_tokens, int(self.deps.model.context_limit * MAX_DOCUMENT_FRACTION))

    async def prefetch(self, query: str, *, exposure: str | None, token_budget: int | None = None) -> list[SourceItem]:
        """Passages for the prompt, within `token_budget` (default: the configured document budget)."""
        if self.deps.retriever is None or self.config.retrieval_chunks <= 0:
            return []
        return await self.deps.retriever.search(
            query,
            limit=self.config.retrieval_chunks,
            token_budget=self.document_budget if token_budget is None else token_budget,
            exposure=exposure,  # type: ignore[arg-type]
            scope=self.config.source_scope,
        )

    def new_state(self, built: BuiltMessages, *, offered_tools: list[str]) -> RunState:
        return RunState(
            agent_type=self.agent_type,
            model=self.deps.model.name,
            turn_id=self.context.turn_id,
            conversation_id=self.context.conversation_id,
            conversation=self.context.conversation,
            user_id=self.context.user.id,
            user_name=self.context.user.name,
            messages=built.messages,
            turn_start=len(built.messages) - 1,
            pending=[],
            offered_tools=offered_tools,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            client_tools=[client_tool_json(tool) for tool in self.config.client_tools],
            response_format=self.config.response_format,
            request_sources=list(self.config.request_sources) if self.config.request_sources is not None else None,
            question=self.context.question,
        )
