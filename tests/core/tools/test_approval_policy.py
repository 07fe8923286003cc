"""Admin approval policy: always / never / when rules, layer precedence over the tool's rule and flag, reasons."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import Settings, SettingsError, load_settings
from core.requests import ConversationKey
from core.tools import ToolContext, ToolExecutor, ToolRegistry, ToolSpec
from core.tools.approval_policy import (
    NEVER,
    PolicyRule,
    PredicateLayer,
    StaticLayer,
    ToolApprovals,
    parse_policy,
    settings_layers,
)
from core.tools.executor import ParsedCall
from core.llm.results import ToolCallRequest

CTX = ToolContext(user="U1", conversation_id=None, conversation=ConversationKey(platform="test", workspace="W", channel="C"))


async def noop(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return ""


def spec(name: str = "deploy", **options: Any) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters={"type": "object", "properties": {}}, run=noop, **options)


def decide(approvals: ToolApprovals, tool: ToolSpec, **arguments: Any) -> tuple[bool, str]:
    verdict = approvals.decide(tool, arguments, CTX)
    return verdict.needs_approval, verdict.reason


def test_always_never_and_when_with_values_and_regexes() -> None:
    rules = parse_policy({
        "a": "always",
        "b": "never",
        "deploy": {"when": {"target": "/prod/", "force": True}},
    })
    approvals = ToolApprovals([StaticLayer("TOOL_APPROVAL_POLICY", rules)])
    assert decide(approvals, spec("a")) == (True, "always: TOOL_APPROVAL_POLICY")
    assert decide(approvals, spec("b", requires_approval=True)) == (False, "never: TOOL_APPROVAL_POLICY")
    reason = "when target=/prod/, force=true: TOOL_APPROVAL_POLICY"
    assert decide(approvals, spec(), target="eu-prod-1", force=True) == (True, reason)
    assert decide(approvals, spec(), target="staging", force=True) == (False, reason)
    assert decide(approvals, spec(), target="prod", force=False) == (False, reason)
    assert decide(approvals, spec(), force=True) == (False, reason)  # a missing argument does not match


def test_a_regex_also_reads_non_text_arguments_as_json() -> None:
    rules = parse_policy({"deploy": {"when": {"replicas": "/^[1-9][0-9]+$/"}}})
    approvals = ToolApprovals([StaticLayer("P", rules)])
    assert decide(approvals, spec(), replicas=12)[0]
    assert not decide(approvals, spec(), replicas=3)[0]


def test_precedence_policy_then_tool_rule_then_flag() -> None:
    def rule(ctx: ToolContext, arguments: dict[str, Any]) -> bool:
        return arguments.get("url") == "evil"

    ruled = spec("fetch", approval_rule=rule)
    flagged = spec("mail", requires_approval=True)
    bare = ToolApprovals()
    assert decide(bare, ruled, url="evil") == (True, "the tool's own rule for its arguments")
    assert decide(bare, ruled, url="fine") == (False, "the tool's own rule for its arguments")
    assert decide(bare, flagged) == (True, "tool default")
    admin = ToolApprovals(settings_layers({"fetch": "never"}, {"mail": False}))
    assert decide(admin, ruled, url="evil") == (False, "never: TOOL_APPROVAL_POLICY")
    assert decide(admin, flagged) == (False, "never: TOOL_APPROVAL_OVERRIDES")


def test_the_policy_wins_over_the_older_overrides_and_layers_go_in_order() -> None:
    approvals = ToolApprovals([
        *settings_layers({"mail": "always"}, {"mail": False}),
        PredicateLayer("later", lambda name: True, NEVER),
    ])
    assert decide(approvals, spec("mail")) == (True, "always: TOOL_APPROVAL_POLICY")
    assert decide(approvals, spec("other", requires_approval=True)) == (False, "never: later")


def test_a_layer_sees_the_calls_context_so_a_channel_layer_can_sit_on_top() -> None:
    class ChannelLayer:
        source = "channel settings"

        def rule_for(self, tool: str, ctx: ToolContext | None) -> PolicyRule | None:
            return PolicyRule("always") if ctx is not None and ctx.channel == "C" else None

        def named(self) -> tuple[str, ...]:
            return ()

    approvals = ToolApprovals([ChannelLayer(), *settings_layers({"mail": "never"}, {})])
    assert decide(approvals, spec("mail")) == (True, "always: channel settings")
    assert approvals.summary(spec("mail")).reason == "never: TOOL_APPROVAL_POLICY"  # no channel outside a call


def test_summaries_say_yes_no_or_it_depends() -> None:
    approvals = ToolApprovals(settings_layers({"a": {"when": {"x": 1}}, "b": "always"}, {}))
    assert approvals.summary(spec("a")).listing == "depends on the arguments"
    assert approvals.summary(spec("b")).listing == "needs approval"
    assert approvals.summary(spec("c")).listing == "no approval"
    assert approvals.summary(spec("d", approval_rule=lambda ctx, args: True)).listing == "depends on the arguments"


def test_unknown_names_are_reported_by_source() -> None:
    approvals = ToolApprovals(settings_layers({"deploy": "never", "typo": "never"}, {"mial": True}))
    assert approvals.unknown_names(lambda name: name == "deploy") == [
        "TOOL_APPROVAL_POLICY: typo", "TOOL_APPROVAL_OVERRIDES: mial"
    ]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("sometimes", "must be"),
        ({"when": {}}, "must be"),
        ({"if": {"a": 1}}, "must be"),
        ({"when": {"a": "/(/"}}, "invalid regex"),
    ],
)
def test_malformed_rules_are_refused_naming_the_tool(rule: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_policy({"deploy": rule})
    assert "deploy" in str(caught.value)


def test_the_setting_is_checked_when_read() -> None:
    settings = Settings(_env_file=None, tool_approval_policy='{"deploy": {"when": {"target": "/prod/"}}}')
    assert settings.tool_approval_policy == {"deploy": {"when": {"target": "/prod/"}}}
    with pytest.raises(SettingsError, match="TOOL_APPROVAL_POLICY"):
        load_settings(_env_file=None, tool_approval_policy='{"deploy": "maybe"}')


def test_the_executor_asks_the_policy() -> None:
    tool = spec("deploy", requires_approval=True)
    executor = ToolExecutor(ToolRegistry([tool]), approvals=ToolApprovals(settings_layers({"deploy": "never"}, {})))
    parsed = executor.parse(ToolCallRequest(id="c1", name="deploy", arguments="{}"))
    assert isinstance(parsed, ParsedCall)
    assert not executor.needs_approval(parsed, CTX)
    assert ToolExecutor(ToolRegistry([tool])).needs_approval(parsed, CTX)
