"""Bolt's authorize for a multi-workspace app: each event's team (and Grid org) gets its bot token from TeamClients."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext

from adapters.streaming.transport import PermanentSendError

from .team_tokens import TeamKey
from .transport import SlackWeb

logger = logging.getLogger(__name__)


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


class TeamAuthorize(AsyncAuthorize):
    """An event, click or command of a team without a usable token is refused by Bolt (None: "not installed");
    the others carry their team's token and bot (auth.test's, once per token). Every team's event teaches the
    clients its Grid org, so a call by a bare team id (a stored row's) reaches the org-wide install."""

    def __init__(self, web: SlackWeb) -> None:
        super().__init__()
        self._web = web

    async def __call__(
        self, *, context: AsyncBoltContext, enterprise_id: str | None, team_id: str | None, user_id: str | None,
        actor_enterprise_id: str | None = None, actor_team_id: str | None = None, actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        team = TeamKey(team_id=team_id or "", enterprise_id=enterprise_id or None)
        await self._web.clients.learn(team)
        try:
            token = await self._web.clients.token(team)
            auth = await self._web.identity(team)
        except PermanentSendError as exc:
            logger.warning("a Slack request of team %s refused: %s", team.team_id or team.enterprise_id, exc)
            return None
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id, team=auth.get("team"), url=auth.get("url"),
            bot_user_id=str(auth.get("user_id") or ""), bot_id=str(auth.get("bot_id") or ""), bot_token=token,
        )
