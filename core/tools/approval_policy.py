"""Whether a tool call waits for a person, and why: admin policy layers over the tool's own rule and flag.

An admin rule for a tool is `always`, `never`, or `{"when": {argument: value or "/regex/"}}` (approval
exactly when every named argument matches; a regex is RE2's, matched in time linear in the argument, since
the model writes the arguments and a channel's admin may write the rule). Rules come in layers, each from one source (a setting, the MCP
trust settings; later a channel's settings, whose layer can read the call's channel from the context).
The first layer with a rule for the tool decides; with none, the tool's `approval_rule`, then its
`requires_approval` flag. `ToolExecutor.needs_approval` asks `ToolApprovals.decide`; `relaybot tools`
asks `ToolApprovals.summary`, which needs no arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import re2

from core.tools import patterns
from core.tools.context import ToolContext
from core.tools.registry import ToolSpec

RuleMode = Literal["always", "never", "when"]
# Listing a tool without a call in hand: a `when` rule or a tool's own rule can only say "it depends".
Listing = Literal["needs approval", "no approval", "depends on the arguments"]
REGEX_DELIMITER = "/"
TOOL_DEFAULT = "tool default"
TOOL_RULE = "the tool's own rule for its arguments"


@dataclass(frozen=True)
class ArgumentMatch:
    """One condition of a `when` rule: the argument equals `value`, or (as text) matches the RE2 `pattern`."""

    argument: str
    value: Any = None
    pattern: str | None = None

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        if self.argument not in arguments:
            return False
        actual = arguments[self.argument]
        if self.pattern is None:
            return bool(actual == self.value)
        text = actual if isinstance(actual, str) else json.dumps(actual, ensure_ascii=False)
        return patterns.search(self.pattern, text)

    def describe(self) -> str:
        if self.pattern is not None:
            return f"{self.argument}={REGEX_DELIMITER}{self.pattern}{REGEX_DELIMITER}"
        return f"{self.argument}={json.dumps(self.value, ensure_ascii=False)}"


@dataclass(frozen=True)
class PolicyRule:
    """An admin's rule for one tool."""

    mode: RuleMode
    conditions: tuple[ArgumentMatch, ...] = ()

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        if self.mode == "when":
            return all(condition.matches(arguments) for condition in self.conditions)
        return self.mode == "always"

    def describe(self) -> str:
        if self.mode == "when":
            return "when " + ", ".join(condition.describe() for condition in self.conditions)
        return self.mode


ALWAYS = PolicyRule("always")
NEVER = PolicyRule("never")


class PolicyLayer(Protocol):
    """Rules from one source. `rule_for` gets the call's context (None when listing tools outside a call),
    so a per-channel layer can pick the channel's rules; `named` lists the tools a static layer names,
    for the check that catches a misspelt tool name in settings."""

    source: str

    def rule_for(self, tool: str, ctx: ToolContext | None) -> PolicyRule | None: ...

    def named(self) -> Collection[str]: ...


@dataclass(frozen=True)
class StaticLayer:
    """Rules by tool name that hold everywhere, e.g. TOOL_APPROVAL_POLICY."""

    source: str
    rules: Mapping[str, PolicyRule] = field(default_factory=dict)

    def rule_for(self, tool: str, ctx: ToolContext | None) -> PolicyRule | None:
        return self.rules.get(tool)

    def named(self) -> Collection[str]:
        return tuple(self.rules)


@dataclass(frozen=True)
class PredicateLayer:
    """One rule for every tool a predicate picks, e.g. the MCP tools whose server says they are read-only."""

    source: str
    picks: Callable[[str], bool]
    rule: PolicyRule = NEVER

    def rule_for(self, tool: str, ctx: ToolContext | None) -> PolicyRule | None:
        return self.rule if self.picks(tool) else None

    def named(self) -> Collection[str]:
        return ()


@dataclass(frozen=True)
class ApprovalVerdict:
    """Whether a person must approve, and the reason shown by `relaybot tools` and in the debug log."""

    needs_approval: bool
    reason: str


@dataclass(frozen=True)
class ApprovalSummary:
    """A tool's approval outside any call: yes, no, or it depends on the arguments; and why."""

    listing: Listing
    reason: str


class ToolApprovals:
    """The layers in order of precedence; the first with a rule for the tool decides."""

    def __init__(self, layers: Sequence[PolicyLayer] = ()) -> None:
        self._layers = tuple(layers)

    @property
    def layers(self) -> tuple[PolicyLayer, ...]:
        return self._layers

    def decide(self, spec: ToolSpec, arguments: Mapping[str, Any], ctx: ToolContext) -> ApprovalVerdict:
        for layer in self._layers:
            rule = layer.rule_for(spec.name, ctx)
            if rule is not None:
                return ApprovalVerdict(rule.needs_approval(arguments), f"{rule.describe()}: {layer.source}")
        return ApprovalVerdict(
            spec.needs_approval(ctx, dict(arguments)), TOOL_RULE if spec.approval_rule is not None else TOOL_DEFAULT
        )

    def summary(self, spec: ToolSpec) -> ApprovalSummary:
        for layer in self._layers:
            rule = layer.rule_for(spec.name, None)
            if rule is not None:
                return ApprovalSummary(_listing(rule), f"{rule.describe()}: {layer.source}")
        if spec.approval_rule is not None:
            return ApprovalSummary("depends on the arguments", TOOL_RULE)
        return ApprovalSummary("needs approval" if spec.requires_approval else "no approval", TOOL_DEFAULT)

    def unknown_names(self, known: Callable[[str], bool]) -> list[str]:
        """Tool names the layers name that `known` does not recognise, as `source: name`."""
        return [f"{layer.source}: {name}" for layer in self._layers for name in sorted(layer.named()) if not known(name)]


def _listing(rule: PolicyRule) -> Listing:
    if rule.mode == "when":
        return "depends on the arguments"
    return "needs approval" if rule.mode == "always" else "no approval"


def parse_rule(tool: str, raw: Any) -> PolicyRule:
    """One rule from its JSON form; a ValueError names the tool and what is wrong."""
    if raw in ("always", "never"):
        return PolicyRule(raw)
    if not isinstance(raw, Mapping) or set(raw) != {"when"} or not isinstance(raw["when"], Mapping) or not raw["when"]:
        raise ValueError(
            f'the rule for {tool!r} must be "always", "never" or {{"when": {{argument: value or "/regex/"}}}}'
        )
    conditions = []
    for argument, expected in raw["when"].items():
        if isinstance(expected, str) and len(expected) >= 2 and expected.startswith(REGEX_DELIMITER) and expected.endswith(REGEX_DELIMITER):
            pattern = expected[1:-1]
            try:
                patterns.compiled(pattern)
            except re2.error as error:
                raise ValueError(
                    f"the rule for {tool!r} has an invalid regex for {argument!r}: {patterns.re2_error_text(error)} "
                    "(RE2 syntax: look-arounds and back-references are not supported)"
                ) from None
            conditions.append(ArgumentMatch(str(argument), pattern=pattern))
        else:
            conditions.append(ArgumentMatch(str(argument), value=expected))
    return PolicyRule("when", tuple(conditions))


def parse_policy(raw: Mapping[str, Any]) -> dict[str, PolicyRule]:
    """TOOL_APPROVAL_POLICY as rules by tool name; a ValueError says which rule is malformed."""
    return {str(tool): parse_rule(str(tool), rule) for tool, rule in raw.items()}


def settings_layers(policy: Mapping[str, Any], overrides: Mapping[str, bool]) -> list[PolicyLayer]:
    """The admin's layers from settings: TOOL_APPROVAL_POLICY, then the older TOOL_APPROVAL_OVERRIDES
    (true is `always`, false is `never`), which it takes precedence over for a tool named in both."""
    layers: list[PolicyLayer] = []
    if policy:
        layers.append(StaticLayer("TOOL_APPROVAL_POLICY", parse_policy(policy)))
    if overrides:
        layers.append(
            StaticLayer("TOOL_APPROVAL_OVERRIDES", {tool: ALWAYS if flag else NEVER for tool, flag in overrides.items()})
        )
    return layers
