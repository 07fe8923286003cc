"""Bolt's authorize for a multi-workspace app: each event's team (and Grid org) gets its bot token from TeamClients."""

from __future__ import annotations

import logging

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext

from adapters.streaming.transport import PermanentSendError

from .team_tokens import TeamKey
from .transport import SlackWeb

logger = logging.getLogger(__name__)


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
