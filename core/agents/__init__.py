"""Agents: the base loop and the classic, agentic and research types."""

from core.agents.base import AgentConfig, AgentDeps, BaseAgent, Finished, Paused, RunContext
from core.agents.factory import AGENTS, UnknownAgentType, agent_class, create_agent

__all__ = [
    "AGENTS", "AgentConfig", "AgentDeps", "BaseAgent", "Finished", "Paused", "RunContext",
    "UnknownAgentType", "agent_class", "create_agent",
]
