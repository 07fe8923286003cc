"""Slack's OAuth v2 for the emulator: the consent page, oauth.v2.access (codes, token rotation, org-wide installs), auth.revoke, and the uninstall events."""

from __future__ import annotations

import base64
import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from . import events
from .api import error
from .state import JsonDict
from .store import SlackStore

DEFAULT_CLIENT_ID = "1111.2222"
DEFAULT_CLIENT_SECRET = "emulator-client-secret"
# Methods answered with the app's client credentials (or the token being revoked), before a token is looked up.
OAUTH_METHODS = frozenset({"oauth.v2.access", "auth.revoke"})


@dataclass(frozen=True, kw_only=True)
class Consent:
    """Who approves the next install on the consent page: a workspace (or, org-wide, a Grid org) and a person."""

    team_id: str | None
    user_id: str
    enterprise_id: str | None = None
    org_wide: bool = False
    deny: bool = False


@dataclass(kw_only=True)
class Issued:
    """A bot token the exchange issued, and the refresh token that replaces it (rotation)."""

    access_token: str
    team_id: str | None
    enterprise_id: str | None
    refresh_token: str | None = None


@dataclass(kw_only=True)
class OAuthState:
    """What the emulator's OAuth holds: pending codes, issued tokens by team, used refresh tokens."""

    codes: dict[str, tuple[Consent, str, str]] = field(default_factory=dict)  # code → (consent, scope, redirect_uri)
    tokens: dict[str, Issued] = field(default_factory=dict)  # access token → what it was issued for
    refresh_tokens: dict[str, Issued] = field(default_factory=dict)  # live refresh token → its access token's grant
    used_refresh_tokens: set[str] = field(default_factory=set)
    refused_refreshes: int = 0
    revoked: list[str] = field(default_factory=list)


class SlackOAuth:
    """`emulator.oauth`: set who consents (`consent_as`), rotation (`rotate`), then drive the real flow over HTTP."""

    def __init__(self, store: SlackStore, *, app_id: str, client_id: str = DEFAULT_CLIENT_ID,
                 client_secret: str = DEFAULT_CLIENT_SECRET) -> None:
        self._store = store
        self.app_id = app_id
        self.client_id = client_id
        self.client_secret = client_secret
        self.state = OAuthState()
        self._next: Consent | None = None
        # Token rotation: issued bot tokens expire in this many seconds and come with a refresh token; None: off.
        self.expires_in: int | None = None
        self._serial = itertools.count(1)

    # --- what a test sets ---
    def consent_as(self, team_id: str | None, *, user_id: str = "UINSTALLER", enterprise_id: str | None = None,
                   org_wide: bool = False, deny: bool = False) -> None:
        """The next consent page is approved (or, `deny`, cancelled) by `user_id` of `team_id`; `org_wide`: the
        whole Grid org `enterprise_id` (team_id None)."""
        if team_id is not None and team_id not in self._store.teams:
            raise ValueError(f"no workspace {team_id} (emulator.add_team first)")
        self._next = Consent(team_id=team_id, user_id=user_id, enterprise_id=enterprise_id, org_wide=org_wide, deny=deny)

    def rotate(self, expires_in: int | None = 43200) -> None:
        """Issue rotating tokens from now on: `expires_in` seconds and a single-use refresh token each."""
        self.expires_in = expires_in

    def tokens_of(self, team_id: str | None, *, enterprise_id: str | None = None) -> list[str]:
        """The bot tokens issued for the team (or org-wide for the org) that Slack still accepts, oldest first."""
        return [token for token, issued in self.state.tokens.items()
                if issued.team_id == team_id and (team_id is not None or issued.enterprise_id == enterprise_id)
                and token in self._store.grants]

    # --- HTTP: the consent page ---
    async def handle_authorize(self, request: web.Request) -> web.Response:
        """GET /oauth/v2/authorize: the person named by consent_as approves at once; back to redirect_uri."""
        query = request.query
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="invalid_client_id")
        redirect_uri = query.get("redirect_uri", "")
        if urlsplit(redirect_uri).scheme not in ("http", "https"):
            return web.Response(status=400, text="bad_redirect_uri")
        consent = self._next or Consent(team_id=query.get("team") or next(iter(self._store.teams)), user_id="UINSTALLER")
        self._next = None
        state = query.get("state", "")
        if consent.deny:
            raise web.HTTPFound(f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}")
        code = f"code-{next(self._serial)}-{secrets.token_hex(6)}"
        self.state.codes[code] = (consent, query.get("scope", ""), redirect_uri)
        raise web.HTTPFound(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}")

    # --- Web API: oauth.v2.access, auth.revoke ---
    async def answer(self, method: str, params: JsonDict, headers: Any, token: str) -> JsonDict:
        if method == "auth.revoke":
            return self._revoke(token)
        client_id, client_secret = _client_credentials(params, headers)
        if client_id != self.client_id:
            return error("invalid_client_id")
        if client_secret != self.client_secret:
            return error("bad_client_secret")
        if params.get("grant_type") == "refresh_token":
            return self._refresh(str(params.get("refresh_token") or ""))
        found = self.state.codes.pop(str(params.get("code") or ""), None)
        if found is None:
            return error("invalid_code")
        consent, scope, redirect_uri = found
        if params.get("redirect_uri") and params.get("redirect_uri") != redirect_uri:
            return error("bad_redirect_uri")
        return self._install(consent, scope)

    def _install(self, consent: Consent, scope: str) -> JsonDict:
        team = self._store.teams.get(consent.team_id or "")
        enterprise_id = consent.enterprise_id or (team.enterprise_id if team is not None else None)
        issued = self.issue(None if consent.org_wide else consent.team_id, enterprise_id)
        answer: JsonDict = {
            "ok": True, "app_id": self.app_id, "token_type": "bot", "scope": scope,
            "access_token": issued.access_token,
            "bot_user_id": team.bot_user_id if team is not None else f"UB{(enterprise_id or 'X')[1:]}",
            "authed_user": {"id": consent.user_id},
            "team": None if consent.org_wide or team is None else {"id": team.team_id, "name": team.name},
            "enterprise": {"id": enterprise_id, "name": f"Org {enterprise_id}"} if enterprise_id else None,
            "is_enterprise_install": consent.org_wide,
        }
        return {**answer, **self._rotation(issued)}

    def _refresh(self, refresh_token: str) -> JsonDict:
        previous = self.state.refresh_tokens.pop(refresh_token, None)
        if previous is None:
            # Slack revokes a refresh token once it is used: a second refresh with it is refused.
            self.state.refused_refreshes += 1
            return error("invalid_refresh_token")
        self.state.used_refresh_tokens.add(refresh_token)
        issued = self.issue(previous.team_id, previous.enterprise_id)
        team = self._store.teams.get(previous.team_id or "")
        return {
            "ok": True, "app_id": self.app_id, "token_type": "bot", "access_token": issued.access_token,
            "team": {"id": team.team_id, "name": team.name} if team is not None else None,
            "enterprise": {"id": previous.enterprise_id} if previous.enterprise_id else None,
            "is_enterprise_install": previous.team_id is None, **self._rotation(issued),
        }

    def issue(self, team_id: str | None, enterprise_id: str | None = None) -> Issued:
        """A bot token for the team (team None: org-wide for `enterprise_id`), as an install or a refresh issues it."""
        serial = next(self._serial)
        prefix = "xoxe.xoxb-1" if self.expires_in is not None else "xoxb"
        where = (team_id or enterprise_id or "x").lower()
        issued = Issued(access_token=f"{prefix}-{where}-{serial}-{secrets.token_hex(8)}", team_id=team_id,
                        enterprise_id=enterprise_id)
        if self.expires_in is not None:
            issued.refresh_token = f"xoxe-1-{where}-{serial}-{secrets.token_hex(8)}"
            self.state.refresh_tokens[issued.refresh_token] = issued
        self.state.tokens[issued.access_token] = issued
        self._store.grant_token(issued.access_token, team_id=team_id, enterprise_id=enterprise_id)
        return issued

    def _rotation(self, issued: Issued) -> JsonDict:
        if issued.refresh_token is None or self.expires_in is None:
            return {}
        return {"expires_in": self.expires_in, "refresh_token": issued.refresh_token}

    def _revoke(self, token: str) -> JsonDict:
        if not token:
            return error("not_authed")
        if token not in self._store.grants:
            return error("invalid_auth")
        self._store.revoke_token(token)
        self.state.revoked.append(token)
        for refresh, issued in list(self.state.refresh_tokens.items()):
            if issued.access_token == token:
                self.state.refresh_tokens.pop(refresh)
        return {"ok": True, "revoked": True}

    # --- uninstalling ---
    def uninstall(self, team_id: str | None, *, enterprise_id: str | None = None) -> JsonDict:
        """The app removed from the team (or, team None, from the org): every token issued for it stops working;
        the app_uninstalled envelope Slack then sends (deliver it with emulator.deliver_envelope)."""
        self._revoke_all(team_id, enterprise_id)
        return self._envelope({"type": "app_uninstalled", "event_ts": _ts()}, team_id, enterprise_id)

    def tokens_revoked(self, team_id: str | None, *, enterprise_id: str | None = None,
                       users: tuple[str, ...] = ()) -> JsonDict:
        """The team's bot token revoked (and `users`' tokens): the tokens_revoked envelope Slack then sends."""
        bots = self._revoke_all(team_id, enterprise_id)
        event = {"type": "tokens_revoked", "tokens": {"oauth": list(users), "bot": bots}, "event_ts": _ts()}
        return self._envelope(event, team_id, enterprise_id)

    def _revoke_all(self, team_id: str | None, enterprise_id: str | None) -> list[str]:
        bots = []
        for token in self.tokens_of(team_id, enterprise_id=enterprise_id):
            self._store.revoke_token(token)
            bots.append(self._store.teams[team_id].bot_user_id if team_id in self._store.teams else "UBORG")
        team = self._store.teams.get(team_id or "")
        if team is not None and team.bot_token in self._store.grants:
            self._store.revoke_token(team.bot_token)
        return sorted(set(bots))

    def _envelope(self, event: JsonDict, team_id: str | None, enterprise_id: str | None) -> JsonDict:
        team = self._store.teams.get(team_id or "")
        enterprise = enterprise_id or (team.enterprise_id if team is not None else None)
        envelope = events.event_envelope(event, team_id=team_id or "", api_app_id=self.app_id,
                                         bot_user_id=team.bot_user_id if team is not None else "UBORG")
        envelope["enterprise_id"] = enterprise
        envelope["authorizations"][0].update({"enterprise_id": enterprise, "is_enterprise_install": team_id is None})
        return envelope


def _client_credentials(params: JsonDict, headers: Any) -> tuple[str, str]:
    """HTTP Basic (what slack_sdk sends) or client_id / client_secret parameters."""
    header = str(headers.get("Authorization", ""))
    if header.startswith("Basic "):
        try:
            client_id, _, client_secret = base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")
        except ValueError:
            return "", ""
        return client_id, client_secret
    return str(params.get("client_id") or ""), str(params.get("client_secret") or "")


def _ts() -> str:
    import time

    return f"{time.time():.6f}"
