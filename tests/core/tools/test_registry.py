"""The registry offers tools in OpenAI's shape, validates specs, and applies approval overrides."""

from __future__ import annotations

from typing import Any

import pytest

from core.tools import ToolContext, ToolRegistry, ToolSpec, builtin_registry
from core.tools.calculator import PARAMETERS as CALCULATOR_PARAMETERS


async def noop(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return ""


def spec(name: str, **options: Any) -> ToolSpec:
    options.setdefault("parameters", {"type": "object", "properties": {}})
    return ToolSpec(name=name, description=f"{name} tool", run=noop, **options)


def test_builtin_registry_holds_the_db_free_tools() -> None:
    registry = builtin_registry()
    assert registry.names() == ("calculator", "current_time")
    assert not registry.requires_approval("calculator")
    assert not registry.requires_approval("current_time")


def test_openai_tools_shape_and_order() -> None:
    tools = builtin_registry().openai_tools(["current_time", "calculator"])
    assert [tool["function"]["name"] for tool in tools] == ["current_time", "calculator"]
    for tool in tools:
        assert set(tool) == {"type", "function"}
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert tool["function"]["description"]
        assert tool["function"]["parameters"]["type"] == "object"
    assert tools[1]["function"]["parameters"] == CALCULATOR_PARAMETERS
    assert builtin_registry().openai_tools([]) == []


def test_openai_tools_refuses_unknown_names() -> None:
    with pytest.raises(KeyError):
        builtin_registry().openai_tools(["calculator", "nope"])


def test_register_get_and_duplicates() -> None:
    registry = ToolRegistry()
    registry.register(spec("send_mail", requires_approval=True))
    assert registry.get("send_mail") is not None
    assert registry.get("other") is None
    assert "send_mail" in registry and len(registry) == 1
    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec("send_mail"))


def test_approval_overrides_return_a_new_registry() -> None:
    registry = ToolRegistry([spec("send_mail", requires_approval=True), spec("lookup")])
    flipped = registry.with_approval_overrides({"send_mail": False, "lookup": True})
    assert not flipped.requires_approval("send_mail")
    assert flipped.requires_approval("lookup")
    # The original is untouched, and untouched fields survive the copy.
    assert registry.requires_approval("send_mail") and not registry.requires_approval("lookup")
    assert flipped.names() == registry.names()
    assert flipped.get("lookup").validator is not None  # type: ignore[union-attr]


def test_approval_override_for_unknown_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="send_mial"):
        builtin_registry().with_approval_overrides({"send_mial": True})


def test_requires_approval_of_unknown_tool_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        builtin_registry().requires_approval("nope")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "has space"}, "must match"),
        ({"name": "x" * 65}, "must match"),
        ({"parameters": {"type": "string"}}, "type object"),
        ({"parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "not a valid JSON schema"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_output_chars": 0}, "max_output_chars"),
    ],
)
def test_invalid_specs_are_refused(options: dict[str, Any], message: str) -> None:
    name = options.pop("name", "tool")
    with pytest.raises(ValueError, match=message):
        spec(name, **options)
