"""`relaybot teams`: the Slack installs (team, enterprise, installer, when, scopes, token expiry, health) and `relaybot teams import`, SLACK_BOT_TOKEN made a stored install."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone

from adapters.slack.settings import SlackSettings
from core.config import Settings
from core.ports import InstallRecord
from core.retrieval.store import adopt_deployment_sources
from core.store.db import Database, DatabaseError
from core.store.installations import InstallStore
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def add_teams_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    teams = subparsers.add_parser("teams", help="list the Slack workspaces the bot is installed in, or import SLACK_BOT_TOKEN's")
    actions = teams.add_subparsers(dest="teams_command")
    actions.add_parser("list", help="every install: team, enterprise, who installed it and when, scopes, token expiry")
    actions.add_parser("import", help="store SLACK_BOT_TOKEN's workspace as an install (moving to several workspaces)")
    actions.add_parser("reseal", help="re-encrypt every stored token with SECRET_KEY's first key (after a key rotation)")
    actions.add_parser("check", help="ask Slack whether each install's bot token is accepted (auth.test), one line each")


async def teams(settings: Settings, args: argparse.Namespace) -> int:
    command = getattr(args, "teams_command", None) or "list"
    if command == "import" and (problem := _import_problem(settings)) is not None:
        print(f"relaybot: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if command in ("reseal", "check") and not settings.secret_key:
        print(f"relaybot: SECRET_KEY is not set: {command} opens the stored tokens with it.", file=sys.stderr)
        return EXIT_USAGE
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        if command == "import":
            return await _import(settings, db)
        if command == "reseal":
            return await _reseal(settings, db)
        if command == "check":
            return await _check(settings, db)
        return await _list(db)
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()


async def _list(db: Database) -> int:
    store = InstallStore(db)
    bots, installers = await store.bots(), await store.installers()
    if not bots:
        print("No Slack installs are stored (single-workspace mode uses SLACK_BOT_TOKEN; "
              "`relaybot teams import` stores it).")
        return EXIT_OK
    by_team: dict[tuple[str, str], InstallRecord] = {}
    for installer in installers:  # oldest first: the latest install of a team wins
        by_team[(installer.enterprise_id, installer.team_id)] = installer
    rows = [("TEAM", "ENTERPRISE", "INSTALLED BY", "WHEN", "SCOPES", "TOKEN EXPIRES", "HEALTH")]
    for bot in bots:
        installer = by_team.get((bot.enterprise_id, bot.team_id))
        name = str(bot.fields.get("enterprise_name" if bot.is_enterprise_install else "team_name") or "")
        team = "(org-wide)" if bot.is_enterprise_install else bot.team_id
        rows.append((
            f"{team} {name}".strip() if name else team, bot.enterprise_id or "–",
            (installer.user_id or "(imported)") if installer is not None else "–",
            _when(installer.installed_at if installer is not None else bot.installed_at),
            str(bot.fields.get("bot_scopes") or "–"),
            _when(bot.token_expires_at) if bot.token_expires_at is not None else "never",
            f"refresh failing: {bot.refresh_error}" if bot.refresh_error else "ok",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]).rstrip())
    return EXIT_OK


def _import_problem(settings: Settings) -> str | None:
    slack = settings.platform_settings(SlackSettings)
    if not slack.bot_token:
        return "relaybot teams import stores SLACK_BOT_TOKEN's workspace as an install, and SLACK_BOT_TOKEN is not set."
    if not settings.secret_key:
        return ("SECRET_KEY is not set: the imported token is stored encrypted with it (a Fernet key or a passphrase "
                "of at least 32 characters), as every install's is.")
    return None


async def _import(settings: Settings, db: Database) -> int:
    # slack_sdk and cryptography only for this command (every other command of the CLI starts without them).
    from slack_sdk.errors import SlackApiError
    from slack_sdk.oauth.installation_store import Installation
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.installations import Sealer, SecretKeyError, SlackInstallations
    from adapters.slack.transport_oauth import SlackOAuthCalls

    slack = settings.platform_settings(SlackSettings)
    token = slack.bot_token or ""
    try:
        sealer = Sealer(settings.secret_key or "")
    except SecretKeyError as error:
        print(f"relaybot: {error}.", file=sys.stderr)
        return EXIT_USAGE
    calls = SlackOAuthCalls(AsyncWebClient(base_url=slack.api_url))
    try:
        who = await calls.whoami(token)
    except SlackApiError as error:
        print(f"relaybot: Slack refused SLACK_BOT_TOKEN ({error.response.get('error', 'unknown error')}); nothing was "
              "imported.", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as error:
        print(f"relaybot: Slack did not answer auth.test ({type(error).__name__}); nothing was imported.", file=sys.stderr)
        return EXIT_FAILURE
    org_wide = bool(who.get("is_enterprise_install"))
    installation = Installation(
        app_id=who.get("app_id"), enterprise_id=who.get("enterprise_id") or None, team_id=who.get("team_id"),
        team_name=who.get("team"), enterprise_url=who.get("url") if org_wide else None, bot_token=token,
        bot_id=who.get("bot_id"), bot_user_id=who.get("user_id"), bot_scopes=str(who.get("scopes") or ""),
        user_id="", is_enterprise_install=org_wide, installed_at=time.time(),
    )
    store = SlackInstallations(InstallStore(db), sealer=sealer, client_id=slack.client_id or "")
    await store.async_save(installation)
    team = str(who.get("team_id") or "")
    adopted = await adopt_deployment_sources(db, f"slack:{team}") if team else []
    print(f"Imported SLACK_BOT_TOKEN as the install of Slack team {team} ({who.get('team') or 'unnamed'})"
          f"{', enterprise ' + str(who.get('enterprise_id')) if who.get('enterprise_id') else ''}; "
          f"its conversations and settings stay as they are.")
    if adopted:
        print(f"The deployment's sources are now this team's: {', '.join(adopted)}.")
    print("Set SLACK_CLIENT_ID and SLACK_CLIENT_SECRET (and SLACK_REDIRECT_URI) to serve several workspaces; "
          "SLACK_BOT_TOKEN is then no longer needed.")
    return EXIT_OK


async def _reseal(settings: Settings, db: Database) -> int:
    from adapters.slack.installations import Sealer, SecretKeyError

    try:
        sealer = Sealer(settings.secret_key or "")
        count = await InstallStore(db).reseal(sealer.reseal)
    except SecretKeyError as error:
        print(f"relaybot: {error}; nothing was changed.", file=sys.stderr)
        return EXIT_FAILURE
    print(f"Resealed {count} stored Slack token rows with SECRET_KEY's first key: the others can be removed from it.")
    return EXIT_OK


async def _check(settings: Settings, db: Database) -> int:
    """Each install's bot token (refreshed first when it rotates and is due) tried with auth.test."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.installations import Sealer, SecretKeyError, SlackInstallations
    from adapters.slack.team_tokens import NotInstalled, TeamKey
    from adapters.slack.transport_oauth import SlackOAuthCalls

    slack = settings.platform_settings(SlackSettings)
    calls = SlackOAuthCalls(AsyncWebClient(base_url=slack.api_url), client_id=slack.client_id or "",
                            client_secret=slack.client_secret or "")
    try:
        installs = SlackInstallations(InstallStore(db), sealer=Sealer(settings.secret_key or ""),
                                      client_id=slack.client_id or "", calls=calls)
    except SecretKeyError as error:
        print(f"relaybot: {error}.", file=sys.stderr)
        return EXIT_USAGE
    bots = await InstallStore(db).bots()
    if not bots:
        print("No Slack installs are stored.")
    failed = 0
    for bot in bots:
        name = "(org-wide)" if bot.is_enterprise_install else bot.team_id
        label = f"{name} of {bot.enterprise_id}" if bot.enterprise_id else name
        try:
            who = await calls.whoami(await installs.bot_token(TeamKey(bot.team_id, bot.enterprise_id or None)))
            print(f"{label}: ok — the bot token is accepted ({who.get('team') or who.get('team_id')})")
        except (NotInstalled, SecretKeyError, SlackApiError, OSError) as error:
            failed += 1
            why = error.response.get("error", "refused") if isinstance(error, SlackApiError) else str(error)
            print(f"{label}: FAILED — {why}")
    return EXIT_FAILURE if failed else EXIT_OK


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return "–"
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
