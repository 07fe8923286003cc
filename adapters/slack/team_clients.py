"""One Slack Web API client per team, made with the team's current token, over the adapter's one aiohttp session."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import aiohttp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from adapters.streaming import TransientSendError
from adapters.streaming.transport import PermanentSendError
from core import metrics
from core.ports import AppState

from .team_tokens import NotInstalled, OneTeamToken, TeamKey, TeamTokens

logger = logging.getLogger(__name__)

# A call names its team by a TeamKey (an event's, with its Grid org) or by the team id a stored row keeps.
SlackTeam = TeamKey | str
DEFAULT_TIMEOUT_S = 30  # slack_sdk's own
# A Grid workspace's org, as its events named it, kept across restarts (AppState) under this prefix + team id.
ORG_OF_PREFIX = "slack.org_of:"


class RateLimitCounter(AsyncRetryHandler):
    """Counts every 429 a Slack Web API call receives, by method; never asks for a retry itself
    (the callers' budgets decide when to try again)."""

    async def can_retry_async(
        self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and response.status_code == 429:
            metrics.record_rate_limited(platform="slack", method=request.url.rstrip("/").rpartition("/")[2])
        return False


class SlackNotInstalled(PermanentSendError):
    """The team has no usable bot token (never installed, uninstalled, tokens revoked): every call to it fails at
    once, before anything is sent. Permanent and team-wide: a delivery gives it up as it gives up a channel that is
    gone, never waiting for it as for a 429 or a 5xx."""

    def __init__(self, team: TeamKey) -> None:
        super().__init__(f"relaybot is not installed in Slack team {team.team_id}: nothing sent", code="not_installed",
                         team_wide=True)
        self.team = team


class TeamClients:
    """Builds and keeps one AsyncWebClient per team; a team's new token (after a rotation or a reinstall) gives
    it a new client on its next call. Nothing outside the transport calls these clients (tests/test_architecture.py).

    The Grid org of a workspace is learnt from the events that name it (`learn`), and kept in `state` when given: a
    stored row keeps only its team id, and its calls still reach the org's install, after a restart too."""

    def __init__(
        self, tokens: TeamTokens, *, base_url: str, retry_handlers: Sequence[AsyncRetryHandler] = (),
        timeout_s: int = DEFAULT_TIMEOUT_S, state: AppState | None = None,
    ) -> None:
        self.tokens = tokens
        self._base_url = base_url
        self._retry_handlers = list(retry_handlers)
        self._timeout_s = timeout_s
        self._state = state
        self._clients: dict[TeamKey, AsyncWebClient] = {}
        self._orgs: dict[str, str | None] = {}  # team id → its Grid org (None: none), as events or `state` said
        self._kept: dict[str, str] = {}  # team id → the org this process wrote to `state` for it
        self._refused: set[TeamKey] = set()  # teams whose last call found no token (logged once until it comes back)
        self.session: aiohttp.ClientSession | None = None  # the adapter's, set when it starts

    @classmethod
    def of(cls, client: AsyncWebClient) -> TeamClients:
        """Single-workspace clients from one client: its token answers for every team, over its session."""
        made = cls(OneTeamToken(client.token or ""), base_url=client.base_url, retry_handlers=client.retry_handlers,
                   timeout_s=client.timeout)
        made.session = client.session
        return made

    async def key(self, team: SlackTeam) -> TeamKey:
        """The TeamKey a call goes to: as given, or a team id with the org its events named (read from `state` once
        per team and process)."""
        if isinstance(team, TeamKey):
            return team
        if team not in self._orgs:
            stored = await self._state.get(ORG_OF_PREFIX + team) if self._state is not None and team else None
            self._orgs.setdefault(team, stored)  # an event may have named the org while the state was read
        return TeamKey(team_id=team, enterprise_id=self._orgs[team])

    def known_org(self, team_id: str) -> str | None:
        """The Grid org an event (or `state`) named for the team so far, from memory; None: none known."""
        return self._orgs.get(team_id)

    def note(self, team: TeamKey) -> None:
        """An event named the team's Grid org: this process's calls by its bare team id use the org's install now."""
        if team.enterprise_id and team.team_id:
            self._orgs[team.team_id] = team.enterprise_id

    async def learn(self, team: TeamKey) -> None:
        """As `note`, and kept in `state` so that calls after a restart do too (written once per team and org)."""
        self.note(team)
        if team.enterprise_id and team.team_id and self._state is not None \
                and self._kept.get(team.team_id) != team.enterprise_id:
            await self._state.put(ORG_OF_PREFIX + team.team_id, team.enterprise_id)
            self._kept[team.team_id] = team.enterprise_id

    async def token(self, team: SlackTeam) -> str:
        """The team's current bot token; SlackNotInstalled (logged once until the team has one again) without one,
        TransientSendError when the tokens cannot be read now (the database away): a call waits, as for a 5xx."""
        try:
            key = await self.key(team)
        except Exception as exc:
            raise TransientSendError(f"the Grid org of Slack team {team} could not be read now: {exc!r}") from exc
        try:
            token = await self.tokens.bot_token(key)
        except NotInstalled:
            if key not in self._refused:
                self._refused.add(key)
                logger.warning("Slack team %s%s has no bot token (not installed, uninstalled or revoked): its calls "
                               "fail at once, nothing is sent", key.team_id,
                               f" (org {key.enterprise_id})" if key.enterprise_id else "")
            self._clients.pop(key, None)
            raise SlackNotInstalled(key) from None
        except Exception as exc:
            raise TransientSendError(f"the bot token of Slack team {team} could not be read now: {exc!r}") from exc
        self._refused.discard(key)
        return token

    async def client(self, team: SlackTeam) -> AsyncWebClient:
        """The team's client, with its current token (a new client when the token changed)."""
        key = await self.key(team)
        token = await self.token(key)
        client = self._clients.get(key)
        if client is None or client.token != token or client.session is not self.session:
            # No retry handler re-sends: a post whose connection dropped may have been made (SlackWeb looks it up).
            client = AsyncWebClient(token=token, base_url=self._base_url, session=self.session,
                                    timeout=self._timeout_s, retry_handlers=list(self._retry_handlers))
            self._clients[key] = client
        return client
