"""Turns the model's tool calls into tool results: parse and validate, run with a timeout, cap the output.

Nothing here raises for a bad call or a failing tool: every problem becomes a `ToolResult` with
status "error" whose output is a sentence the model can act on, so the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from core import metrics
from core.llm.results import ToolCallRequest
from core.tools.approval_policy import ToolApprovals
from core.tools import schemas
from core.tools.context import ToolContext
from core.tools.registry import DEFAULT_MAX_OUTPUT_CHARS, ToolError, ToolRegistry, ToolSpec

logger = logging.getLogger(__name__)

# Error sentences quote the offending detail; this keeps a huge argument from flooding the context.
MAX_ERROR_DETAIL_CHARS = 300
TRUNCATION_MARKER = "\n… [{omitted} characters omitted] …\n"

ToolResultStatus = Literal["ok", "error", "rejected"]


@dataclass(frozen=True, kw_only=True)
class ParsedCall:
    """A tool call whose tool exists and whose arguments are a JSON object matching its schema."""

    call: ToolCallRequest
    spec: ToolSpec
    arguments: dict[str, Any]
    # Set by `ToolExecutor.needs_approval` when the approval rule itself failed: `run` answers with it.
    failed_check: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """What the model reads back for one call, and what `ToolCallFinished` reports."""

    call_id: str
    tool: str
    status: ToolResultStatus
    output: str
    arguments: dict[str, Any]


def truncate_middle(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars`, keeping its start and end (where answers and totals live)."""
    if len(text) <= max_chars:
        return text
    # The marker's length depends on the count it reports, which depends on its length: settle it.
    marker = ""
    for _ in range(4):
        candidate = TRUNCATION_MARKER.format(omitted=len(text) - max(max_chars - len(marker), 0))
        settled = len(candidate) == len(marker)
        marker = candidate
        if settled:
            break
    keep = max_chars - len(marker)
    if keep <= 0:
        return text[:max_chars]
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def _short(detail: str) -> str:
    return truncate_middle(detail, MAX_ERROR_DETAIL_CHARS)


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


class ToolExecutor:
    """Parses, decides which calls need approval (admin policy, then the tool's rule and flag), and runs
    tool calls against one `ToolRegistry`."""

    def __init__(self, registry: ToolRegistry, *, approvals: ToolApprovals | None = None) -> None:
        self._registry = registry
        self._approvals = approvals or ToolApprovals()

    @property
    def registry(self) -> ToolRegistry:
        return self._registry

    def parse(self, call: ToolCallRequest, *, offered: Collection[str] | None = None) -> ParsedCall | ToolResult:
        """A `ParsedCall`, or an error `ToolResult` telling the model what to fix.

        `offered` limits the call to the tools this run handed the model: a model that calls a
        registered tool it was not offered gets the same answer as for an unknown one.
        """
        spec = self._offered_spec(call, offered)
        if isinstance(spec, ToolResult):
            return spec
        arguments = self._arguments_object(call, spec)
        if isinstance(arguments, ToolResult):
            return arguments
        problem = schemas.arguments_problem(spec.validator, arguments)
        if problem:
            return self._error(
                call,
                arguments,
                f"Error: arguments for {spec.name} {_short(problem)}. "
                "Call the tool again with arguments that match the schema.",
            )
        return ParsedCall(call=call, spec=spec, arguments=arguments)

    def _offered_spec(self, call: ToolCallRequest, offered: Collection[str] | None) -> ToolSpec | ToolResult:
        """The called tool's spec, when it exists and this run offered it; else the error the model reads."""
        spec = self._registry.get(call.name)
        if spec is None and offered is not None and call.name in offered:
            # Offered earlier in this run (or before its pause), gone since: an MCP server went down.
            return self._error(
                call,
                {},
                f"Error: the tool {_short(call.name)!r} is not available right now (its server is not connected). "
                "Answer without it, or say it could not be used.",
            )
        if spec is None or (offered is not None and call.name not in offered):
            available = sorted(offered) if offered is not None else list(self._registry.names())
            listing = ", ".join(available) if available else "none"
            return self._error(
                call,
                {},
                f"Error: there is no tool named {_short(call.name)!r}. Available tools: {listing}.",
            )
        return spec

    def _arguments_object(self, call: ToolCallRequest, spec: ToolSpec) -> dict[str, Any] | ToolResult:
        """The call's arguments as a JSON object within the size and depth limits; else the error the model reads."""
        raw = call.arguments.strip()
        if len(raw) > schemas.MAX_ARGUMENT_CHARS:
            return self._error(
                call,
                {},
                f"Error: arguments for {spec.name} are {len(raw)} characters long; at most "
                f"{schemas.MAX_ARGUMENT_CHARS} are accepted. Call the tool again with shorter arguments.",
            )
        if not raw:
            # Some models send an empty string for a call without arguments.
            arguments: Any = {}
        else:
            try:
                arguments = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                # ValueError: bad JSON, or an integer past Python's digit limit; RecursionError: nested too deep.
                detail = str(exc) if isinstance(exc, ValueError) else "it is nested too deeply"
                return self._error(
                    call,
                    {},
                    f"Error: arguments for {spec.name} are not valid JSON: {_short(detail)}. "
                    "Call the tool again with valid JSON.",
                )
        if not isinstance(arguments, dict):
            return self._error(
                call,
                {},
                f"Error: arguments for {spec.name} must be a JSON object, not {type(arguments).__name__}. "
                "Call the tool again with a JSON object.",
            )
        if schemas.depth_over(arguments, schemas.MAX_ARGUMENT_DEPTH):
            return self._error(
                call,
                {},
                f"Error: arguments for {spec.name} are nested deeper than {schemas.MAX_ARGUMENT_DEPTH} levels. "
                "Call the tool again with flatter arguments.",
            )
        return arguments

    @property
    def approvals(self) -> ToolApprovals:
        return self._approvals

    def needs_approval(self, parsed: ParsedCall, ctx: ToolContext) -> bool:
        """Whether the call waits for a person; a rule that raised counts as "no" (see `decide`)."""
        return self.decide(parsed, ctx) is True

    def decide(self, parsed: ParsedCall, ctx: ToolContext) -> bool | ToolResult:
        """The one place that decides whether a call waits for a person (core/tools/approval_policy.py).

        A rule that raises (a tool's own rule on arguments it did not expect) fails only this call: its error
        result comes back instead of a verdict, and the tool is not run."""
        try:
            verdict = self._approvals.decide(parsed.spec, parsed.arguments, ctx)
        except Exception as exc:
            logger.exception("tool %s (call %s): the approval rule failed", parsed.name, parsed.id)
            problem = (
                f"Error: {parsed.name} was not run: whether it needs approval could not be decided for these "
                f"arguments ({_short(str(exc) or type(exc).__name__)}). Call it again with different arguments, "
                "or answer without it."
            )
            # Kept on the call too, so a later `run` of it (however it gets there) answers the same error.
            parsed.failed_check.append(problem)
            return self._result(parsed, "error", problem)
        logger.debug("tool %s (call %s): %s (%s)", parsed.name, parsed.id,
                     "needs approval" if verdict.needs_approval else "no approval", verdict.reason)
        return verdict.needs_approval

    async def run(self, parsed: ParsedCall, ctx: ToolContext) -> ToolResult:
        """Run the tool under its timeout; failures become error results, the output is capped.

        Every run writes one audit line (who, which tool, how it ended) and counts in the tool metrics."""
        started = time.monotonic()
        outcome = "cancelled"  # unless it returns
        try:
            result, outcome = await self._run(parsed, ctx)
        finally:
            elapsed_s = time.monotonic() - started
            logger.info(
                "tool run: %s (call %s) for %s ended %s after %.2f s",
                parsed.name, parsed.id, ctx.user_name or ctx.user, outcome, elapsed_s,
                extra={"audit": "tool_run", "tool": parsed.name, "call_id": parsed.id, "user": ctx.user,
                       "user_name": ctx.user_name, "outcome": outcome, "duration_s": round(elapsed_s, 3)},
            )
            metrics.record_tool_run(tool=parsed.name, outcome=outcome)
        return result

    async def _run(self, parsed: ParsedCall, ctx: ToolContext) -> tuple[ToolResult, str]:
        """The result, and how the run ended: ok, error (the tool said so), timeout or crashed."""
        spec = parsed.spec
        if parsed.failed_check:
            return self._result(parsed, "error", parsed.failed_check[0]), "error"
        deadline = asyncio.timeout(spec.timeout_s)
        try:
            async with deadline:
                output = await spec.run(ctx, dict(parsed.arguments))
        except ToolError as exc:
            logger.info("tool %s (call %s) reported: %s", spec.name, parsed.id, exc)
            return self._result(parsed, "error", f"Error: {_short(str(exc) or type(exc).__name__)}"), "error"
        except Exception as exc:
            # A TimeoutError raised inside the tool (its own HTTP timeout, say) is a failure, not ours.
            if isinstance(exc, TimeoutError) and deadline.expired():
                logger.warning("tool %s (call %s) timed out after %s s", spec.name, parsed.id, spec.timeout_s)
                return self._result(
                    parsed, "error", f"Error: {spec.name} timed out after {_format_seconds(spec.timeout_s)} s."
                ), "timeout"
            # The traceback is for operators; the model only needs what went wrong.
            logger.exception("tool %s (call %s) failed", spec.name, parsed.id)
            detail = str(exc) or type(exc).__name__
            return self._result(parsed, "error", f"Error: {spec.name} failed: {_short(detail)}"), "crashed"
        if not isinstance(output, str):
            logger.error("tool %s returned %s instead of str", spec.name, type(output).__name__)
            return self._result(parsed, "error", f"Error: {spec.name} failed: it returned no text."), "crashed"
        return self._result(parsed, "ok", output), "ok"

    def rejected(self, call: ToolCallRequest | ParsedCall, comment: str | None = None) -> ToolResult:
        """The result the model reads for a call the user declined, with their comment if any."""
        output = "The user declined this tool call."
        if comment and comment.strip():
            output = f"The user declined this tool call: {comment.strip()}"
        if isinstance(call, ParsedCall):
            return self._result(call, "rejected", output)
        spec = self._registry.get(call.name)
        return ToolResult(
            call_id=call.id,
            tool=call.name,
            status="rejected",
            output=truncate_middle(output, spec.max_output_chars if spec else DEFAULT_MAX_OUTPUT_CHARS),
            arguments=_arguments_or_empty(call.arguments),
        )

    def _result(self, parsed: ParsedCall, status: ToolResultStatus, output: str) -> ToolResult:
        return ToolResult(
            call_id=parsed.id,
            tool=parsed.name,
            status=status,
            output=truncate_middle(output, parsed.spec.max_output_chars),
            arguments=parsed.arguments,
        )

    def _error(self, call: ToolCallRequest, arguments: dict[str, Any], output: str) -> ToolResult:
        return ToolResult(call_id=call.id, tool=call.name, status="error", output=output, arguments=arguments)


def _arguments_or_empty(raw: str) -> dict[str, Any]:
    if len(raw) > schemas.MAX_ARGUMENT_CHARS:
        return {}
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # bad JSON, an integer past the digit limit, or nested too deep
        return {}
    return value if isinstance(value, dict) else {}
