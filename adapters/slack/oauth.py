"""Slack's "Add to Slack": Bolt's AsyncOAuthFlow over the Postgres stores, its pages, who may install, and the uninstall events that remove a team's tokens."""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.error import BoltError
from slack_bolt.listener.async_builtins import AsyncTokenRevocationListeners
from slack_bolt.oauth.async_callback_options import AsyncCallbackOptions, AsyncFailureArgs, AsyncSuccessArgs
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.oauth.installation_store import Installation
from slack_sdk.web.async_client import AsyncWebClient

from adapters.platform import InstallCheck
from core.config import Settings, SettingsError
from core.ports import ForgetTeam, Installs

from .installations import STATE_EXPIRY_S, Sealer, SecretKeyError, SlackInstallations, SlackOAuthStates
from .settings import SlackSettings
from .surface import PLATFORM
from .team_tokens import NotInstalled, TeamKey
from .transport_oauth import SlackOAuthCalls, serve_install, serve_redirect

log = logging.getLogger(__name__)

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
# Package data (pyproject.toml), so an installed wheel and the image read the scopes too; the repository's root
# slack-app-manifest.yaml is a link to it, the one copy.
MANIFEST = Path(__file__).resolve().parent / "slack-app-manifest.yaml"

# What the redirect page says when the install did not happen, by Bolt's reason (one sentence each).
FAILURES: dict[str, str] = {
    "access_denied": "The install was cancelled in Slack, so nothing was installed.",
    "invalid_browser": "This install was started in another browser (or its cookie is gone), so it was refused: "
                       "start again from the install page.",
    "invalid_state": "This install link was already used or has expired, so it was refused: start again from the "
                     "install page.",
    "missing_code": "Slack did not send the install's code, so nothing was installed: start again from the install page.",
    "invalid_code": "Slack refused the install's code (used already or expired), so nothing was installed: start "
                    "again from the install page.",
    "storage_error": "The install could not be saved (the database did not answer), so nothing was installed: try "
                     "again in a minute.",
}
REFUSED = ("This workspace is not allowed to install relaybot (it is not in SLACK_TEAM_IDS), so the install was "
           "refused and the token Slack issued has been revoked.")


class InstallRefused(BoltError):
    """An install from a team or org outside SLACK_TEAM_IDS (its tokens are revoked by then)."""


def multi_workspace(slack: SlackSettings) -> bool:
    """Several workspaces through "Add to Slack": the app's client id and secret are set."""
    return slack.multi_workspace


def manifest_scopes(path: Path = MANIFEST) -> tuple[str, ...]:
    """The bot scopes slack-app-manifest.yaml asks for (oauth_config.scopes.bot): the install asks for the same."""
    return _manifest_scopes(path)


@lru_cache(maxsize=4)
def _manifest_scopes(path: Path) -> tuple[str, ...]:
    import yaml

    try:
        manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"the bot scopes are read from {path.name}, which cannot be read ({error.strerror})") from None
    scopes = ((manifest or {}).get("oauth_config") or {}).get("scopes") or {}
    found = tuple(str(scope) for scope in scopes.get("bot") or ())
    if not found:
        raise ValueError(f"{path.name} lists no bot scopes (oauth_config.scopes.bot) for the install to ask for")
    return found


def authorization_url(api_url: str) -> str:
    """Slack's consent page beside its Web API (https://slack.com/api/ → https://slack.com/oauth/v2/authorize)."""
    base = api_url.rstrip("/")
    return f"{base.removesuffix('/api')}/oauth/v2/authorize"


def add_to_slack(settings: Settings, installs: Installs, http: web.Application | None) -> SlackInstallations | None:
    """Multi-workspace mode's parts, or None with SLACK_BOT_TOKEN alone: the stored installs (every team's bot token,
    and Bolt's installation store), with /slack/install and /slack/oauth_redirect added to `http`. A missing
    SECRET_KEY, or a manifest without scopes, is a SettingsError (`relaybot run` exits 2 with the sentence)."""
    slack = settings.platform_settings(SlackSettings)
    if not slack.multi_workspace:
        return None
    # The app's own calls (code exchange, refresh, revoke) carry no team's token.
    client = AsyncWebClient(base_url=slack.api_url)
    try:
        installations = build_installations(settings, installs, client)
        flow = build_flow(settings, installations, installs, client)
    except ValueError as error:
        raise SettingsError(f"{error}.") from None
    if http is not None:
        add_install_routes(http, flow)
    log.info("Slack: several workspaces, each installed through %s", INSTALL_PATH)
    if slack.bot_token:
        log.warning("SLACK_BOT_TOKEN is not used with SLACK_CLIENT_ID set (each workspace's stored token is); "
                    "`relaybot teams import` stores its workspace as an install")
    return installations


def build_installations(settings: Settings, installs: Installs, client: AsyncWebClient) -> SlackInstallations:
    """The stored installs as Bolt's installation store and as the per-team tokens; SECRET_KEY is required."""
    slack = settings.platform_settings(SlackSettings)
    if not settings.secret_key:
        raise SecretKeyError(
            "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are set (several workspaces), so the bot tokens are stored "
            "encrypted and SECRET_KEY must be set: a Fernet key or a passphrase of at least 32 characters"
        )
    calls = SlackOAuthCalls(client, client_id=slack.client_id or "", client_secret=slack.client_secret or "")
    return SlackInstallations(installs, sealer=Sealer(settings.secret_key), client_id=slack.client_id or "", calls=calls)


class SlackInstallFlow(AsyncOAuthFlow):
    """Bolt's flow, refusing (and revoking) an install from outside SLACK_TEAM_IDS before anything is stored."""

    def __init__(self, *, allowed: Sequence[str], calls: SlackOAuthCalls, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._allowed = frozenset(allowed)
        self._calls = calls

    async def handle_installation(self, request: AsyncBoltRequest) -> BoltResponse:
        """The Add to Slack page; with `?direct` (a link to share, or an admin's bookmark) straight to Slack's consent
        page instead, the same state and cookie set."""
        if "direct" not in request.query:
            return await super().handle_installation(request)
        state = await self.issue_new_state(request)
        headers: dict[str, Any] = {"Location": await self.build_authorize_url(state, request),
                                   "Set-Cookie": [self.settings.state_utils.build_set_cookie_for_new_state(state)]}
        return BoltResponse(status=302, body="", headers=headers)

    async def store_installation(self, request: AsyncBoltRequest, installation: Installation) -> None:
        if self._allowed and not _allowed(installation, self._allowed):
            for token in (installation.bot_token, installation.user_token):
                if token:
                    try:
                        await self._calls.revoke(token)
                    except (SlackApiError, OSError) as error:
                        log.warning("could not revoke a refused install's token (%s)", type(error).__name__)
            log.warning("Slack install refused: team %s (enterprise %s) is not in SLACK_TEAM_IDS; its tokens revoked",
                        installation.team_id, installation.enterprise_id)
            raise InstallRefused(REFUSED)
        try:
            await super().store_installation(request, installation)
        except BoltError:
            raise
        except Exception as error:
            log.exception("could not store a Slack install of team %s", installation.team_id)
            raise BoltError(f"storage failed ({type(error).__name__})") from error


def _allowed(installation: Installation, allowed: frozenset[str]) -> bool:
    if installation.is_enterprise_install:
        return bool(installation.enterprise_id) and installation.enterprise_id in allowed
    return installation.team_id in allowed or bool(installation.enterprise_id and installation.enterprise_id in allowed)


def build_flow(settings: Settings, installations: SlackInstallations, installs: Installs,
               client: AsyncWebClient) -> SlackInstallFlow:
    """Bolt's AsyncOAuthFlow with the Postgres stores, the manifest's scopes and relaybot's pages."""
    slack = settings.platform_settings(SlackSettings)
    calls = SlackOAuthCalls(client, client_id=slack.client_id or "", client_secret=slack.client_secret or "")
    oauth = AsyncOAuthSettings(
        client_id=slack.client_id, client_secret=slack.client_secret, scopes=list(manifest_scopes()), user_scopes=[],
        redirect_uri=slack.redirect_uri, install_path=INSTALL_PATH, redirect_uri_path=REDIRECT_PATH,
        authorization_url=authorization_url(slack.api_url), installation_store=installations,
        installation_store_bot_only=True,
        state_store=SlackOAuthStates(installs, expiration_seconds=STATE_EXPIRY_S),
        state_expiration_seconds=STATE_EXPIRY_S,
        callback_options=AsyncCallbackOptions(success=_success, failure=_failure),
    )
    return SlackInstallFlow(allowed=slack.team_ids, calls=calls, client=client, logger=log, settings=oauth)


def doctor_line(settings: Settings) -> str:
    """`relaybot doctor`'s Slack line in multi-workspace mode: what `relaybot run` would refuse, else what it serves."""
    slack = settings.platform_settings(SlackSettings)
    try:
        if not settings.secret_key:
            raise SecretKeyError("SECRET_KEY is not set (the stored tokens are encrypted with it)")
        Sealer(settings.secret_key)
        scopes = manifest_scopes()
    except ValueError as error:
        return f"FAILED — several workspaces (SLACK_CLIENT_ID), but {error}"
    if not (slack.app_token or slack.signing_secret):
        return "FAILED — several workspaces (SLACK_CLIENT_ID), but neither SLACK_APP_TOKEN nor SLACK_SIGNING_SECRET is set"
    where = slack.redirect_uri or "the app's own Redirect URL (SLACK_REDIRECT_URI is unset)"
    allowed = f"only {', '.join(slack.team_ids)}" if slack.team_ids else "anyone who finds the page (SLACK_TEAM_IDS is unset)"
    return (f"ok — several workspaces: Add to Slack at {INSTALL_PATH} ({len(scopes)} scopes from the manifest), "
            f"back to {where}; installs from {allowed}; `relaybot teams` lists them")


async def check_installs(settings: Settings, installs: Installs) -> list[InstallCheck]:
    """Each stored install's bot token (refreshed first when it rotates and is due) tried with auth.test, one result
    each (`relaybot teams check`, `relaybot doctor`); SecretKeyError when SECRET_KEY cannot open the tokens."""
    slack = settings.platform_settings(SlackSettings)
    calls = SlackOAuthCalls(AsyncWebClient(base_url=slack.api_url), client_id=slack.client_id or "",
                            client_secret=slack.client_secret or "")
    stored = SlackInstallations(installs, sealer=Sealer(settings.secret_key or ""), client_id=slack.client_id or "",
                                calls=calls)
    results = []
    for bot in await installs.bots():
        name = "(org-wide)" if bot.is_enterprise_install else bot.team_id
        label = f"{name} of {bot.enterprise_id}" if bot.enterprise_id else name
        try:
            who = await calls.whoami(await stored.bot_token(TeamKey(bot.team_id, bot.enterprise_id or None)))
            results.append(InstallCheck(label=label, ok=True, line=f"ok — the bot token is accepted "
                                                                    f"({who.get('team') or who.get('team_id')})"))
        except (NotInstalled, SecretKeyError, SlackApiError, OSError) as error:
            why = error.response.get("error", "refused") if isinstance(error, SlackApiError) else str(error)
            results.append(InstallCheck(label=label, ok=False, line=f"FAILED — {why}"))
    return results


def add_install_routes(app: web.Application, flow: AsyncOAuthFlow) -> None:
    """GET /slack/install and /slack/oauth_redirect on the process's HTTP server."""
    app.router.add_get(INSTALL_PATH, partial(serve_install, flow))
    app.router.add_get(REDIRECT_PATH, partial(serve_redirect, flow))


class SlackUninstalls:
    """What an uninstall does after the tokens are gone: the team's pending work dropped (kept finals, reminders,
    syncs) and its data kept or purged per UNINSTALL_DATA, through `forget` (the adapter's port)."""

    def __init__(self, *, forget: ForgetTeam, purge: bool) -> None:
        self.purge = purge
        self.forget = forget

    async def __call__(self, team: TeamKey) -> None:
        workspace = team.team_id or team.enterprise_id or ""
        forgotten = await self.forget(PLATFORM, workspace, purge=self.purge)
        log.info("Slack team %s uninstalled: its pending work dropped, its data %s (UNINSTALL_DATA=%s): %s", workspace,
                 "purged" if self.purge else "kept", "purge" if self.purge else "keep", forgotten)


def register_uninstall(app: AsyncApp, installations: SlackInstallations,
                       on_uninstalled: Callable[[TeamKey], Awaitable[None]] | None = None) -> None:
    """app_uninstalled and tokens_revoked remove the team's tokens at once (Bolt's own listeners over our store);
    `on_uninstalled` then stops the team's work (kept finals, reminders, syncs) and keeps or purges its data."""
    builtins = AsyncTokenRevocationListeners(installations)

    async def uninstalled(context: AsyncBoltContext) -> None:
        await builtins.handle_app_uninstalled_events(context)
        team = TeamKey(team_id=str(context.team_id or ""), enterprise_id=context.enterprise_id)
        log.info("relaybot was uninstalled from Slack team %s%s: its tokens are deleted", team.team_id,
                 f" (enterprise {team.enterprise_id})" if team.enterprise_id else "")
        if on_uninstalled is not None:
            await on_uninstalled(team)

    async def revoked(event: dict[str, Any], context: AsyncBoltContext) -> None:
        await builtins.handle_tokens_revoked_events(event, context)
        tokens = event.get("tokens") or {}
        log.info("Slack revoked tokens of team %s (bots: %d, users: %d): they are deleted", context.team_id,
                 len(tokens.get("bot") or ()), len(tokens.get("oauth") or ()))
        if tokens.get("bot") and on_uninstalled is not None:
            await on_uninstalled(TeamKey(team_id=str(context.team_id or ""), enterprise_id=context.enterprise_id))

    app.event("app_uninstalled")(uninstalled)
    app.event("tokens_revoked")(revoked)


# --- pages ---

async def _success(args: AsyncSuccessArgs) -> BoltResponse:
    installation = args.installation
    where = installation.enterprise_name if installation.is_enterprise_install else installation.team_name
    sentence = (f"relaybot is installed in {where or installation.team_id or installation.enterprise_id}: "
                "mention @relaybot in a channel it was added to, or write to it in a DM.")
    return _page(200, "relaybot is installed", sentence, args.settings.state_utils.build_set_cookie_for_deletion())


async def _failure(args: AsyncFailureArgs) -> BoltResponse:
    refused = isinstance(args.error, InstallRefused)
    sentence = REFUSED if refused else FAILURES.get(
        args.reason, f"The install did not complete ({args.reason}), so nothing was installed: start again from "
                     "the install page."
    )
    log.info("Slack install failed: %s", "team not allowed" if refused else args.reason)
    status = 403 if refused else args.suggested_status_code
    return _page(status, "relaybot was not installed", sentence, args.settings.state_utils.build_set_cookie_for_deletion())


def _page(status: int, title: str, sentence: str, cookie: str) -> BoltResponse:
    body = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(sentence)}</p>"
            f"<p><a href=\"{INSTALL_PATH}\">Install page</a></p></body></html>")
    return BoltResponse(status=status, body=body, headers={"Content-Type": "text/html; charset=utf-8",
                                                           "Set-Cookie": cookie})
