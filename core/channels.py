"""Per-channel settings: what admins set for a channel or workspace, resolved over the settings for one conversation."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol

from core.config import Settings
from core.platform_settings import PlatformDefaults
from core.quota import DayLimits
from core.learning.model import Audience
from core.requests import ConversationKey, Request
from core.retrieval.retriever import DEPLOYMENT_OWNER, SourceScope
from core.tools.approval_policy import ALWAYS, PolicyRule, parse_rule
from core.tools.context import ToolContext

log = logging.getLogger(__name__)

SETTINGS_ORIGIN = "settings"
DMS = "dms"
# What a channel answers without a mention: nothing (mentions), follow-ups in the bot's threads (threads), or also
# every new top-level message from a person (all). A mention and a DM are answered in every mode.
RespondTo = Literal["mentions", "threads", "all"]
RESPOND_TO: tuple[RespondTo, ...] = ("mentions", "threads", "all")
# The older field, still read and set: true is `mentions`, false is `threads`; at one level respond_to wins.
LEGACY_RESPOND_FIELD = "followups_need_mention"


class ChannelSettingsError(ValueError):
    """A channel setting that cannot be stored: an unknown field or a value of the wrong shape."""


@dataclass(frozen=True, kw_only=True)
class ChannelSettings:
    """The fields set at one level (a channel, or a workspace / guild); None means "not set here"."""

    agent_type: str | None = None
    model: str | None = None
    approvers: tuple[str, ...] | None = None
    approver_roles: tuple[str, ...] | None = None
    followups_need_mention: bool | None = None  # the older spelling of respond_to (LEGACY_RESPOND_FIELD)
    respond_to: RespondTo | None = None
    system_prompt: str | None = None  # a paragraph added to the system prompt
    tools: tuple[str, ...] | None = None  # the tools offered besides internal_search; None: every one
    tool_policy: Mapping[str, Any] | None = None  # tool → approval rule, as TOOL_APPROVAL_POLICY writes it
    sources: tuple[str, ...] | None = None  # the sources searched (of those it may see); None: every one
    # A person's limits per UTC day when asking here (core/person_limits.py); None: the next level's, or the settings'.
    user_requests_per_day: int | None = None
    user_tokens_per_day: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelSettings:
        """From the stored JSON (or a CLI change); ChannelSettingsError names what is wrong."""
        unknown = sorted(set(data) - set(FIELD_NAMES))
        if unknown:
            raise ChannelSettingsError(f"unknown channel setting {unknown[0]!r}; known: {', '.join(FIELD_NAMES)}")
        return cls(**{name: _checked(name, value) for name, value in data.items() if value is not None})

    def to_json(self) -> dict[str, Any]:
        """Only the fields set here, JSON-ready."""
        out: dict[str, Any] = {}
        for name in FIELD_NAMES:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
        return out


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ChannelSettings))
LIST_FIELDS = frozenset({"approvers", "approver_roles", "tools", "sources"})
TEXT_FIELDS = frozenset({"agent_type", "model", "system_prompt"})
COUNT_FIELDS = frozenset({"user_requests_per_day", "user_tokens_per_day"})


def _checked(name: str, value: Any) -> Any:
    if name in LIST_FIELDS:
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item for item in value):
            raise ChannelSettingsError(f"{name} must be a list of names")
        return tuple(dict.fromkeys(value))
    if name in TEXT_FIELDS:
        if not isinstance(value, str) or not value.strip():
            raise ChannelSettingsError(f"{name} must be a non-empty text")
        return value.strip()
    if name in COUNT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ChannelSettingsError(f"{name} must be a whole number of at least 0")
        return value
    if name == "followups_need_mention":
        if not isinstance(value, bool):
            raise ChannelSettingsError("followups_need_mention must be true or false")
        return value
    if name == "respond_to":
        if value not in RESPOND_TO:
            raise ChannelSettingsError(f"respond_to is one of {', '.join(RESPOND_TO)}")
        return value
    if name == "tool_policy":
        if not isinstance(value, Mapping):
            raise ChannelSettingsError('tool_policy must be an object of tool → "always" | "never" | {"when": …}')
        for tool, rule in value.items():
            try:
                parse_rule(str(tool), rule)
            except ValueError as error:
                raise ChannelSettingsError(str(error)) from None
        return dict(value)
    raise ChannelSettingsError(f"unknown channel setting {name!r}")


@dataclass(frozen=True, kw_only=True)
class ChannelConfig:
    """What one conversation runs with: every field decided, and where each value came from."""

    agent_type: str
    model: str
    approvers: frozenset[str]
    approver_roles: frozenset[str]
    followups_need_mention: bool  # respond_to == "mentions", for the readers of the older field
    respond_to: RespondTo
    system_prompt: str  # the added paragraph; "" for none
    tools: tuple[str, ...] | None
    tool_rules: Mapping[str, PolicyRule]
    scope: SourceScope
    person_limits: DayLimits = DayLimits()  # what one person may use per UTC day when asking here
    origins: Mapping[str, str] = field(default_factory=dict)  # field → the scope that set it, or "settings"

    def allows_tool(self, name: str) -> bool:
        return self.tools is None or name in self.tools

    @property
    def answers_followups(self) -> bool:
        """Follow-ups without a mention in threads the bot answers in."""
        return self.respond_to != "mentions"

    @property
    def answers_everything(self) -> bool:
        """Every new top-level message from a person, without a mention."""
        return self.respond_to == "all"


# ----- where a conversation's settings live ---------------------------------------------------------


def channel_scope(key: ConversationKey) -> str:
    """A channel's scope: `platform:workspace:channel` (a thread whose key names its parent channel is that channel)."""
    return f"{key.platform}:{key.workspace}:{key.channel}"


def workspace_scope(key: ConversationKey) -> str:
    return f"{key.platform}:{key.workspace}"


def dm_audience(platform: str, workspace: str) -> str:
    """Who a source is granted to for the DMs of a workspace (a platform whose DMs have none files them under one)."""
    return f"{platform}:{workspace}:{DMS}"


def audiences(key: ConversationKey) -> tuple[str, ...]:
    """The grants this conversation's searches may use: its channel's, or (a DM) its workspace's DMs'.
    A DM never counts as a channel, so a source granted to a channel is not seen there."""
    return (dm_audience(key.platform, key.workspace),) if key.direct else (channel_scope(key),)


def answer_scope(scope: SourceScope, *, sources: tuple[str, ...] | None, request: Request | None) -> SourceScope:
    """The scope one answer searches: the channel's, narrowed by the request's sources (an API key's), never
    widened; seen by the request's audience — where it is asked and who asks (core/learning/visibility.py). A run
    with no request (resumed) has no audience, so it sees no learned channel."""
    if sources is not None:
        scope = replace(scope, only=sources if scope.only is None else tuple(n for n in scope.only if n in sources))
    return replace(scope, audience=audience_of(request.conversation, request.user.id) if request is not None else None)


def audience_of(key: ConversationKey, asker: str) -> Audience:
    """Who will see an answer in this conversation: its channel's members, or (a DM, an assistant thread) the asker."""
    return Audience(platform=key.platform, workspace=key.workspace, channel=key.channel, asker=asker, direct=key.direct)


def source_owners(key: ConversationKey, defaults: PlatformDefaults | None = None) -> tuple[str, ...]:
    """Whose sources a conversation searches: its team's, and the deployment's own where its platform shares them
    (PlatformDefaults.shares_deployment_sources); never another team's."""
    shared = defaults.shares_deployment_sources if defaults is not None else True
    return (key.team,) + ((DEPLOYMENT_OWNER,) if shared else ())


def settings_defaults(settings: Settings, platform: str, defaults: PlatformDefaults | None = None) -> ChannelSettings:
    """The last level: what the settings say for every channel of a platform (its own defaults come from its
    settings group; a platform without one answers only mentions in threads)."""
    defaults = defaults or settings.platform_defaults(platform)
    return ChannelSettings(
        agent_type=settings.agent_type,
        model=settings.llm_model,
        approvers=tuple(settings.approvers),
        approver_roles=tuple(settings.approver_roles),
        respond_to=respond_to_of(defaults.followups_need_mention),
        user_requests_per_day=settings.user_requests_per_day,
        user_tokens_per_day=settings.user_tokens_per_day,
    )


def resolve(
    key: ConversationKey, *, channel: ChannelSettings | None, workspace: ChannelSettings | None, settings: Settings,
    defaults: PlatformDefaults | None = None,
) -> ChannelConfig:
    """Channel → workspace → settings, field by field (`defaults`: the platform's, when the caller has them)."""
    defaults = defaults or settings.platform_defaults(key.platform)
    levels = [
        (channel_scope(key), channel or ChannelSettings()),
        (workspace_scope(key), workspace or ChannelSettings()),
        (SETTINGS_ORIGIN, settings_defaults(settings, key.platform, defaults)),
    ]
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in FIELD_NAMES:
        for origin, level in levels:
            value = _respond_to_at(level) if name == "respond_to" else getattr(level, name)
            if value is not None:
                values[name], origins[name] = value, origin
                break
    # The older field is read through respond_to, so both say the same and come from the same level.
    origins[LEGACY_RESPOND_FIELD] = origins["respond_to"]
    return ChannelConfig(
        agent_type=values["agent_type"],
        model=values["model"],
        approvers=frozenset(values.get("approvers", ())),
        approver_roles=frozenset(values.get("approver_roles", ())),
        followups_need_mention=values["respond_to"] == "mentions",
        respond_to=values["respond_to"],
        system_prompt=values.get("system_prompt", ""),
        tools=values.get("tools"),
        tool_rules=_rules(values.get("tool_policy") or {}),
        scope=SourceScope(audiences=audiences(key), only=values.get("sources"), owners=source_owners(key, defaults)),
        person_limits=DayLimits(requests_per_day=values.get("user_requests_per_day"),
                                tokens_per_day=values.get("user_tokens_per_day")),
        origins=origins,
    )


def respond_to_of(followups_need_mention: bool) -> RespondTo:
    """The older field's value as respond_to: a mention needed in threads is `mentions`, none needed `threads`."""
    return "mentions" if followups_need_mention else "threads"


def _respond_to_at(level: ChannelSettings) -> RespondTo | None:
    if level.respond_to is not None:
        return level.respond_to
    return None if level.followups_need_mention is None else respond_to_of(level.followups_need_mention)


def superseded(to_set: Mapping[str, Any]) -> list[str]:
    """The fields a change clears at its level besides the ones it names: respond_to and the older
    followups_need_mention say one thing, so setting either clears the other there (the audit records it)."""
    if "respond_to" in to_set and LEGACY_RESPOND_FIELD not in to_set:
        return [LEGACY_RESPOND_FIELD]
    if LEGACY_RESPOND_FIELD in to_set and "respond_to" not in to_set:
        return ["respond_to"]
    return []


def cleared_with(to_clear: Sequence[str]) -> list[str]:
    """Clearing either spelling of what a channel answers clears both (the next level's value applies)."""
    extra = {"respond_to": LEGACY_RESPOND_FIELD, LEGACY_RESPOND_FIELD: "respond_to"}
    return [extra[name] for name in to_clear if name in extra and extra[name] not in to_clear]


def respond_to_refusal(to_set: Mapping[str, Any], defaults: PlatformDefaults) -> str | None:
    """Why a change cannot be made where the platform's settings say the bot cannot read every message's text
    (answering everything needs it); None when it can."""
    if to_set.get("respond_to") == "all" and defaults.cannot_read_every_message:
        return f"respond_to=all needs the bot to read every message, and {defaults.cannot_read_every_message}"
    return None


def _rules(policy: Mapping[str, Any]) -> dict[str, PolicyRule]:
    rules: dict[str, PolicyRule] = {}
    for tool, raw in policy.items():
        try:
            rules[tool] = parse_rule(tool, raw)
        except ValueError:
            # Stored rules are checked when set; one that no longer parses asks for approval rather than none.
            log.warning("channel rule for %s does not parse; asking for approval", tool)
            rules[tool] = ALWAYS
    return rules


class ChannelSettingsSource(Protocol):
    """Where the per-level settings are kept (core.store.channel_config.ChannelConfigStore)."""

    async def settings_for(self, scopes: Sequence[str]) -> dict[str, ChannelSettings]: ...


class ChannelResolver:
    """Resolves a conversation's settings with one small query per question: a change made in any
    process applies to the next question everywhere, with no cache to go stale."""

    def __init__(self, *, settings: Settings, source: ChannelSettingsSource | None) -> None:
        self._settings = settings
        self._source = source
        # Each platform's defaults, read from its settings group once (settings do not change in a process).
        self._defaults: dict[str, PlatformDefaults] = {}

    async def resolve(self, key: ConversationKey) -> ChannelConfig:
        found: dict[str, ChannelSettings] = {}
        if self._source is not None:
            found = await self._source.settings_for([channel_scope(key), workspace_scope(key)])
        defaults = self._defaults.get(key.platform)
        if defaults is None:
            defaults = self._defaults[key.platform] = self._settings.platform_defaults(key.platform)
        return resolve(
            key, channel=found.get(channel_scope(key)), workspace=found.get(workspace_scope(key)),
            settings=self._settings, defaults=defaults,
        )


# ----- the approval-policy layer of a channel ---------------------------------------------------------


@dataclass(frozen=True)
class ChannelPolicyLayer:
    """The channel's tool rules, read from the call's context (resolved when the run was built)."""

    source: str = "channel settings"

    def rule_for(self, tool: str, ctx: ToolContext | None) -> PolicyRule | None:
        rule = ctx.channel_tool_rules.get(tool) if ctx is not None else None
        return rule if isinstance(rule, PolicyRule) else None

    def named(self) -> Collection[str]:
        return ()  # names differ per channel; `relaybot channels set` checks their rules' shape


def channel_policy_layer() -> ChannelPolicyLayer:
    """The layer core.tools.approval_policy.ToolApprovals consults first: a channel's rule for a tool wins."""
    return ChannelPolicyLayer()
