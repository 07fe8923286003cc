"""`relaybot channels` (list, show, set, history) and `relaybot sources restrict | open | grant | revoke | access`."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from bot.cli_names import NAME_ERRORS, channel_id, labelled_people, labelled_scope, name_book, people_in_changes
from bot.platforms import PLATFORMS, by_name
from core import channel_admin
from core.channels import (
    FIELD_NAMES,
    ChannelSettings,
    ChannelSettingsError,
    channel_scope,
    dm_audience,
    resolve,
    respond_to_refusal,
)
from core.config import Settings
from core.names import NameBook
from core.requests import ConversationKey
from core.store.channel_config import AuditEntry, ChannelConfigStore, UnknownSource
from core.store.db import Database

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
ACCESS_COMMANDS = ("restrict", "open", "grant", "revoke", "access")
CHANNEL_HELP = " or ".join(platform.channel_scope for platform in PLATFORMS)
WORKSPACE_HELP = " or ".join(platform.workspace_scope for platform in PLATFORMS)
SCOPE_HELP = f"{CHANNEL_HELP} for a channel (CHANNEL an id, or #name); {WORKSPACE_HELP} for all of them"
# Platforms whose DMs belong to no workspace: `--dms NAME` names all of them.
DMS_HELP = " or ".join([WORKSPACE_HELP] + [f"{p.name} for {p.name} DMs" for p in PLATFORMS if p.dm_workspace])


class UsageError(ValueError):
    """A scope, field or value the CLI cannot take; the message says what to write instead."""


def add_channels_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    channels = subparsers.add_parser("channels", help="per-channel settings: agent, model, approvers, tools, sources")
    actions = channels.add_subparsers(dest="channels_command", required=True)
    actions.add_parser("list", help="list the channels and workspaces that have settings of their own")
    show = actions.add_parser("show", help="what a channel runs with, and where each value comes from")
    show.add_argument("scope", metavar="SCOPE", help=SCOPE_HELP)
    change = actions.add_parser(
        "set", help="set fields (FIELD=VALUE; an empty VALUE clears the field)",
        description=f"Fields: {', '.join(FIELD_NAMES)}. Lists are comma-separated; respond_to is mentions, threads "
        'or all; followups_need_mention (its older spelling: true is mentions, false threads) is true or false; '
        'tool_policy is JSON, e.g. \'{"read_url": "always"}\'; user_requests_per_day and '
        "user_tokens_per_day are whole numbers (a person's limits per UTC day there).",
    )
    change.add_argument("scope", metavar="SCOPE", help=SCOPE_HELP)
    change.add_argument("changes", nargs="+", metavar="FIELD=VALUE")
    history = actions.add_parser("history", help="who changed what, when (newest first)")
    history.add_argument("scope", metavar="SCOPE", nargs="?", default=None,
                         help=f"{SCOPE_HELP}; source:NAME for a source; default: every change")
    history.add_argument("--limit", type=int, default=50)


def add_source_access_commands(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Under `relaybot sources`: who may read a source."""
    actions.add_parser("restrict", help="let a source be read only where it is granted").add_argument("name")
    actions.add_parser("open", help="let every channel and DM read a source again (the default)").add_argument("name")
    for verb, text in (("grant", "let a channel or a workspace's DMs read a restricted source"),
                       ("revoke", "take a grant back")):
        parser = actions.add_parser(verb, help=text)
        parser.add_argument("name")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--channel", metavar="SCOPE", help=CHANNEL_HELP)
        target.add_argument("--dms", metavar="WORKSPACE", help=DMS_HELP)
    actions.add_parser("access", help="list each source as open or restricted, and where it is granted")


def cli_actor() -> str:
    """Who made a change from the command line, as the audit records it."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = os.environ.get("USER", "") or "unknown"
    return f"cli:{user}"


def parse_scope(text: str, *, channel_required: bool = False) -> tuple[str, str, str | None]:
    """(platform, workspace, channel or None) from `platform:workspace[:channel]`."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or parts[0] not in by_name() or not all(parts) or (channel_required and len(parts) != 3):
        raise UsageError(f"{text!r} is not a {'channel' if channel_required else 'scope'}: write {SCOPE_HELP}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def dm_target(text: str) -> str:
    """The grant audience of a workspace's DMs (`platform:WORKSPACE`), or of the DMs of a platform whose DMs belong to
    no workspace (its bare name)."""
    named = by_name().get(text.strip())
    if named is not None and named.dm_workspace is not None:
        return dm_audience(named.name, named.dm_workspace)
    platform, workspace, channel = parse_scope(text)
    if channel is not None:
        raise UsageError(f"--dms takes {DMS_HELP}, not a channel: {text!r}")
    return dm_audience(platform, workspace)


def parse_changes(changes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """FIELD=VALUE words as (fields to set, fields to clear): read as the chat admin surfaces read them."""
    try:
        return channel_admin.parse_changes(changes)
    except ChannelSettingsError as error:
        raise UsageError(str(error)) from None


_shown = channel_admin.shown


def format_history(entries: list[AuditEntry]) -> str:
    if not entries:
        return "No changes recorded."
    return "\n".join(
        f"{e.changed_at:%Y-%m-%d %H:%M:%S}  {e.changed_by}  {e.scope}  {e.field}: {_shown(e.before)} → {_shown(e.after)}"
        for e in entries
    )


async def resolved_scope(book: NameBook, text: str, *, channel_required: bool = False) -> str:
    """The scope with its channel as an id (`#help` looked up on the platform)."""
    platform, workspace, channel = parse_scope(text, channel_required=channel_required)
    channel = await channel_id(book, platform, workspace, channel)
    return f"{platform}:{workspace}" + (f":{channel}" if channel else "")


async def described(book: NameBook, scope: str, settings: ChannelSettings) -> str:
    """A place's own settings as `channels list` shows them: the channel's name and the approvers' beside their ids."""
    parts = scope.split(":")
    shown = settings.to_json()
    if settings.approvers and len(parts) >= 2 and parts[0] in by_name():
        shown["approvers"] = await labelled_people(book, parts[0], parts[1], list(settings.approvers))
    return f"{await labelled_scope(book, scope)}  " + "; ".join(f"{name}={_shown(value)}" for name, value in shown.items())


async def show(store: ChannelConfigStore, settings: Settings, scope: str, *, book: NameBook) -> str:
    platform, workspace, channel = parse_scope(scope)
    key = ConversationKey(platform=platform, workspace=workspace, channel=channel or "")
    found = await store.settings_for([f"{platform}:{workspace}:{channel}", f"{platform}:{workspace}"])
    config = resolve(
        key, channel=found.get(f"{platform}:{workspace}:{channel}") if channel else None,
        workspace=found.get(f"{platform}:{workspace}"), settings=settings,
    )
    rows = [
        ("agent_type", config.agent_type), ("model", config.model),
        ("approvers", await labelled_people(book, platform, workspace, sorted(config.approvers))),
        ("approver_roles", sorted(config.approver_roles)), ("followups_need_mention", config.followups_need_mention),
        ("respond_to", config.respond_to),
        ("system_prompt", config.system_prompt or None), ("tools", config.tools if config.tools is not None else "every tool"),
        ("tool_policy", {tool: rule.describe() for tool, rule in config.tool_rules.items()} or None),
        ("sources", config.scope.only if config.scope.only is not None else "every source it may see"),
        *channel_admin.limit_rows(config),
    ]
    lines = [await labelled_scope(book, scope)]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        lines.append(f"  {name.ljust(width)}  {_shown(value)}  ({config.origins.get(name, 'not set')})")
    if channel is not None:
        granted = await store.granted_to(channel_scope(key))
        lines.append(f"  restricted sources granted here: {', '.join(granted) or 'none'}")
    return "\n".join(lines)


async def channels(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot channels list | show SCOPE | set SCOPE FIELD=VALUE… | history [SCOPE]`."""
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    book = name_book(settings)
    try:
        # Checked before the database opens: a typo costs nothing (and a name is looked up only once the rest parsed).
        if args.channels_command in ("show", "set"):
            parse_scope(args.scope)
        to_set, to_clear = parse_changes(args.changes) if args.channels_command == "set" else ({}, [])
        if args.channels_command in ("show", "set") or (args.channels_command == "history" and _is_scope(args.scope)):
            args.scope = await resolved_scope(book, args.scope)
        if args.channels_command == "set":
            platform, workspace, _ = parse_scope(args.scope)
            to_set, to_clear = parse_changes(await people_in_changes(book, platform, workspace, args.changes))
        refusal = respond_to_refusal(to_set, settings.platform_defaults(parse_scope(args.scope)[0])) if to_set else None
        if refusal is not None:
            raise UsageError(refusal)
        await db.open()
        store = ChannelConfigStore(db)
        match args.channels_command:
            case "list":
                listed = [f"{await described(book, c.scope, c.settings)}  (by {c.updated_by}, {c.updated_at:%Y-%m-%d %H:%M})"
                          for c in await store.list()]
                print("\n".join(listed) or "No channel has settings of its own; every one uses the settings.")
            case "show":
                print(await show(store, settings, args.scope, book=book))
            case "set":
                _, changed = await store.update(args.scope, set_fields=to_set, unset=to_clear, actor=cli_actor())
                print(format_history(changed) if changed else "Nothing changed.")
            case "history":
                print(format_history(await store.history(args.scope, limit=args.limit)))
        _say_unnamed(book)
        return EXIT_OK
    except (UsageError, ChannelSettingsError, *NAME_ERRORS) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        await book.close()
        await db.close()


def _is_scope(text: str | None) -> bool:
    try:
        return text is not None and parse_scope(text) is not None
    except UsageError:
        return False


def _say_unnamed(book: NameBook) -> None:
    """The one line saying names could not be read (the output showed ids alone); on stderr, beside the output."""
    note = book.note()
    if note:
        print(note, file=sys.stderr)


async def source_access(settings: Settings, args: argparse.Namespace) -> int:
    """`relaybot sources restrict | open NAME`, `grant | revoke NAME --channel SCOPE | --dms WORKSPACE`, `access`."""
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    book = name_book(settings)
    try:
        audience = None
        if args.sources_command in ("grant", "revoke"):
            if args.channel:
                audience = await resolved_scope(book, args.channel, channel_required=True)
            else:
                audience = dm_target(args.dms)
        await db.open()
        store = ChannelConfigStore(db)
        actor = cli_actor()
        match args.sources_command:
            case "access":
                for access in await store.access():
                    where = ", ".join([await labelled_scope(book, to) for to in access.granted_to]) or "nowhere yet"
                    print(f"{access.name}  " + (f"restricted; granted to {where}" if access.restricted else "open to all"))
                _say_unnamed(book)
            case "restrict" | "open":
                restricted = args.sources_command == "restrict"
                changed = await store.set_restricted(args.name, restricted, actor=actor)
                state = "restricted to the channels and DMs granted it" if restricted else "open to every channel and DM"
                print(f'Source "{args.name}" is {"now " if changed else "already "}{state}.')
            case "grant":
                assert audience is not None
                changed = await store.grant(args.name, audience, actor=actor)
                print(f'{audience} {"may now" if changed else "could already"} read source "{args.name}".')
                if not any(a.restricted for a in await store.access() if a.name == args.name):
                    print(f'Note: "{args.name}" is open to all; `relaybot sources restrict {args.name}` limits it to its grants.')
            case "revoke":
                assert audience is not None
                changed = await store.revoke(args.name, audience, actor=actor)
                print(f'{audience} {"no longer reads" if changed else "had no grant for"} source "{args.name}".')
        return EXIT_OK
    except (UsageError, *NAME_ERRORS) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return EXIT_USAGE
    except UnknownSource:
        print(f'relaybot: there is no source named "{args.name}"; `relaybot sources list` shows them.', file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await book.close()
        await db.close()
