"""What the composition root gives a platform adapter, and what it expects back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.learning.ports import ChannelLearning
from core.notifier import Notifier
from core.ports import (AppState, EventDedup, FeedbackVotes, FinalOutbox, ForgetTeam, Installs, KnownConversations,
                        LiveAnswerLog)
from core.tools.context import ConversationReader


@dataclass(frozen=True, kw_only=True)
class AdapterPorts:
    """The storage an adapter needs, as small interfaces; bot/runtime.py hands in the Postgres ones."""

    live: LiveAnswerLog
    dedup: EventDedup
    conversations: KnownConversations
    outbox: FinalOutbox
    state: AppState
    feedback: FeedbackVotes  # 👍/👎 clicks and 👎 reasons
    installs: Installs  # the app's stored installs and OAuth states (a multi-workspace Slack app's)
    forget_team: ForgetTeam  # what a team's leaving drops: an uninstall, a guild removing the bot
    # Every live change about a channel (core/learning): a platform that LearnsChannels sends it here; dropped in
    # memory for a channel nobody chose.
    learning: ChannelLearning


class PlatformAdapter(Protocol):
    """A platform connection: started after the engine, stopped before the database closes."""

    platform: str
    notifier: Notifier
    reader: ConversationReader  # what the read_conversation tool reads this platform's conversations through

    async def start(self) -> None:
        """Connect, repair answers a crash left unfinished, and begin taking events."""
        ...

    async def maintain(self) -> None:
        """Periodic: repair answers dead processes left streaming; deliver final texts nobody is delivering."""
        ...

    async def stop_accepting(self) -> None:
        """Stop taking new questions and clicks (the first step of a graceful shutdown)."""
        ...

    @property
    def queued_answers(self) -> int:
        """Questions taken and waiting for their turn (ANSWERS_IN_FLIGHT_MAX), not yet answering."""
        ...

    async def interrupt_inflight(self) -> None:
        """End answers still streaming after the grace period with what they showed plus a note."""
        ...

    async def close(self) -> None:
        """Disconnect from the platform."""
        ...

    async def readiness(self) -> str | None:
        """None while connected to the platform (what /readyz asks); otherwise why not, in a few words."""
        ...
