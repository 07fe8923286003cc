"""Agents: the base loop and the classic, agentic and research types."""

from core.agents.base import AgentConfig, AgentDeps, AgentOutput, BaseAgent, Finished, Paused, Progress, RunContext, RunEnd
from core.agents.factory import AGENTS, UnknownAgentType, agent_class, create_agent

__all__ = [
    "AGENTS", "AgentConfig", "AgentDeps", "AgentOutput", "BaseAgent", "Finished", "Paused", "Progress", "RunContext", "RunEnd",
    "UnknownAgentType", "agent_class", "create_agent",
]
