"""`relaybot keys`: create API keys (the secret shown once), list them with today's use, revoke them."""

from __future__ import annotations

import argparse
import sys

from bot.channels_cli import cli_actor
from core.api_access import ApiKey, api_key_audience
from core.config import Settings
from core.store.api_keys import ApiKeyExists, ApiKeyStore
from core.store.channel_config import ChannelConfigStore, SourceOfAnotherTeam, UnknownSource
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

EXIT_OK = 0
EXIT_FAILURE = 1


def add_keys_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = subparsers.add_parser("keys", help="manage API keys for the HTTP API")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="create a key; its secret is printed once")
    create.add_argument("name")
    create.add_argument("--sources", nargs="+", default=None, metavar="SOURCE",
                        help="only these sources (default: every open source); restricted ones named here are "
                             "granted to this key")
    create.add_argument("--requests-per-day", type=_count, default=None, metavar="N")
    create.add_argument("--tokens-per-day", type=_count, default=None, metavar="N")
    actions.add_parser("list", help="list keys, their limits and today's use")
    revoke = actions.add_parser("revoke", help="revoke a key at once")
    revoke.add_argument("name")


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 0 or more")
    return number


async def keys(settings: Settings, args: argparse.Namespace) -> int:
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        store = ApiKeyStore(db)
        match args.keys_command:
            case "create":
                try:
                    key, secret = await store.create(
                        args.name, sources=tuple(args.sources) if args.sources else None,
                        requests_per_day=args.requests_per_day, tokens_per_day=args.tokens_per_day,
                    )
                except ApiKeyExists:
                    print(f"relaybot: a key named {args.name!r} exists already.", file=sys.stderr)
                    return EXIT_FAILURE
                for line in await grant_key_sources(ChannelConfigStore(db), key, actor=cli_actor()):
                    print(line)
                print(f"Created key {key.name}. Its secret is shown this once:\n{secret}")
            case "list":
                listed = await store.list()
                if not listed:
                    print("No API keys.")
                for key in listed:
                    requests, tokens = await store.used(key)
                    print(_line(key, requests, tokens))
            case "revoke":
                revoked = next((k for k in await store.list() if k.name == args.name and k.revoked_at is None), None)
                if revoked is None or not await store.revoke(args.name):
                    print(f"relaybot: no live key is named {args.name!r}.", file=sys.stderr)
                    return EXIT_FAILURE
                await revoke_key_grants(ChannelConfigStore(db), revoked, actor=cli_actor())
                print(f"Revoked key {args.name}.")
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await db.close()
    return EXIT_OK


async def grant_key_sources(config: ChannelConfigStore, key: ApiKey, *, actor: str) -> list[str]:
    """Grant the key's sources to the key (the same grants a channel gets): a restricted one is then seen by this
    key's answers only, and an open one stays readable if it is restricted later. Lines to print."""
    lines = []
    for source in key.sources or ():
        try:
            await config.grant(source, api_key_audience(key.id), actor=actor)
        except SourceOfAnotherTeam as refused:
            lines.append(f"Note: {refused}; the key does not see it.")
        except UnknownSource:
            lines.append(f'Note: there is no source "{source}" yet; the key is limited to it by name, and '
                         "sees it once it exists if it is open.")
    return lines


async def revoke_key_grants(config: ChannelConfigStore, key: ApiKey, *, actor: str) -> None:
    audience = api_key_audience(key.id)
    for source in await config.granted_to(audience):
        await config.revoke(source, audience, actor=actor)


def _line(key: ApiKey, requests: int, tokens: int) -> str:
    state = "revoked" if key.revoked_at is not None else "live"
    sources = ",".join(key.sources) if key.sources is not None else "all sources"
    limit_r = "∞" if key.requests_per_day is None else str(key.requests_per_day)
    limit_t = "∞" if key.tokens_per_day is None else str(key.tokens_per_day)
    return (f"{key.name}  {key.prefix}…  {state}  {sources}  requests today {requests}/{limit_r}"
            f"  tokens today {tokens}/{limit_t}")
