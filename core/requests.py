"""What an adapter hands the engine: a question, where it was asked, and by whom."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.text_safety import capped_question, storable, storable_json


@dataclass(frozen=True, kw_only=True)
class ConversationKey:
    """Where a conversation lives on its platform; thread is '' for a rolling DM conversation."""

    platform: str
    workspace: str
    channel: str
    thread: str = ""
    # A direct message (said by the adapter): it sees only sources granted to its workspace's DMs. Not
    # part of the identity: a key rebuilt from stored columns names the same conversation.
    direct: bool = field(default=False, compare=False)

    @property
    def team(self) -> str:
        """The team it belongs to, as every team-scoped row names one: `slack:T1`, `discord:G1`."""
        return team_key(self.platform, self.workspace)


def team_key(platform: str, workspace: str) -> str:
    """A team's name in rows and checks: a workspace scope, as channel_config's (`slack:T1`)."""
    return f"{platform}:{workspace}"


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A file on the user's message, already downloaded by the adapter."""

    filename: str
    content_type: str
    data: bytes
    skipped: str = ""  # why it was not downloaded (e.g. "too large to read"); the engine then only names it

    def __post_init__(self) -> None:
        object.__setattr__(self, "filename", storable(self.filename))


@dataclass(frozen=True, kw_only=True)
class PriorMessage:
    """A message the platform holds: earlier thread replies as context, or what read_conversation reads."""

    author: str
    text: str
    is_bot: bool = False  # any bot, app or webhook
    is_self: bool = False  # this bot's own message: only these become assistant turns
    at: datetime | None = None  # when it was written, as the platform says (UTC)

    def __post_init__(self) -> None:
        # Thread context is stored as history, and read_conversation's messages as a tool result.
        object.__setattr__(self, "author", storable(self.author))
        object.__setattr__(self, "text", storable(self.text))


@dataclass(frozen=True, kw_only=True)
class Actor:
    """Someone acting on the bot: asking, or deciding an approval."""

    id: str
    name: str = ""
    roles: frozenset[str] = frozenset()
    is_admin: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", storable(self.name))  # a display name, stored as a message's author

    @property
    def display(self) -> str:
        return self.name or self.id


@dataclass(frozen=True, kw_only=True)
class ClientTool:
    """A tool the asker's client runs itself (an API request declares it): offered to the model like a built-in
    one, but a call to it pauses the run until the client sends its result (core/tools/client_tools.py)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def __post_init__(self) -> None:
        # Kept in a paused run's state (jsonb, which holds no NUL and no lone surrogate) to offer it again.
        object.__setattr__(self, "description", storable(self.description))
        object.__setattr__(self, "parameters", storable_json(self.parameters))


class Reach(enum.Enum):
    """What a tool may need of the place a question came from, beyond answering it there and then."""

    LATER_POSTS = "later_posts"  # a post in the conversation after the run ends (a reminder), by a process serving it
    READ_BACK = "read_back"  # the conversation's messages read back from its platform (read_conversation)


EVERY_REACH = frozenset(Reach)


@dataclass(frozen=True, kw_only=True)
class Request:
    """One question for the engine."""

    question: str
    conversation: ConversationKey
    user: Actor
    attachments: tuple[Attachment, ...] = ()
    thread_context: tuple[PriorMessage, ...] = ()
    agent_type: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    # Only these sources (e.g. an API key's), within what the channel may see; None: no narrowing.
    sources: tuple[str, ...] | None = None
    # Tools the client runs (API only); their calls pause the run like approvals, answered with results.
    client_tools: tuple[ClientTool, ...] = ()
    # Structured output for the answer (OpenAI's json_object / json_schema), used where the model supports it.
    response_format: dict[str, Any] | None = None
    # What the asking surface can do: a tool that needs more (ToolSpec.needs) is not offered to the model.
    reaches: frozenset[Reach] = EVERY_REACH

    def __post_init__(self) -> None:
        # The one door for a question's text, whichever platform built it: storable, and capped in size.
        object.__setattr__(self, "question", capped_question(self.question))
