"""Slack installs on Postgres: Bolt's installation and OAuth state stores over core.ports.Installs, tokens sealed with SECRET_KEY, and each team's bot token (refreshed under a lock) for team_tokens.TeamTokens."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import secrets
import time
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from slack_sdk.errors import SlackApiError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from core.ports import InstallRecord, Installs

from .team_tokens import NotInstalled, TeamKey
from .transport_oauth import SlackOAuthCalls

log = logging.getLogger(__name__)

# A rotating bot token is refreshed once it is this close to its expiry (Slack's last at 12 hours).
REFRESH_AHEAD_S = 5 * 60.0
# How long this process trusts a token it read before reading it again (another process may have rotated or
# deleted it; an uninstall in this process forgets it at once).
TOKEN_CACHE_S = 10.0
STATE_EXPIRY_S = 600
_BOT_SECRETS = ("bot_token", "bot_refresh_token")
_USER_SECRETS = ("user_token", "user_refresh_token")
# What an Installation's standard fields hold besides the tokens (its to_dict() minus what is sealed).
_SECRETS = frozenset(_BOT_SECRETS + _USER_SECRETS)


class SecretKeyError(ValueError):
    """SECRET_KEY is missing or cannot seal the tokens; the message says what to set."""


class Sealer:
    """Tokens encrypted at rest: MultiFernet over SECRET_KEY's comma-separated keys, the first encrypting and every
    one decrypting (rotation: SECRET_KEY=new,old, then `relaybot teams reseal` rewrites every row with the new key,
    after which the old one can go)."""

    def __init__(self, secret_key: str) -> None:
        keys = [key.strip() for key in secret_key.split(",") if key.strip()]
        if not keys:
            raise SecretKeyError("SECRET_KEY is empty")
        self._fernet = MultiFernet([Fernet(_fernet_key(key)) for key in keys])

    def seal(self, values: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(json.dumps(values, sort_keys=True).encode())

    def reseal(self, sealed: bytes) -> bytes:
        """The same tokens sealed with the first key (opened with any)."""
        try:
            return self._fernet.rotate(sealed)
        except InvalidToken:
            raise SecretKeyError("a stored Slack token was sealed with a key SECRET_KEY no longer lists") from None

    def open(self, sealed: bytes) -> dict[str, Any]:
        try:
            opened = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            raise SecretKeyError("a stored Slack token was sealed with a key SECRET_KEY no longer lists") from None
        return opened if isinstance(opened, dict) else {}


def _fernet_key(key: str) -> bytes:
    """A Fernet key as is (`Fernet.generate_key()`), else one derived from the passphrase (at least 32 characters)."""
    try:
        if len(base64.urlsafe_b64decode(key.encode())) == 32:
            return key.encode()
    except ValueError:
        pass
    if len(key) < 32:
        raise SecretKeyError("SECRET_KEY must be a Fernet key or a passphrase of at least 32 characters")
    return base64.urlsafe_b64encode(hashlib.sha256(b"relaybot slack tokens\0" + key.encode()).digest())


def _key(enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None) -> tuple[str, str]:
    """Where an install is stored: an org-wide one under its enterprise with no team."""
    return enterprise_id or "", "" if is_enterprise_install and enterprise_id else team_id or ""


class SlackInstallations(AsyncInstallationStore):
    """Bolt's installation store, and the TeamTokens of a multi-workspace app (adapters/slack/team_tokens.py)."""

    def __init__(self, installs: Installs, *, sealer: Sealer, client_id: str, calls: SlackOAuthCalls | None = None,
                 refresh_ahead_s: float = REFRESH_AHEAD_S, token_cache_s: float = TOKEN_CACHE_S) -> None:
        self._installs = installs
        self._sealer = sealer
        self.client_id = client_id
        self._calls = calls
        self._refresh_ahead_s = refresh_ahead_s
        self._token_cache_s = token_cache_s
        self._cache: dict[TeamKey, tuple[float, str, float | None]] = {}
        self._refreshing: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def logger(self) -> logging.Logger:
        return log

    # --- Bolt's AsyncInstallationStore ---

    async def async_save(self, installation: Installation) -> None:
        values = installation.to_dict()
        enterprise_id, team_id = _key(installation.enterprise_id, installation.team_id, installation.is_enterprise_install)
        shown = {name: _plain(value) for name, value in values.items() if name not in _SECRETS}
        bot = self._bot_record(values, installation.is_enterprise_install) if installation.bot_token else None
        installer = InstallRecord(
            enterprise_id=enterprise_id, team_id=team_id, user_id=installation.user_id or "",
            is_enterprise_install=installation.is_enterprise_install, fields=shown,
            sealed=self._sealer.seal({name: values.get(name) for name in _USER_SECRETS}),
            token_expires_at=installation.user_token_expires_at,
        )
        await self._installs.save(bot=bot, installer=installer)
        self._forget(enterprise_id, team_id)
        log.info("Slack install saved: team %s%s, installed by %s", team_id or "(org-wide)",
                 f" of enterprise {enterprise_id}" if enterprise_id else "", installation.user_id)

    async def async_save_bot(self, bot: Bot) -> None:
        # Bolt calls this only when it rotated a token itself; our authorize refreshes through bot_token() instead.
        record = self._bot_record(bot.to_dict(), bot.is_enterprise_install)
        await self._installs.save(bot=record, installer=None)
        self._forget(record.enterprise_id, record.team_id)

    def _bot_record(self, values: dict[str, Any], is_enterprise_install: bool | None) -> InstallRecord:
        enterprise_id, team_id = _key(values.get("enterprise_id"), values.get("team_id"), is_enterprise_install)
        expires_at = values.get("bot_token_expires_at")
        return InstallRecord(
            enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=bool(is_enterprise_install),
            fields={name: _plain(value) for name, value in values.items() if name not in _SECRETS},
            sealed=self._sealer.seal({name: values.get(name) for name in _BOT_SECRETS}),
            token_expires_at=_plain(expires_at) if expires_at is not None else None,
        )

    async def async_find_bot(self, *, enterprise_id: str | None, team_id: str | None,
                             is_enterprise_install: bool | None = False) -> Bot | None:
        record = await self._installs.bot(**_named(_key(enterprise_id, team_id, is_enterprise_install)))
        if record is None:
            return None
        values = self._bot_values(record)
        return Bot(**{name: values.get(name) for name in _BOT_FIELDS})

    async def async_find_installation(self, *, enterprise_id: str | None, team_id: str | None,
                                      user_id: str | None = None,
                                      is_enterprise_install: bool | None = False) -> Installation | None:
        key = _key(enterprise_id, team_id, is_enterprise_install)
        record = await self._installs.installer(**_named(key), user_id=user_id)
        if record is None:
            return None
        values = {**record.fields, **self._sealer.open(record.sealed)}
        bot = await self._installs.bot(**_named(key))
        if bot is not None:
            # The bot's current token (a refresh replaces it on the bot's row only).
            values.update({name: value for name, value in self._bot_values(bot).items() if name.startswith("bot_")})
        return Installation(**{name: value for name, value in values.items() if name in _INSTALLATION_FIELDS})

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self._delete_bot(*_key(enterprise_id, team_id, False))

    async def async_delete_installation(self, *, enterprise_id: str | None, team_id: str | None,
                                        user_id: str | None = None) -> None:
        stored = _key(enterprise_id, team_id, False)
        removed = await self._installs.delete_installers(**_named(stored), user_id=user_id)
        if not removed and enterprise_id:
            removed = await self._installs.delete_installers(enterprise_id=enterprise_id, team_id="", user_id=user_id)
        log.info("Slack user tokens removed: team %s, user %s (%d install rows)", team_id, user_id or "(all)", removed)

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        stored = _key(enterprise_id, team_id, False)
        await self._delete_bot(*stored)
        await self.async_delete_installation(enterprise_id=enterprise_id, team_id=team_id)

    async def _delete_bot(self, enterprise_id: str, team_id: str) -> None:
        removed = await self._installs.delete_bot(enterprise_id=enterprise_id, team_id=team_id)
        if not removed and enterprise_id:
            # An event of a workspace inside an org installed org-wide: the org's install is the one meant.
            removed = await self._installs.delete_bot(enterprise_id=enterprise_id, team_id="")
        self._forget(enterprise_id, team_id)
        log.info("Slack bot token removed: team %s%s (%d rows); its events are not answered until it is reinstalled",
                 team_id or "(org-wide)", f" of enterprise {enterprise_id}" if enterprise_id else "", removed)

    # --- team_tokens.TeamTokens ---

    async def bot_token(self, team: TeamKey) -> str:
        cached = self._cache.get(team)
        now = time.time()
        if cached is not None and now - cached[0] < self._token_cache_s and not self._expiring(cached[2], now):
            return cached[1]
        record = await self._installs.bot(enterprise_id=team.enterprise_id or "", team_id=team.team_id)
        if record is None:
            raise NotInstalled(team)
        if self._expiring(record.token_expires_at, now):
            record = await self._refresh(team, record)
        token = str(self._bot_values(record).get("bot_token") or "")
        if not token:
            raise NotInstalled(team)
        self._cache[team] = (now, token, record.token_expires_at)
        return token

    def _expiring(self, expires_at: float | None, now: float) -> bool:
        return expires_at is not None and expires_at - now <= self._refresh_ahead_s

    async def _refresh(self, team: TeamKey, record: InstallRecord) -> InstallRecord:
        """The bot's token refreshed: one refresh per install at a time in this process (a lock) and across processes
        (Postgres's advisory lock), the row read again once the lock is held — another may have refreshed it, and
        Slack revokes a refresh token once used. A failure is logged and kept on the row (tried again next call);
        a token not expired yet is still used meanwhile."""
        key = (record.enterprise_id, record.team_id)
        async with self._refreshing.setdefault(key, asyncio.Lock()):
            async with self._installs.refreshing(**_named(key)) as held:
                current = await held.current()
                if current is None:
                    raise NotInstalled(team)
                if not self._expiring(current.token_expires_at, time.time()):
                    return current
                refresh_token = str(self._sealer.open(current.sealed).get("bot_refresh_token") or "")
                try:
                    if self._calls is None or not refresh_token:
                        raise RuntimeError("no refresh token or client credentials to refresh with")
                    answer = await self._calls.refresh(refresh_token)
                except (SlackApiError, RuntimeError, OSError, asyncio.TimeoutError) as error:
                    reason = _why(error)
                    log.warning("could not refresh the Slack bot token of team %s (%s); trying again on the next call",
                                record.team_id or record.enterprise_id, reason)
                    await held.failed(reason)
                    if current.token_expires_at is not None and current.token_expires_at <= time.time():
                        raise NotInstalled(team) from None
                    return current
                fresh = InstallRecord(
                    enterprise_id=current.enterprise_id, team_id=current.team_id,
                    is_enterprise_install=current.is_enterprise_install,
                    fields={**current.fields, "bot_token_expires_at": None},
                    sealed=self._sealer.seal({"bot_token": answer.get("access_token"),
                                              "bot_refresh_token": answer.get("refresh_token")}),
                    token_expires_at=time.time() + float(answer.get("expires_in") or 0) if answer.get("expires_in") else None,
                )
                await held.replace(fresh)
                log.info("Slack bot token of team %s refreshed", record.team_id or record.enterprise_id)
                return fresh

    async def refresh_failures(self) -> dict[str, str]:
        """Each install whose last token refresh failed (kept on its row until one succeeds, by any process), and
        why: what /readyz notes for that team alone."""
        return {_label(bot): f"token refresh failing ({bot.refresh_error}); tried again on the next call"
                for bot in await self._installs.bots() if bot.refresh_error}

    def _bot_values(self, record: InstallRecord) -> dict[str, Any]:
        values = {**record.fields, **self._sealer.open(record.sealed)}
        values["bot_token_expires_at"] = int(record.token_expires_at) if record.token_expires_at is not None else None
        values["is_enterprise_install"] = record.is_enterprise_install
        return values

    def _forget(self, enterprise_id: str, team_id: str) -> None:
        for team in [t for t in self._cache if (t.enterprise_id or "") == enterprise_id
                     and (t.team_id == team_id or team_id == "")]:
            self._cache.pop(team, None)


class SlackOAuthStates(AsyncOAuthStateStore):
    """The OAuth flow's `state` in Postgres: random, single-use, refused once `expiration_seconds` have passed."""

    def __init__(self, installs: Installs, *, expiration_seconds: int = STATE_EXPIRY_S) -> None:
        self._installs = installs
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = secrets.token_urlsafe(32)
        await self._installs.issue_state(state, expires_in_s=self.expiration_seconds)
        return state

    async def async_consume(self, state: str) -> bool:
        return bool(state) and await self._installs.consume_state(state)


def _label(bot: InstallRecord) -> str:
    """An install as a person reads it: its team id, or its Grid org's for an org-wide one."""
    return bot.team_id or bot.enterprise_id


def _named(key: tuple[str, str]) -> dict[str, str]:
    return {"enterprise_id": key[0], "team_id": key[1]}


def _plain(value: Any) -> Any:
    """JSON for jsonb: the datetimes of Installation.to_dict() as epoch seconds."""
    timestamp = getattr(value, "timestamp", None)
    return timestamp() if callable(timestamp) else value


def _why(error: BaseException) -> str:
    if isinstance(error, SlackApiError):
        return str(error.response.get("error") or "refused")
    return f"{type(error).__name__}: {error}"


_BOT_FIELDS = (
    "app_id", "enterprise_id", "enterprise_name", "team_id", "team_name", "bot_token", "bot_id", "bot_user_id",
    "bot_scopes", "bot_refresh_token", "bot_token_expires_at", "is_enterprise_install", "installed_at",
)
_INSTALLATION_FIELDS = frozenset((
    *_BOT_FIELDS, "enterprise_url", "user_id", "user_token", "user_scopes", "user_refresh_token",
    "user_token_expires_at", "incoming_webhook_url", "incoming_webhook_channel", "incoming_webhook_channel_id",
    "incoming_webhook_configuration_url", "token_type",
))
