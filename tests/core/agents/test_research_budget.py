"""The research agent's requests fit the model's context, however many sub-questions or how long the question."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from core.agents.token_budget import plan_budget
from core.events import Done, SourceItem
from core.store.db import Database
from core.tokens import get_token_counter
from tests.core.engine.support import events_of, request
from tests.emulators.openai_server import JSON, OpenAIEmulator, Text
from tests.support.engine import make_engine

# "test-model" is unknown to the model table, so it gets the safe default context.
CONTEXT_LIMIT = 8192
TOPICS = ("alpha", "bravo", "charlie", "delta")
DOC_WORDS = 110


@dataclass(kw_only=True)
class TopicRetriever:
    """Six long passages per topic; honours `limit` and `token_budget` as the real retriever does."""

    budgets: list[int | None] = field(default_factory=list)

    async def search(
        self,
        query: str,
        *,
        limit: int,
        token_budget: int | None = None,
        exposure: str | None = None,
        sources: Sequence[str] | None = None,
        scope: object = None,
    ) -> list[SourceItem]:
        self.budgets.append(token_budget)
        counter = get_token_counter("test-model")
        topic = next((t for t in TOPICS if t in query), TOPICS[0])
        found: list[SourceItem] = []
        used = 0
        for number in range(6):
            text = " ".join(f"{topic}{number}word{i}" for i in range(DOC_WORDS))
            tokens = counter.count(text)
            if len(found) >= limit or (token_budget is not None and used + tokens > token_budget):
                break
            found.append(SourceItem(title=f"{topic} {number}", uri="", text=text, source="docs", score=1.0))
            used += tokens
        return found

    async def has_sources(self, exposure: str, *, scope: object = None) -> bool:
        return True


def request_tokens(body: dict[str, Any]) -> int:
    counter = get_token_counter("test-model")
    return sum(counter.count_message(message) for message in body["messages"])


async def test_documents_from_every_sub_question_leave_room_for_the_question_and_the_reply(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    retriever = TopicRetriever()
    engine = make_engine(db, openai_emulator.base_url, retriever=retriever, agent_type="research")
    assert engine.model.context_limit == CONTEXT_LIMIT
    openai_emulator.script(JSON({"sub_questions": [f"{topic} facts" for topic in TOPICS]}), Text("Answer."))
    events = await events_of(engine, request("what do alpha bravo charlie delta say?", channel="C-research-budget"))
    assert isinstance(events[-1], Done), events[-1]
    answer = openai_emulator.chat_requests[-1]
    assert answer["messages"][-1] == {"role": "user", "content": "what do alpha bravo charlie delta say?"}
    budget = plan_budget(context_limit=CONTEXT_LIMIT, system_tokens=0, max_tokens=None)
    assert request_tokens(answer) + budget.reply_reserve <= CONTEXT_LIMIT - budget.safety_tokens
    # All sub-questions together stay within the configured document budget.
    assert sum(b or 0 for b in retriever.budgets) <= engine.settings.retrieval_doc_tokens


async def test_the_planner_gets_a_long_question_truncated_to_its_context(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url, retriever=TopicRetriever(), agent_type="research")
    long_question = "alpha " + " ".join(f"line{i} of a pasted log" for i in range(4000))
    assert get_token_counter("test-model").count(long_question) > CONTEXT_LIMIT
    openai_emulator.script(JSON({"sub_questions": ["alpha facts"]}), Text("Answer."))
    events = await events_of(engine, request(long_question, channel="C-research-long"))
    assert isinstance(events[-1], Done), events[-1]
    planner = openai_emulator.chat_requests[0]
    assert request_tokens(planner) <= CONTEXT_LIMIT - plan_budget(
        context_limit=CONTEXT_LIMIT, system_tokens=0, max_tokens=None
    ).reply_reserve
    for body in openai_emulator.chat_requests:
        assert request_tokens(body) <= CONTEXT_LIMIT
