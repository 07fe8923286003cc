"""The door for Slack's OAuth calls: the install flow's (oauth.v2.access, auth.test, run by Bolt's AsyncOAuthFlow), a rotating bot token's refresh, auth.revoke, and auth.test of a token being imported."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_sdk.web.async_client import AsyncWebClient


class SlackOAuthCalls:
    """The app's own calls with its client id and secret, or with a token it holds (never a team's Web API work)."""

    def __init__(self, client: AsyncWebClient, *, client_id: str = "", client_secret: str = "") -> None:
        self._client = client
        self._client_id = client_id
        self._client_secret = client_secret

    async def refresh(self, refresh_token: str) -> dict[str, Any]:
        """oauth.v2.access with grant_type=refresh_token: a new bot token and a new refresh token (Slack revokes
        the one used). A SlackApiError says why not."""
        response = await self._client.oauth_v2_access(
            client_id=self._client_id, client_secret=self._client_secret, grant_type="refresh_token",
            refresh_token=refresh_token,
        )
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def revoke(self, token: str) -> None:
        await self._client.auth_revoke(token=token)

    async def whoami(self, token: str) -> dict[str, Any]:
        """auth.test with `token`: its team, enterprise, bot and user ids, and its scopes as Slack lists them in the
        X-OAuth-Scopes header (a SlackApiError when refused)."""
        response = await self._client.auth_test(token=token)
        answer = dict(response.data) if isinstance(response.data, dict) else {}
        headers = {str(name).lower(): value for name, value in (response.headers or {}).items()}
        scopes = headers.get("x-oauth-scopes")
        answer["scopes"] = ",".join(scopes) if isinstance(scopes, list) else str(scopes or "")
        return answer


async def serve_install(flow: AsyncOAuthFlow, request: web.Request) -> web.Response:
    """GET /slack/install: Bolt's install page (or its redirect), with the state cookie set."""
    response = await flow.handle_installation(await to_bolt_request(request))
    return await to_aiohttp_response(response)


async def serve_redirect(flow: AsyncOAuthFlow, request: web.Request) -> web.Response:
    """GET /slack/oauth_redirect: Bolt checks the state and its cookie, exchanges the code, stores the install."""
    response = await flow.handle_callback(await to_bolt_request(request))
    return await to_aiohttp_response(response)
