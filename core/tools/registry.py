"""Tool specs and the registry that names them, offers them to the model and says which need approval."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.requests import Reach
from core.tools import schema_check, schemas
from core.tools.context import ToolContext

DEFAULT_TOOL_TIMEOUT_S = 20.0
DEFAULT_MAX_OUTPUT_CHARS = 8000
# OpenAI (and compatible providers) reject function names outside this pattern with a 400.
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolError(Exception):
    """A failure a tool reports on purpose; its message is written for the model to act on."""


ToolRun = Callable[[ToolContext, dict[str, Any]], Awaitable[str]]
# Decides per call whether a person must approve it (True) — for tools whose risk depends on the
# arguments, e.g. a URL the asker did not name. Settings and channel policy still override it.
ApprovalRule = Callable[[ToolContext, dict[str, Any]], bool]


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One tool: its name and JSON-schema parameters as the model sees them, and how to run it."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolRun
    requires_approval: bool = False
    approval_rule: ApprovalRule | None = None  # when set, decides instead of requires_approval
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    # Run by the asker's client, never here (core/tools/client_tools.py): a call always pauses the run for its result.
    client_side: bool = False
    # What it needs of the asking surface (core.requests.Reach): not offered where the Request lacks one.
    needs: frozenset[Reach] = frozenset()
    validator: Any = field(init=False, repr=False, compare=False)  # a schemas.GuardedValidator

    def __post_init__(self) -> None:
        if not TOOL_NAME_PATTERN.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {TOOL_NAME_PATTERN.pattern}")
        if self.parameters.get("type") != "object":
            raise ValueError(f"parameters of tool {self.name!r} must be a JSON schema of type object")
        try:
            # Clients and MCP servers write these: checked for refs out of the schema, size, depth and RE2 patterns.
            schema_check.check_schema(self.parameters)
        except schema_check.SchemaRefused as exc:
            raise ValueError(f"parameters of tool {self.name!r} are refused: {exc}") from exc
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s of tool {self.name!r} must be positive")
        if self.max_output_chars <= 0:
            raise ValueError(f"max_output_chars of tool {self.name!r} must be positive")
        # Built once per spec so every call validates without re-reading the schema.
        object.__setattr__(self, "validator", schemas.validator_for(self.parameters))

    def needs_approval(self, ctx: ToolContext, arguments: dict[str, Any]) -> bool:
        """Whether this call waits for a person: the tool's rule for these arguments, else its flag."""
        if self.approval_rule is not None:
            return self.approval_rule(ctx, arguments)
        return self.requires_approval

    def openai_tool(self) -> dict[str, Any]:
        """This tool in the shape of one entry of the OpenAI `tools=[...]` request parameter."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolProvider(Protocol):
    """Tools that come and go while the bot runs (an MCP server's, while it is connected).

    `specs` is what is available now; `owns` says whether a name is in the provider's namespace
    whether or not it is available now (so settings may name a tool of a server that is down)."""

    def specs(self) -> Mapping[str, ToolSpec]: ...

    def owns(self, name: str) -> bool: ...


class ToolRegistry:
    """The tools the engine knows, by name: registered ones in registration order, then the providers'
    tools available at the moment of asking."""

    def __init__(self, specs: Iterable[ToolSpec] = (), *, providers: Iterable[ToolProvider] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._providers: list[ToolProvider] = list(providers)
        for spec in specs:
            self.register(spec)

    def register(self, spec: ToolSpec) -> None:
        if spec.name in self._specs or any(provider.owns(spec.name) for provider in self._providers):
            raise ValueError(f"a tool named {spec.name!r} is already registered")
        self._specs[spec.name] = spec

    def add_provider(self, provider: ToolProvider) -> None:
        self._providers.append(provider)

    def copy(self) -> ToolRegistry:
        """A registry with the same tools and providers, to register more tools into."""
        return ToolRegistry(self._specs.values(), providers=self._providers)

    def get(self, name: str) -> ToolSpec | None:
        spec = self._specs.get(name)
        if spec is not None:
            return spec
        for provider in self._providers:
            if provider.owns(name):
                return provider.specs().get(name)
        return None

    def within_reach(self, names: Iterable[str], reaches: frozenset[Reach] | None) -> tuple[str, ...]:
        """The names whose tools need nothing the asking surface lacks (`reaches`: a Request's; None for a
        continuation, whose run already chose its tools)."""
        return tuple(
            name for name in names
            if reaches is None or (spec := self.get(name)) is None or spec.needs <= reaches
        )

    def names(self) -> tuple[str, ...]:
        """Every tool available now; a provider's tools change between calls."""
        dynamic = [name for provider in self._providers for name in provider.specs() if name not in self._specs]
        return (*self._specs, *dynamic)

    def owns(self, name: str) -> bool:
        """Whether `name` is a registered tool or in a provider's namespace (available now or not)."""
        return name in self._specs or any(provider.owns(name) for provider in self._providers)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self.names())

    def openai_tools(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """The OpenAI `tools` list for the named tools, in the order given; an unknown name is a KeyError."""
        return [self._require(name).openai_tool() for name in names]

    def with_approval_overrides(self, overrides: Mapping[str, bool]) -> ToolRegistry:
        """A copy whose `requires_approval` flags are replaced by `overrides` (from settings).

        An override naming an unregistered tool is a ValueError: a misspelt name in settings
        must not silently leave a side-effecting tool unguarded.
        """
        unknown = sorted(set(overrides) - set(self._specs))
        if unknown:
            raise ValueError(f"approval overrides name unknown tools: {', '.join(unknown)}")
        return ToolRegistry(
            (
                dataclasses.replace(spec, requires_approval=overrides[spec.name], approval_rule=None) if spec.name in overrides else spec
                for spec in self._specs.values()
            ),
            providers=self._providers,
        )

    def requires_approval(self, name: str) -> bool:
        return self._require(name).requires_approval

    def _require(self, name: str) -> ToolSpec:
        spec = self.get(name)
        if spec is None:
            raise KeyError(f"no tool named {name!r} is registered")
        return spec
