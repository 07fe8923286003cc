"""Small interfaces the composition root hands to platform adapters; core.store implements them."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.requests import ConversationKey


@dataclass(frozen=True, kw_only=True)
class LiveMessage:
    """An answer message still being streamed: if its process dies, the next start repairs it."""

    platform: str
    workspace: str
    channel: str
    message_id: str
    thread: str = ""


class LiveAnswerLog(Protocol):
    """Records answer messages while they stream (core.store.live_messages.LiveMessages)."""

    async def add(self, message: LiveMessage) -> None: ...

    async def remove(self, *, platform: str, channel: str, message_id: str) -> None: ...

    async def take_all(self, platform: str) -> list[LiveMessage]:
        """Claim the platform's records left by processes that died (each record to one caller); crash repair
        drops one (`remove`) only once repaired or refused for good."""
        ...

    async def release(self, message: LiveMessage) -> None:
        """Hand a claimed record back for the next round (its repair failed for now)."""
        ...


@dataclass(frozen=True, kw_only=True)
class FinalPart:
    """One message of a final answer: its text, and the message showing it once there is one."""

    text: str
    message_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PendingFinal:
    """A final answer text not yet delivered; `answer_id` also marks its parts on the platform, so a retry
    finds a part already posted instead of posting it twice."""

    answer_id: str
    platform: str
    workspace: str
    channel: str
    thread: str
    parts: tuple[FinalPart, ...]


class FinalOutbox(Protocol):
    """Keeps final texts safe until delivered, by this process or another (core.store.pending_finals)."""

    async def keep(self, final: PendingFinal, *, attempted: Mapping[int, float] | None = None) -> None:
        """Store (or update) a final this process is delivering, with the posts of parts already sent unseen
        (`attempted`: part index → epoch seconds) in the same write."""
        ...

    async def delivered(self, answer_id: str) -> None: ...

    async def release(self, answer_id: str, *, backoff: bool = False) -> None:
        """Hand a final over to whichever process delivers next (this one is stopping, or was told "later";
        `backoff`: not before a delay that grows with its attempts, capped at 5 minutes)."""
        ...

    async def take(self, platform: str, *, limit: int | None = None) -> list[PendingFinal]:
        """Claim the platform's finals nobody is delivering: released, or their process died (each to one caller),
        oldest first, at most `limit` of them (None: all)."""
        ...

    async def attempting(self, answer_id: str, index: int, *, at: float | None = None) -> bool:
        """Records a post of part `index` about to be attempted; False when this process no longer owns the final."""
        ...

    async def attempts(self, answer_id: str) -> dict[int, float]:
        """When a post of each part was attempted (epoch seconds), for parts with no message known."""
        ...

    async def expire(self, platform: str, *, max_age_s: float) -> list[PendingFinal]:
        """Drop and return the platform's finals kept longer than `max_age_s` (OUTBOX_MAX_AGE_S)."""
        ...


class AppState(Protocol):
    """Small facts remembered across restarts, by key (core.store.app_state)."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str) -> None: ...

    async def forget(self, prefix: str, *, older_than_s: float) -> int: ...


class EventDedup(Protocol):
    """One atomic "first time?" per platform event, across processes (core.store.processed_events)."""

    async def first_time(self, platform: str, event_id: str) -> bool: ...


class KnownConversations(Protocol):
    """Whether the bot has a conversation in a thread, i.e. answers follow-ups there (core.store.conversations)."""

    async def exists(self, key: ConversationKey) -> bool: ...


class FeedbackVotes(Protocol):
    """👍/👎 on final answers and a 👎's reason, one vote per person per turn (core.store.feedback); False: no
    such turn (a run whose answer was never stored), or none of `workspace`'s — the team the click came from
    (a Slack team, a Discord guild; None where the platform names none, a Discord DM): a team never votes on
    another's answer."""

    async def vote(self, turn_id: str, *, user_id: str, user_name: str, platform: str, up: bool,
                   workspace: str | None = None) -> bool: ...

    async def comment(self, turn_id: str, *, user_id: str, user_name: str, platform: str, text: str,
                      workspace: str | None = None) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class InstallRecord:
    """One stored install of the app (a workspace's or a Grid org's bot, or who installed it): what may be shown
    in `fields`, the tokens in `sealed`, encrypted by the adapter (the store never sees a token in the clear)."""

    enterprise_id: str = ""  # '' outside an Enterprise Grid org
    team_id: str = ""  # '' for an org-wide install, which answers for every workspace of its org
    user_id: str = ""  # the installer ('' for a bot)
    is_enterprise_install: bool = False
    fields: Mapping[str, Any] = field(default_factory=dict)
    sealed: bytes = b""
    token_expires_at: float | None = None  # epoch seconds; None: the token does not expire
    installed_at: float | None = None  # epoch seconds, set by the store
    refresh_error: str | None = None  # why the last refresh of the bot token failed, until one succeeds


class BotRefresh(Protocol):
    """A bot's row held under its install's advisory lock: read it again, then replace its tokens."""

    async def current(self) -> InstallRecord | None: ...

    async def replace(self, record: InstallRecord) -> None: ...

    async def failed(self, reason: str) -> None: ...


class Installs(Protocol):
    """The app's installs and the OAuth flow's states (core.store.installations)."""

    async def save(self, *, bot: InstallRecord | None, installer: InstallRecord | None) -> None: ...

    async def bot(self, *, enterprise_id: str, team_id: str) -> InstallRecord | None:
        """The team's own bot, else its org's org-wide one."""
        ...

    async def installer(self, *, enterprise_id: str, team_id: str, user_id: str | None) -> InstallRecord | None:
        """That person's install (None: the latest of the team)."""
        ...

    async def delete_bot(self, *, enterprise_id: str, team_id: str) -> int: ...

    async def delete_installers(self, *, enterprise_id: str, team_id: str, user_id: str | None) -> int: ...

    async def bots(self) -> list[InstallRecord]: ...

    async def installers(self) -> list[InstallRecord]: ...

    def refreshing(self, *, enterprise_id: str, team_id: str) -> AbstractAsyncContextManager[BotRefresh]:
        """The bot's row under a per-install advisory lock held until the block ends (one refresh at a time,
        across processes)."""
        ...

    async def issue_state(self, state: str, *, expires_in_s: float) -> None: ...

    async def consume_state(self, state: str) -> bool:
        """True once for a state issued and not expired; False ever after."""
        ...


class ForgetTeam(Protocol):
    """Drops a team's pending work (kept finals, live records, reminders, approvals, syncs) and, with `purge`, every
    row of it (core.store.team_data.forget_team over the process's database): a Slack uninstall, a Discord guild
    removing the bot."""

    async def __call__(self, platform: str, workspace: str, *, purge: bool) -> object: ...
