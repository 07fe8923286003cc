"""Changing a channel's settings from chat or the CLI: the fields, values read from text, who may, and the audit's actor."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from core.agents.factory import AGENTS
from core.channels import (
    COUNT_FIELDS,
    FIELD_NAMES,
    LIST_FIELDS,
    ChannelConfig,
    ChannelResolver,
    ChannelSettings,
    RESPOND_TO,
    ChannelSettingsError,
    channel_scope,
    cleared_with,
    respond_to_refusal,
    superseded,
)
from core.config import Settings
from core.requests import Actor, ConversationKey
from core.store.channel_config import AuditEntry, SourceAccess

FieldKind = Literal["choice", "text", "paragraph", "list", "flag", "json"]
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
# Agent type names a person may pick: `react` is an old name of `classic`, so it is not offered.
AGENT_CHOICES: tuple[str, ...] = tuple(name for name in AGENTS if name != "react")


@dataclass(frozen=True, kw_only=True)
class EditableField:
    """One setting as an admin surface offers it: how it is entered, and a label a person understands."""

    name: str
    label: str
    kind: FieldKind
    hint: str = ""


FIELDS: tuple[EditableField, ...] = (
    EditableField(name="agent_type", label="Agent type", kind="choice", hint=", ".join(AGENT_CHOICES)),
    EditableField(name="model", label="Model", kind="text", hint="the model answering here"),
    EditableField(name="system_prompt", label="Prompt paragraph", kind="paragraph",
                  hint="a paragraph added to the system prompt"),
    EditableField(name="approvers", label="Approvers", kind="list", hint="user ids, comma-separated"),
    EditableField(name="approver_roles", label="Approver roles", kind="list", hint="role ids, comma-separated"),
    EditableField(name="tools", label="Tools", kind="list", hint="tool names, comma-separated; empty: every tool"),
    EditableField(name="followups_need_mention", label="Follow-ups need a mention", kind="flag", hint="true or false"),
    EditableField(name="respond_to", label="Answers without a mention", kind="choice", hint=", ".join(RESPOND_TO)),
    EditableField(name="sources", label="Sources", kind="list", hint="source names, comma-separated; empty: every one"),
    EditableField(name="tool_policy", label="Tool approval rules (JSON)", kind="json",
                  hint='e.g. {"read_url": "always"}'),
    EditableField(name="user_requests_per_day", label="Questions per person per day", kind="text",
                  hint="a whole number; empty: the settings' USER_REQUESTS_PER_DAY"),
    EditableField(name="user_tokens_per_day", label="Tokens per person per day", kind="text",
                  hint="a whole number; empty: the settings' USER_TOKENS_PER_DAY"),
)
FIELDS_BY_NAME: dict[str, EditableField] = {f.name: f for f in FIELDS}
assert set(FIELDS_BY_NAME) == set(FIELD_NAMES), "every channel setting is editable"


# ----- values read from text (the CLI's FIELD=VALUE, Discord's `set`, Slack's text inputs) ----------


def parse_value(name: str, text: str) -> Any:
    """A field's value from what a person typed; ChannelSettingsError says what to write instead."""
    if name not in FIELDS_BY_NAME:
        raise ChannelSettingsError(f"unknown field {name!r}; fields: {', '.join(FIELD_NAMES)}")
    value = text.strip()
    if name in LIST_FIELDS:
        return [item.strip() for item in value.split(",") if item.strip()]
    if name == "followups_need_mention":
        lowered = value.lower()
        if lowered not in TRUE_WORDS + FALSE_WORDS:
            raise ChannelSettingsError("followups_need_mention is true or false")
        return lowered in TRUE_WORDS
    if name == "respond_to" and value.lower() not in RESPOND_TO:
        raise ChannelSettingsError(f"respond_to is one of {', '.join(RESPOND_TO)}")
    if name == "respond_to":
        return value.lower()
    if name in COUNT_FIELDS:
        if not value.isdigit():
            raise ChannelSettingsError(f"{name} is a whole number of at least 0")
        return int(value)
    if name == "tool_policy":
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ChannelSettingsError(f"tool_policy must be JSON ({error})") from None
    if name == "agent_type" and value not in AGENTS:
        raise ChannelSettingsError(f"unknown agent type {value!r}; known: {', '.join(sorted(AGENTS))}")
    return value


def parse_changes(words: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """FIELD=VALUE words as (fields to set, fields to clear); an empty VALUE clears the field."""
    to_set: dict[str, Any] = {}
    to_clear: list[str] = []
    for word in words:
        name, sep, value = word.partition("=")
        name = name.strip()
        if not sep:
            raise ChannelSettingsError(f"{word!r}: write FIELD=VALUE (FIELD= clears it)")
        if name not in FIELDS_BY_NAME:
            raise ChannelSettingsError(f"unknown field {name!r}; fields: {', '.join(FIELD_NAMES)}")
        if value.strip() == "":
            to_clear.append(name)
        else:
            to_set[name] = parse_value(name, value)
    ChannelSettings.from_json(to_set)  # the shapes (e.g. a tool rule), before anything is written
    return to_set, [*to_clear, *superseded(to_set), *cleared_with(to_clear)]


def diff(own: ChannelSettings, submitted: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What a form changes: each submitted field (None: empty) against the channel's own value; fields the
    form did not show are left alone."""
    current = own.to_json()
    to_set: dict[str, Any] = {}
    to_clear: list[str] = []
    for name, value in submitted.items():
        if value is None or value == [] or value == "":
            # An empty list set on purpose (no tools) looks empty in a form: left as it is.
            if name in current and current[name] != []:
                to_clear.append(name)
        elif current.get(name) != value:
            to_set[name] = value
    return to_set, to_clear


def shown(value: Any) -> str:
    """A value as one line of text (the CLI's history and the chat answers write values the same way)."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value) or "(none)"
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def limit_rows(config: ChannelConfig) -> list[tuple[str, Any]]:
    """A person's limits where the conversation is, as `show` and the chat summaries list them."""
    limits = config.person_limits
    return [("user_requests_per_day", "no limit" if limits.requests_per_day is None else limits.requests_per_day),
            ("user_tokens_per_day", "no limit" if limits.tokens_per_day is None else limits.tokens_per_day)]


def summary(config: ChannelConfig) -> list[tuple[str, str, str]]:
    """(field, value, where it comes from) for every field a conversation runs with."""
    rows: list[tuple[str, Any]] = [
        ("agent_type", config.agent_type), ("model", config.model), ("approvers", sorted(config.approvers)),
        ("approver_roles", sorted(config.approver_roles)), ("followups_need_mention", config.followups_need_mention),
        ("respond_to", config.respond_to), ("system_prompt", config.system_prompt or None),
        ("tools", config.tools if config.tools is not None else "every tool"),
        ("tool_policy", {tool: rule.describe() for tool, rule in config.tool_rules.items()} or None),
        ("sources", config.scope.only if config.scope.only is not None else "every source it may see"),
        *limit_rows(config),
    ]
    return [(name, shown(value), config.origins.get(name, "not set")) for name, value in rows]


def change_lines(entries: Sequence[AuditEntry]) -> list[str]:
    return [f"{e.field}: {shown(e.before)} → {shown(e.after)}" for e in entries]


# ----- who may, and who did ------------------------------------------------------------------------


def actor_id(platform: str, workspace: str, user: str) -> str:
    """Who made a change from chat, as the audit records it (`cli:<user>` from the command line)."""
    return f"{platform}:{workspace}:{user}"


@dataclass(frozen=True, kw_only=True)
class AdminRule:
    """Who may change a channel's settings from chat: a platform admin (the adapter says: Slack's workspace
    admins and owners, Discord's Manage Server), or someone CHANNEL_ADMINS / CHANNEL_ADMIN_ROLES name."""

    users: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()

    def allows(self, actor: Actor) -> bool:
        if actor.is_admin:
            return True
        # An empty id is never a match: a payload missing its user must not pass as an admin.
        return bool(actor.id) and (actor.id in self.users or bool(self.roles & actor.roles))


# ----- the service the adapters call (engine.channel_admin) ----------------------------------------


class ChannelAdminStore(Protocol):
    """Where settings and their audit are kept (core.store.channel_config.ChannelConfigStore)."""

    async def get(self, scope: str) -> ChannelSettings: ...

    async def update(
        self, scope: str, *, set_fields: Mapping[str, Any] | None = None, unset: Sequence[str] = (), actor: str
    ) -> tuple[ChannelSettings, list[AuditEntry]]: ...

    async def history(self, scope: str | None = None, *, limit: int = 50) -> list[AuditEntry]: ...

    async def access(self) -> list[SourceAccess]: ...


@dataclass(frozen=True, kw_only=True)
class ChannelView:
    """A channel as an admin surface shows it: its own settings, what it runs with, and the sources there are."""

    scope: str
    own: ChannelSettings
    config: ChannelConfig
    source_names: tuple[str, ...]


class ChannelAdmin:
    """Reads and changes one channel's own settings (never a workspace's: that stays with the CLI); every
    change goes through the store, which audits it in the same transaction."""

    def __init__(self, *, store: ChannelAdminStore, resolver: ChannelResolver, settings: Settings) -> None:
        self._store = store
        self._resolver = resolver
        self._settings = settings
        self.rule = AdminRule(users=frozenset(settings.channel_admins), roles=frozenset(settings.channel_admin_roles))

    def may_change(self, actor: Actor) -> bool:
        return self.rule.allows(actor)

    async def view(self, key: ConversationKey) -> ChannelView:
        scope = channel_scope(key)
        own = await self._store.get(scope)
        config = await self._resolver.resolve(key)
        # Only the sources this channel's team may search are offered: another team's names are not its to see.
        owners = config.scope.owners
        names = tuple(access.name for access in await self._store.access() if owners is None or access.owner in owners)
        return ChannelView(scope=scope, own=own, config=config, source_names=names)

    async def change(
        self, key: ConversationKey, *, set_fields: Mapping[str, Any], unset: Collection[str], actor: str
    ) -> list[AuditEntry]:
        """Applies a change (ChannelSettingsError when a value is wrong: nothing is written); the audit rows."""
        refusal = respond_to_refusal(set_fields, self._settings.platform_defaults(key.platform))
        if refusal is not None:
            raise ChannelSettingsError(refusal)
        unset = [*unset, *(name for name in [*superseded(set_fields), *cleared_with(list(unset))] if name not in unset)]
        _, entries = await self._store.update(channel_scope(key), set_fields=set_fields, unset=unset, actor=actor)
        return entries

    async def history(self, key: ConversationKey, *, limit: int = 10) -> list[AuditEntry]:
        return await self._store.history(channel_scope(key), limit=limit)
