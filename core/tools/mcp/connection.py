"""One MCP server: a long-lived task owns its `mcp` SDK session, takes calls from a queue, and reconnects with backoff.

The SDK's clients are async context managers whose task groups must be entered and left by one task,
so each server gets one task that holds the session for as long as it lives; tool calls reach that
task through a queue and come back through futures. The session is watched three ways: the server's
tool-list change notification (or, on 2026-07-28 connections, a `subscriptions/listen` stream), a
periodic tools listing that doubles as the health check, and calls that find the connection closed.
Any failure ends the session; the tools go away until a new one lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import mcp_types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError

from core.tools.mcp.config import HttpTransport, McpServerConfig, StdioTransport
from core.tools.registry import ToolError

log = logging.getLogger(__name__)

DEFAULT_HEALTH_INTERVAL_S = 15.0
DEFAULT_REQUEST_TIMEOUT_S = 10.0  # connecting, listing tools; a call has its own timeout
DEFAULT_BACKOFF_S = (1.0, 60.0)  # first retry, longest wait
MAX_TOOL_PAGES = 20
CALL_TIMEOUT_MARGIN_S = 5.0
HTTP_READ_TIMEOUT_S = 300.0  # a server may hold a response stream open while a tool runs

ConnectionState = Literal["connecting", "up", "down", "closed"]


@dataclass(frozen=True, kw_only=True)
class McpTool:
    """One tool as its server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only_hint: bool


@dataclass(kw_only=True)
class _Call:
    tool: str
    arguments: dict[str, Any]
    future: asyncio.Future[str]


class _Lost(Exception):
    """The session must be given up: the server closed the connection or stopped answering."""


class McpConnection:
    """The connection to one server, kept up by its own task; `tools` is empty unless it is up."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        on_change: Callable[[], None],
        call_timeout_s: float,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        health_interval_s: float = DEFAULT_HEALTH_INTERVAL_S,
        backoff_s: tuple[float, float] = DEFAULT_BACKOFF_S,
        protocol_mode: str = "auto",
    ) -> None:
        self.config = config
        self._on_change = on_change
        self._call_timeout_s = call_timeout_s
        self._request_timeout_s = request_timeout_s
        self._health_interval_s = health_interval_s
        self._backoff_s = backoff_s
        # "auto": the SDK asks the server which protocol it speaks and falls back to the initialize handshake.
        self._protocol_mode = protocol_mode
        self._state: ConnectionState = "connecting"
        self._tools: tuple[McpTool, ...] = ()
        self._error = ""
        self._calls: asyncio.Queue[_Call] = asyncio.Queue()
        self._check_now = asyncio.Event()
        self._attempted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def tools(self) -> tuple[McpTool, ...]:
        return self._tools if self._state == "up" else ()

    @property
    def error(self) -> str:
        """Why the server is down (empty while it is up)."""
        return self._error

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")

    async def wait_attempted(self, timeout_s: float) -> bool:
        """Wait until the first connection attempt ended, up or down; False if it is still going."""
        try:
            await asyncio.wait_for(self._attempted.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """The tool's text output; a ToolError (written for the model) when it fails or the server is down."""
        if self._state != "up":
            raise ToolError(f"the MCP server {self.name} is not connected, so its tools cannot be used right now")
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._calls.put_nowait(_Call(tool=tool, arguments=arguments, future=future))
        # Cancelled by the executor's timeout: the owner task sees the cancelled future and stops the call.
        return await future

    async def close(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._set_down("closed", "closed")
        self._state = "closed"

    # ----- the owner task -------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self._backoff_s[0]
        while not self._closing:
            was_up = False
            try:
                async with contextlib.AsyncExitStack() as stack:
                    client = await self._connect(stack)
                    self._set_up(await self._list_tools(client))
                    was_up = True
                    await self._serve(client)
            except asyncio.CancelledError:
                if self._closing:
                    raise
                # The SDK's own task group cancels this task when its transport fails; the cause was logged there.
                reason = "the connection was cancelled"
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    task.uncancel()
            except Exception as error:
                reason = _reason(error)
            else:  # pragma: no cover - _serve only returns by raising
                reason = "the session ended"
            if was_up:
                delay = self._backoff_s[0]
            self._set_down("down", reason)
            self._attempted.set()
            log.debug("MCP server %s: next connection attempt in %.1f s", self.name, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff_s[1])

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Client:
        transport = self.config.transport
        if isinstance(transport, StdioTransport):
            target: Any = StdioServerParameters(
                command=transport.command, args=list(transport.args), env=dict(transport.env) or None, cwd=transport.cwd
            )
        else:
            target = streamable_http_client(transport.url, http_client=await _http_client(stack, transport))
        client = Client(
            target,
            mode=self._protocol_mode,
            message_handler=self._on_message,
            read_timeout_seconds=self._request_timeout_s,
            cache=None,  # every listing asks the server: it is how a change or an outage is noticed
        )
        return await stack.enter_async_context(client)

    async def _list_tools(self, client: Client) -> tuple[McpTool, ...]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(_tool(item) for item in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    async def _serve(self, client: Client) -> None:
        """Run calls and watch the session until it fails; always ends by raising."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._take_calls(client, group))
            group.create_task(self._watch(client))
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                group.create_task(self._listen(client))

    async def _take_calls(self, client: Client, group: asyncio.TaskGroup) -> None:
        while True:
            call = await self._calls.get()
            if call.future.done():  # the caller gave up while it waited
                continue
            task = group.create_task(self._run_call(client, call))
            call.future.add_done_callback(lambda future, task=task: task.cancel() if future.cancelled() else None)

    async def _run_call(self, client: Client, call: _Call) -> None:
        try:
            # A little longer than the executor's timeout, which is the one that reports it.
            result = await client.call_tool(
                call.tool, call.arguments, read_timeout_seconds=self._call_timeout_s + CALL_TIMEOUT_MARGIN_S
            )
        except asyncio.CancelledError:
            _fail(call, ToolError(f"the MCP server {self.name} was disconnected during the call"))
            raise
        except MCPError as error:
            if error.code == mcp_types.CONNECTION_CLOSED:
                self._check_now.set()  # the watcher confirms and reconnects
                _fail(call, ToolError(f"the MCP server {self.name} closed the connection during the call"))
            else:
                _fail(call, ToolError(f"the MCP server {self.name} answered with an error: {error.message}"))
            return
        except Exception as error:
            _fail(call, ToolError(f"the MCP server {self.name} failed: {_reason(error)}"))
            return
        text = _result_text(result)
        if result.is_error:
            _fail(call, ToolError(text or f"{call.tool} failed on the MCP server {self.name}"))
        elif not call.future.done():
            call.future.set_result(text)

    async def _watch(self, client: Client) -> None:
        """List the tools on a change notice, on a failed call's hint, and every health interval."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), self._health_interval_s)
            self._check_now.clear()
            try:
                tools = await self._list_tools(client)
            except Exception as error:
                raise _Lost(f"it stopped answering ({_reason(error)})") from error
            if tools != self._tools:
                self._set_up(tools)

    async def _listen(self, client: Client) -> None:
        """On 2026-07-28 connections, change notices come on a listen stream; its loss means the server is gone."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._check_now.set()
        except (ListenNotSupportedError, MCPError) as error:
            # The server serves no subscriptions: the periodic listing still sees changes.
            log.debug("MCP server %s: no change subscription (%s)", self.name, _reason(error))
            return
        except Exception as error:
            raise _Lost(f"its change stream was lost ({_reason(error)})") from error
        # A graceful end (the server is stopping, say): look now whether it is still there.
        self._check_now.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._check_now.set()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: transport error: %s", self.name, _reason(message))

    # ----- state ----------------------------------------------------------------------------------

    def _set_up(self, tools: tuple[McpTool, ...]) -> None:
        first = self._state != "up"
        self._state, self._tools, self._error = "up", tools, ""
        self._attempted.set()
        if first:
            log.info("MCP server %s (%s) connected: %d tools", self.name, self.config.describe(), len(tools))
        else:
            log.info("MCP server %s changed its tools: now %d", self.name, len(tools))
        self._on_change()

    def _set_down(self, state: ConnectionState, reason: str) -> None:
        was = self._state
        self._state, self._tools, self._error = state, (), reason
        while not self._calls.empty():
            _fail(self._calls.get_nowait(), ToolError(f"the MCP server {self.name} is not connected"))
        if state == "down" and was in ("up", "connecting"):
            # One line per outage (retries log at debug): the answers go on without these tools.
            log.warning("MCP server %s (%s) is down: %s; its tools are unavailable until it reconnects",
                        self.name, self.config.describe(), reason)
        if was == "up":
            self._on_change()


async def _http_client(stack: contextlib.AsyncExitStack, transport: HttpTransport) -> httpx2.AsyncClient:
    client = httpx2.AsyncClient(
        headers=dict(transport.headers), timeout=httpx2.Timeout(DEFAULT_REQUEST_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S)
    )
    return await stack.enter_async_context(client)


def _tool(item: mcp_types.Tool) -> McpTool:
    annotations = item.annotations
    return McpTool(
        name=item.name,
        description=item.description or item.title or "",
        input_schema=dict(item.input_schema),
        read_only_hint=bool(annotations is not None and annotations.read_only_hint),
    )


def _result_text(result: mcp_types.CallToolResult) -> str:
    """The text a model reads: text parts as they are; other parts named; structured content as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} omitted]")
    if not any(isinstance(block, mcp_types.TextContent) for block in result.content) and result.structured_content:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _fail(call: _Call, error: ToolError) -> None:
    if not call.future.done():
        call.future.set_exception(error)


def _reason(error: BaseException) -> str:
    """A short cause for a log line: the innermost of an exception group, type and message."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, _Lost):
        return str(error)
    if isinstance(error, MCPError):
        return error.message
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
