"""ResearchAgent: plan sub-questions with structured output, search each, then answer from all sources."""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Sequence

from core.agents.base import INTERNAL_SEARCH, AgentOutput, BaseAgent
from core.agents.token_budget import HistoryTurn, build_messages
from core.events import ToolCallFinished, ToolCallStarted
from core.llm import Completion

log = logging.getLogger(__name__)

MAX_SUB_QUESTIONS = 4
PLANNER_PROMPT = (
    "You plan research for a question about a team's documents. Break the user's question into at most "
    f"{MAX_SUB_QUESTIONS} short, self-contained search queries that together cover it. "
    'Answer only with JSON: {"sub_questions": ["...", "..."]}.'
)
PLAN_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "research_plan",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"sub_questions": {"type": "array", "items": {"type": "string"}}},
            "required": ["sub_questions"],
            "additionalProperties": False,
        },
    },
}


class ResearchAgent(BaseAgent):
    agent_type = "research"
    search_exposure = None

    async def _gen_inner(
        self, query: str, *, history: Sequence[HistoryTurn], extra_parts: Sequence[dict[str, Any]]
    ) -> AsyncIterator[AgentOutput]:
        sub_questions = await self.plan(query)
        # The sub-questions share one document budget, so the prompt is no bigger than a classic run's
        # and still leaves the question and the reply room in a small context.
        doc_budget = self.document_budget // len(sub_questions)
        for index, sub_question in enumerate(sub_questions, start=1):
            call_id = f"research-{index}"
            arguments = {"query": sub_question}
            yield ToolCallStarted(call_id=call_id, tool=INTERNAL_SEARCH, arguments=arguments)
            found = await self.prefetch(sub_question, exposure=None, token_budget=doc_budget)
            self.sources.add(found)
            yield ToolCallFinished(
                call_id=call_id, tool=INTERNAL_SEARCH, status="ok", output_preview=f"{len(found)} passages"
            )
        documents = self.sources.items
        self.sources = type(self.sources)()
        built = self.build(system_prompt=self.system_prompt(documents), query=query, history=history, extra_parts=extra_parts)
        state = self.new_state(built, offered_tools=self.offered_tools(internal_search=True))
        async for event in self.run_loop(state):
            yield event

    async def plan(self, query: str) -> list[str]:
        """Sub-questions from the planner model; the question itself when the plan is unusable."""
        # A question with long attachments is middle-truncated to the planner model's context, as for the answer.
        messages = build_messages(
            system_prompt=PLANNER_PROMPT,
            query=query,
            history=(),
            counter=self.deps.counter,
            context_limit=self.deps.planner_model.context_limit,
            max_tokens=self.config.max_tokens,
        ).messages
        completion: Completion | None = None
        async for piece in self.llm_gen(messages, response_format=PLAN_SCHEMA, model=self.deps.planner_model):
            if isinstance(piece, Completion):
                completion = piece
        text = completion.text if completion else ""
        try:
            plan = json.loads(_strip_fence(text))
            questions = [str(q).strip() for q in plan["sub_questions"] if str(q).strip()]
        except (ValueError, KeyError, TypeError):
            log.info("planner answered without a usable plan; searching the question itself")
            questions = []
        return questions[:MAX_SUB_QUESTIONS] or [query]


def _strip_fence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text.split("\n", 1)[1] if "\n" in text else text
    return text
