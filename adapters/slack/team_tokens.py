"""Whose token a Slack call uses: a workspace (or Enterprise Grid org) named by a TeamKey, and the tokens' source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class TeamKey:
    """The workspace an event, a click or a stored row belongs to; `enterprise_id` is set inside a Grid org, where an
    org-wide install answers for every workspace of the org."""

    team_id: str
    enterprise_id: str | None = None


class NotInstalled(LookupError):
    """No usable bot token for the team: never installed, uninstalled, or its tokens revoked."""

    def __init__(self, team: TeamKey) -> None:
        super().__init__(f"relaybot is not installed in Slack team {team.team_id}")
        self.team = team


class TeamTokens(Protocol):
    """Where the bot token of a team comes from: one SLACK_BOT_TOKEN, or the installations stored by the OAuth flow."""

    async def bot_token(self, team: TeamKey) -> str:
        """The team's current bot token (refreshed first when it rotates and is about to expire), or NotInstalled."""
        ...


@dataclass(frozen=True)
class OneTeamToken:
    """Single-workspace mode: SLACK_BOT_TOKEN answers for every team this deployment is allowed to serve."""

    token: str

    async def bot_token(self, team: TeamKey) -> str:
        return self.token
