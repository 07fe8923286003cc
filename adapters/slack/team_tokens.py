"""Whose token a Slack call uses: a workspace (or Enterprise Grid org) named by a TeamKey, the one a request names, and the tokens' source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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


def team_of(body: dict[str, Any]) -> TeamKey:
    """The workspace a request comes from and its Grid org. An org-wide install's events name no team in their
    authorizations (Bolt's team_id is None then): the workspace is the body's own team."""
    team = body.get("team")
    user = body.get("user")
    team_id = (body.get("team_id") or (team.get("id") if isinstance(team, dict) else team)
               or (user.get("team_id") if isinstance(user, dict) else None) or "")
    enterprise = body.get("enterprise")
    authorizations = body.get("authorizations")
    first = authorizations[0] if isinstance(authorizations, list) and authorizations and isinstance(authorizations[0], dict) else {}
    enterprise_id = (body.get("enterprise_id") or (enterprise.get("id") if isinstance(enterprise, dict) else enterprise)
                     or first.get("enterprise_id") or None)
    return TeamKey(team_id=str(team_id), enterprise_id=str(enterprise_id) if enterprise_id else None)
