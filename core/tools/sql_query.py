"""sql_query: one read-only SQL statement on a configured database, answered as a compact table.

Read-only by construction, so it needs no approval: the statement must pass sql_guard (a real
Postgres parse; only reads, no denied functions), then runs in a READ ONLY transaction with a
statement timeout that is always rolled back, its rows fetched through a server-side cursor up to
the cap. A superuser role is refused unless settings allow it: a superuser could undo any of this.

Memory is capped in SQL too: the statement is wrapped (sql_caps) so no value brings more than its
byte cap over the wire, and rows stop being fetched once the result passes its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.adapt import Buffer, Loader
from psycopg.types.string import TextLoader

from core.config import Settings
from core.redact import error_reason
from core.tokens import TokenCounter
from core.tools.context import ToolContext
from core.tools.registry import DEFAULT_MAX_OUTPUT_CHARS, ToolError, ToolSpec
from core.tools.sql_caps import MIN_VALUE_BYTES, WrapError, capped_statement
from core.tools.sql_guard import Allowed, check_sql
from core.tools.sql_schema import describe_schema, read_schema
from core.tools.sql_table import QueryResult, format_table

log = logging.getLogger(__name__)

TOOL_NAME = "sql_query"
CURSOR_NAME = "relaybot_sql_query"
DESCRIBE_CURSOR_NAME = "relaybot_sql_describe"
APPLICATION_NAME = "relaybot sql_query"
# libpq counts connect_timeout in whole seconds and treats anything under 2 as 2.
MIN_CONNECT_TIMEOUT_S = 2
# The executor's own deadline comes after the database's statement timeout and the connection's,
# so the database cancels a slow query itself and the model reads why.
TOOL_TIMEOUT_MARGIN_S = 5.0
BOOL_OID = 16
SUPERUSER_QUERY = "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user"


@dataclass(frozen=True, kw_only=True)
class SqlQueryConfig:
    """Where sql_query connects and its limits (from the SQL_QUERY_* settings)."""

    dsn: str
    allow_superuser: bool = False
    max_rows: int = 100
    timeout_s: float = 5.0
    schema_tokens: int = 1500
    max_value_bytes: int = 1000
    max_result_bytes: int = 100_000

    @classmethod
    def from_settings(cls, settings: Settings) -> SqlQueryConfig | None:
        """The config, or None when SQL_QUERY_DSN is unset (then the tool does not exist)."""
        if not settings.sql_query_dsn:
            return None
        return cls(
            dsn=settings.sql_query_dsn,
            allow_superuser=settings.sql_query_allow_superuser,
            max_rows=settings.sql_query_max_rows,
            timeout_s=settings.sql_query_timeout_s,
            schema_tokens=settings.sql_query_schema_tokens,
            max_value_bytes=settings.sql_query_max_value_bytes,
            max_result_bytes=settings.sql_query_max_result_bytes,
        )

    @property
    def connect_timeout_s(self) -> int:
        return max(MIN_CONNECT_TIMEOUT_S, round(self.timeout_s))


class _BoolText(Loader):
    """Booleans as true/false rather than Postgres's t/f, which a model may misread."""

    def load(self, data: Buffer) -> str:
        return "true" if bytes(data) == b"t" else "false"


@asynccontextmanager
async def read_only_session(config: SqlQueryConfig) -> AsyncIterator[AsyncConnection[Any]]:
    """A new connection inside BEGIN READ ONLY with the statement timeout; rolled back and closed at the end.

    Values load as Postgres's own text (never a Python type that can fail, like 'infinity' dates).
    """
    try:
        conn = await AsyncConnection.connect(
            config.dsn, autocommit=True, connect_timeout=config.connect_timeout_s, application_name=APPLICATION_NAME
        )
    except psycopg.Error as error:
        # The reason may name the host; it never carries the DSN's password (error_reason masks it).
        log.warning("sql_query: cannot connect to SQL_QUERY_DSN: %s", error_reason(error, url=config.dsn))
        raise ToolError("the database cannot be reached right now; try again later.") from None
    async with conn:
        for info in psycopg.postgres.types:
            for oid in (info.oid, getattr(info, "array_oid", 0)):
                if oid:
                    conn.adapters.register_loader(oid, TextLoader)
        conn.adapters.register_loader(BOOL_OID, _BoolText)
        await conn.execute("BEGIN READ ONLY")
        # Integers only are formatted in, never text from the model.
        await conn.execute(f"SET LOCAL statement_timeout = {max(1, round(config.timeout_s * 1000))}")
        # The statement was parsed with standard strings; the server must read its quotes the same way.
        await conn.execute("SET LOCAL standard_conforming_strings = on")
        try:
            yield conn
        finally:
            # Nothing is ever kept; closing would roll back too, this just says so. A broken or
            # still-busy connection (a cancelled call) is closed by `async with` all the same.
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                pass


async def is_superuser(conn: AsyncConnection[Any]) -> bool:
    cursor = await conn.execute(SUPERUSER_QUERY)
    row = await cursor.fetchone()
    return bool(row and row[0] == "true")


def superuser_refusal() -> str:
    return (
        "sql_query refuses to run: its database role is a superuser, which can get around a read-only check. "
        "The bot's operator should connect SQL_QUERY_DSN as a read-only role (or set SQL_QUERY_ALLOW_SUPERUSER=true)."
    )


async def run_query(config: SqlQueryConfig, sql: str, *, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> str:
    """The rows of one allowed statement as a table; a ToolError with a sentence for anything refused or failed."""
    verdict = check_sql(sql)
    if not isinstance(verdict, Allowed):
        raise ToolError(f"refused, nothing was run: {verdict.reason}")
    async with read_only_session(config) as conn:
        if not config.allow_superuser and await is_superuser(conn):
            raise ToolError(superuser_refusal())
        try:
            result = await fetch_result(conn, verdict, config=config)
        except psycopg.errors.QueryCanceled:
            raise ToolError(
                f"the query was stopped after the {config.timeout_s:g} s statement timeout; "
                "nothing changed. Narrow it (WHERE, LIMIT) or aggregate."
            ) from None
        except psycopg.errors.ReadOnlySqlTransaction as error:
            raise ToolError(f"refused by the database (read-only transaction), nothing changed: {_message(error)}") from None
        except psycopg.OperationalError as error:
            log.warning("sql_query: the connection failed: %s", error_reason(error, url=config.dsn))
            raise ToolError("the connection to the database failed during the query; try again later.") from None
        except psycopg.Error as error:
            # Syntax, unknown column, permission denied…: the database's sentence lets the model correct the SQL.
            raise ToolError(f"the database refused the query: {_message(error)}") from None
    return format_table(result, max_rows=config.max_rows, max_chars=max_chars)


async def fetch_result(conn: AsyncConnection[Any], verdict: Allowed, *, config: SqlQueryConfig) -> QueryResult:
    """At most max_rows rows of the statement, each value at most its byte cap, the rows stopped past the result's."""
    cap = config.max_rows
    if verdict.explain:
        # EXPLAIN cannot be a cursor's query (DECLARE takes a SELECT or VALUES); its plan is a few rows, each
        # line as long as the statement's text allows at most.
        async with conn.cursor() as cursor:
            await cursor.execute(verdict.sql)
            records = await cursor.fetchmany(cap + 1)
            columns = tuple(column.name for column in cursor.description or ())
        return QueryResult(columns=columns, rows=tuple(tuple(r) for r in records[:cap]), more=len(records) > cap)
    # Declaring a cursor plans the statement and names its columns without producing a row.
    async with conn.cursor(name=DESCRIBE_CURSOR_NAME) as cursor:
        await cursor.execute(verdict.sql)
        columns = tuple(column.name for column in cursor.description or ())
    if not columns:
        async with conn.cursor(name=CURSOR_NAME) as cursor:
            await cursor.execute(verdict.sql)
            records = await cursor.fetchmany(cap + 1)
        return QueryResult(columns=(), rows=tuple(() for _ in records[:cap]), more=len(records) > cap)
    # Each value gets at most an equal share of the result's cap, so one row never passes it alone.
    value_bytes = max(MIN_VALUE_BYTES, min(config.max_value_bytes, config.max_result_bytes // len(columns)))
    try:
        sql = capped_statement(verdict.sql, columns=len(columns), value_bytes=value_bytes)
    except WrapError:
        raise ToolError("refused, nothing was run: the statement could not be wrapped to cap its values.") from None
    return await _fetch_capped(conn, sql, columns=columns, value_bytes=value_bytes, config=config)


async def _fetch_capped(
    conn: AsyncConnection[Any], sql: str, *, columns: tuple[str, ...], value_bytes: int, config: SqlQueryConfig
) -> QueryResult:
    """The capped statement's rows through a server-side cursor: the database produces only the rows fetched,
    never the whole result; each batch is as many rows as the bytes left could hold at their largest."""
    cap = config.max_rows
    row_bytes = value_bytes * len(columns)
    rows: list[tuple[str | None, ...]] = []
    cut: set[int] = set()
    used = 0
    stopped_at_bytes = more = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.timeout_s
    async with conn.cursor(name=CURSOR_NAME) as cursor:
        await cursor.execute(sql)
        while True:
            if used >= config.max_result_bytes:
                stopped_at_bytes = True
                break
            if rows:
                # Each FETCH is a statement with a timeout of its own: together they get the query's.
                left_ms = max(1, round((deadline - loop.time()) * 1000))
                await conn.execute(f"SET LOCAL statement_timeout = {left_ms}")
            batch = max(1, min(cap + 1 - len(rows), (config.max_result_bytes - used) // row_bytes))
            records = await cursor.fetchmany(batch)
            for record in records:
                values = record[0::2]
                cut.update(index for index, flag in enumerate(record[1::2]) if flag == "true")
                used += sum(len(value.encode("utf-8")) for value in values if value is not None)
                rows.append(tuple(values))
            if len(rows) > cap:
                more = True
                break
            if len(records) < batch:
                break
    return QueryResult(
        columns=columns,
        rows=tuple(rows[:cap]),
        more=more,
        cut_columns=tuple(columns[index] for index in sorted(cut)),
        value_cap_bytes=value_bytes,
        stopped_at_bytes=config.max_result_bytes if stopped_at_bytes else None,
    )


def _message(error: psycopg.Error) -> str:
    primary = error.diag.message_primary or next(iter(str(error).splitlines()), "") or type(error).__name__
    return primary.rstrip(".") + "."


def describe_tool(config: SqlQueryConfig, schema: str) -> str:
    return (
        "Run one read-only SQL query (PostgreSQL) on the team's database and get the rows back as a table. "
        "Only one SELECT, WITH … SELECT, VALUES, TABLE or EXPLAIN (without ANALYZE) per call; writes, DDL, "
        f"COPY and functions that touch files, settings or other sessions are refused. At most {config.max_rows} "
        f"rows come back, each value cut to {config.max_value_bytes} bytes, and a query stops after "
        f"{config.timeout_s:g} s, so aggregate in SQL (count, sum, GROUP BY) rather than fetching rows to count them.\n"
        f"Tables (schema.table: column type \"comment\"):\n{schema}"
    )


def sql_query_spec(config: SqlQueryConfig, *, schema: str) -> ToolSpec:
    """The tool, its description carrying `schema` (see describe_schema)."""

    async def run(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        return await run_query(config, arguments["sql"])

    return ToolSpec(
        name=TOOL_NAME,
        description=describe_tool(config, schema),
        parameters={
            "type": "object",
            "properties": {
                "sql": {"type": "string", "minLength": 1, "description": "One PostgreSQL SELECT statement."},
            },
            "required": ["sql"],
            "additionalProperties": False,
        },
        run=run,
        # Read-only by construction (see the module docstring); settings may still require approval.
        requires_approval=False,
        timeout_s=config.timeout_s + config.connect_timeout_s + TOOL_TIMEOUT_MARGIN_S,
    )


async def sql_query_tool(config: SqlQueryConfig, *, counter: TokenCounter) -> ToolSpec:
    """The tool with the database's schema read now; if it cannot be read, the model is told where to look."""
    try:
        async with read_only_session(config) as conn:
            if not config.allow_superuser and await is_superuser(conn):
                log.warning("sql_query: the SQL_QUERY_DSN role is a superuser; every query will be refused")
                return sql_query_spec(config, schema=superuser_refusal())
            tables = await read_schema(conn)
    except (ToolError, psycopg.Error) as error:
        reason = str(error) if isinstance(error, ToolError) else error_reason(error, url=config.dsn)
        log.warning("sql_query: cannot read the schema: %s", reason)
        return sql_query_spec(
            config, schema="(not read when the bot started; query information_schema.columns to see the tables)"
        )
    return sql_query_spec(config, schema=describe_schema(tables, budget_tokens=config.schema_tokens, counter=counter))
