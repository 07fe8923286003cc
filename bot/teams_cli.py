"""`relaybot teams`: the Slack installs (team, enterprise, installer, when, scopes, token expiry, health), `relaybot teams import` (SLACK_BOT_TOKEN made a stored install) and `relaybot teams purge` (a gone team's rows deleted)."""

from __future__ import annotations

import argparse
import asyncio
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
from core.store.team_data import forget_team

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
PURGE_PLATFORMS = ("slack", "discord")
DISCORD_TIMEOUT_S = 10.0


def add_teams_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    teams = subparsers.add_parser("teams", help="list the Slack workspaces the bot is installed in, or import SLACK_BOT_TOKEN's")
    actions = teams.add_subparsers(dest="teams_command")
    actions.add_parser("list", help="every install: team, enterprise, who installed it and when, scopes, token expiry")
    actions.add_parser("import", help="store SLACK_BOT_TOKEN's workspace as an install (moving to several workspaces)")
    actions.add_parser("reseal", help="re-encrypt every stored token with SECRET_KEY's first key (after a key rotation)")
    actions.add_parser("check", help="ask Slack whether each install's bot token is accepted (auth.test), one line each")
    purge = actions.add_parser("purge", help="delete every stored row of teams the bot has left (a Grid org id: each of "
                                              "its workspaces)")
    purge.add_argument("ids", nargs="+", metavar="ID", help="Slack team (T…) or Grid org (E…) ids; Discord guild ids")
    purge.add_argument("--platform", choices=PURGE_PLATFORMS, default="slack", help="whose ids these are (default: slack)")
    purge.add_argument("--force", action="store_true", help="purge a team the bot is still installed in (its install "
                                                            "stays; only its data goes)")


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
        if command == "purge":
            return await _purge(settings, db, args)
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
    from adapters.slack.installations import SecretKeyError
    from adapters.slack.oauth import check_installs

    try:
        results = await check_installs(settings, InstallStore(db))
    except SecretKeyError as error:
        print(f"relaybot: {error}.", file=sys.stderr)
        return EXIT_USAGE
    if not results:
        print("No Slack installs are stored.")
    for result in results:
        print(f"{result.label}: {result.line}")
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILURE


async def _purge(settings: Settings, db: Database, args: argparse.Namespace) -> int:
    """Every row of each named team deleted (core/store/team_data.forget_team with purge), refusing — before
    anything is deleted — a team the bot is still installed in, unless --force."""
    platform, ids = args.platform, list(dict.fromkeys(str(i).strip() for i in args.ids if str(i).strip()))
    if platform == "slack":
        workspaces, still = await _slack_teams(db, ids)
    else:
        try:
            workspaces, still = ids, await _discord_guilds_joined(settings, ids)
        except _Unknown as error:
            if not args.force:
                print(f"relaybot: {error}; nothing was purged (--force purges without asking).", file=sys.stderr)
                return EXIT_FAILURE
            workspaces, still = ids, []
    if still and not args.force:
        word = "Slack team" if platform == "slack" else "Discord server"
        print(f"relaybot: the bot is still installed in {word}{'s' if len(still) > 1 else ''} {', '.join(still)}: "
              f"uninstall it there first (or pass --force to delete the data and keep the install); nothing was "
              "purged.", file=sys.stderr)
        return EXIT_FAILURE
    for workspace in workspaces:
        forgotten = await forget_team(db, platform, workspace, purge=True)
        if platform == "slack":
            async with db.connection() as conn:  # what the team clients learnt of its org
                await conn.execute("DELETE FROM app_state WHERE key = %s", (ORG_OF + workspace,))
        counted = ", ".join(f"{count} {table}" for table, count in forgotten.deleted.items() if count)
        print(f"Purged {forgotten.team}: {sum(forgotten.deleted.values())} rows deleted"
              f"{' (' + counted + ')' if counted else ''}.")
    return EXIT_OK


# adapters/slack/team_clients.py's ORG_OF_PREFIX (spelt here: this module does not load slack_sdk for a purge).
ORG_OF = "slack.org_of:"


async def _slack_teams(db: Database, ids: list[str]) -> tuple[list[str], list[str]]:
    """The workspaces the ids name (a Grid org: itself and each workspace of it the installs or its events named),
    and those of the ids still installed (their own bot, or their org's org-wide one)."""
    bots = await InstallStore(db).bots()
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT substr(key, %s), value FROM app_state WHERE key LIKE %s",
                                    (len(ORG_OF) + 1, ORG_OF + "%"))
        org_of = {str(row[0]): str(row[1]) for row in await cursor.fetchall()}
    workspaces: list[str] = []
    still: list[str] = []
    for named in ids:
        if named.startswith("E"):
            members = sorted({bot.team_id for bot in bots if bot.enterprise_id == named and bot.team_id}
                             | {team for team, org in org_of.items() if org == named})
            workspaces.extend([named, *members])
            installed = any(bot.enterprise_id == named for bot in bots)
        else:
            workspaces.append(named)
            installed = any(bot.team_id == named or (bot.is_enterprise_install and bot.enterprise_id
                                                     and bot.enterprise_id == org_of.get(named)) for bot in bots)
        if installed:
            still.append(named)
    return list(dict.fromkeys(workspaces)), still


class _Unknown(Exception):
    """Whether the bot is still in a Discord server cannot be told now; the message says why."""


async def _discord_guilds_joined(settings: Settings, ids: list[str]) -> list[str]:
    """Those of the ids of servers the bot is still a member of (GET /users/@me/guilds, 200 a page)."""
    import aiohttp

    from adapters.discord.install import DEFAULT_API_BASE
    from adapters.discord.settings import DiscordSettings

    group = settings.platform_settings(DiscordSettings)
    if not group.token:
        raise _Unknown("DISCORD_TOKEN is not set, so whether the bot is still in these servers cannot be asked")
    base = (group.api_base or DEFAULT_API_BASE).rstrip("/")
    joined: set[str] = set()
    after = "0"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DISCORD_TIMEOUT_S)) as http:
            while True:
                async with http.get(f"{base}/users/@me/guilds", params={"limit": "200", "after": after},
                                    headers={"Authorization": f"Bot {group.token}"}) as response:
                    if response.status != 200:
                        raise _Unknown(f"Discord answered HTTP {response.status} when asked which servers the bot is in")
                    page = await response.json(content_type=None)
                found = [str(guild.get("id")) for guild in page if isinstance(guild, dict)]
                joined.update(found)
                if len(found) < 200:
                    break
                after = max(found, key=int)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as error:
        raise _Unknown(f"Discord could not be asked which servers the bot is in ({type(error).__name__})") from None
    return [guild for guild in ids if guild in joined]


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return "–"
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
