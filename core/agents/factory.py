"""The agent-type table: a name in settings or a request picks the agent class."""

from __future__ import annotations

from core import wording
from core.agents.agentic import AgenticAgent
from core.agents.base import AgentConfig, AgentDeps, BaseAgent, RunContext
from core.agents.classic import ClassicAgent
from core.agents.research import ResearchAgent

AGENTS: dict[str, type[BaseAgent]] = {
    "classic": ClassicAgent,
    "react": ClassicAgent,
    "agentic": AgenticAgent,
    "research": ResearchAgent,
}


class UnknownAgentType(ValueError):
    """The configured or requested agent type is not in the table."""


def agent_class(agent_type: str) -> type[BaseAgent]:
    try:
        return AGENTS[agent_type]
    except KeyError:
        raise UnknownAgentType(wording.unknown_agent_type(agent_type, sorted(AGENTS))) from None


def create_agent(agent_type: str, *, deps: AgentDeps, config: AgentConfig, context: RunContext) -> BaseAgent:
    return agent_class(agent_type)(deps=deps, config=config, context=context)
