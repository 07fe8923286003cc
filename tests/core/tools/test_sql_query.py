"""sql_query against the embedded Postgres (whose role is a superuser): reads answer as tables, everything else is
refused or stopped, and the database is checked unchanged after each."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from bot.runtime import add_sql_query
from core.config import SettingsError, load_settings
from core.events import Done
from core.store.db import Database
from core.tokens import get_token_counter
from core.tools import ToolError, ToolRegistry, builtin_registry
from core.tools.sql_caps import WrapError, capped_statement
from core.tools.sql_guard import Allowed, Refused, check_sql
from core.tools.sql_query import SqlQueryConfig, fetch_result, read_only_session, run_query, sql_query_tool
from core.tools.sql_schema import describe_schema, read_schema
from tests.core.engine.support import events_of, request
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.engine import make_engine
from tests.support.engine import test_settings as engine_settings

SHOP_SETUP = """
CREATE TABLE orders (id integer PRIMARY KEY, customer text, total numeric(10,2), paid boolean, placed date);
COMMENT ON TABLE orders IS 'Customer orders';
COMMENT ON COLUMN orders.total IS 'in euros';
INSERT INTO orders VALUES (1, 'Ada', 12.50, true, '2026-01-05'), (2, 'Bo', 7.00, false, NULL),
                          (3, 'Cy|d', 30.25, true, 'infinity');
CREATE TABLE events (n integer);
INSERT INTO events SELECT generate_series(1, 250);
CREATE TABLE notes (body text);
INSERT INTO notes VALUES (repeat('x', 500)), (E'two\\nlines');
CREATE VIEW paid_orders AS SELECT * FROM orders WHERE paid;
-- A value that takes a while: the guard does not know it sleeps.
CREATE FUNCTION slow_value(n integer) RETURNS text LANGUAGE sql AS 'SELECT pg_sleep(0.05)::text || n';
-- A write the guard does not know about: only the READ ONLY transaction stops it.
CREATE FUNCTION bump() RETURNS integer LANGUAGE sql AS 'UPDATE orders SET total = total + 1 RETURNING 1';
CREATE SCHEMA private;
CREATE TABLE private.keys (k text);
"""

# Everything the refused statements below would change if they ran.
STATE_QUERY = """
SELECT (SELECT md5(string_agg(o::text, ',' ORDER BY o.id)) FROM orders o),
       (SELECT count(*) FROM events),
       (SELECT string_agg(table_schema || '.' || table_name, ',' ORDER BY 1, 2) FROM information_schema.tables
         WHERE table_schema NOT IN ('pg_catalog', 'information_schema')),
       (SELECT count(*) FROM pg_largeobject_metadata)
"""


def _database_url(admin_url: str, name: str) -> str:
    return re.sub(r"/postgres\?", f"/{name}?", admin_url, count=1)


@pytest.fixture(scope="module")
def shop_url(pg_server: str) -> Iterator[str]:
    """A database of the team's own, separate from relaybot's, for sql_query to read."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _database_url(pg_server, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SHOP_SETUP)
    yield url
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def reader_url(shop_url: str) -> Iterator[str]:
    """The same database as the README recommends reaching it: a login role that may only SELECT, and not everything."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(shop_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT ON orders, events, paid_orders TO {role}")
    yield re.sub(r"//postgres:", f"//{role}:", shop_url, count=1)
    with psycopg.connect(shop_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def _config(url: str, **overrides: object) -> SqlQueryConfig:
    values: dict[str, object] = {"dsn": url, "allow_superuser": True, "max_rows": 100, "timeout_s": 5.0}
    values.update(overrides)
    return SqlQueryConfig(**values)  # type: ignore[arg-type]


def _state(url: str) -> tuple[object, ...]:
    with psycopg.connect(url) as conn:
        row = conn.execute(STATE_QUERY).fetchone()
    assert row is not None
    return tuple(row)


async def test_a_count_comes_back_as_a_table(shop_url: str) -> None:
    assert await run_query(_config(shop_url), "SELECT count(*) FROM orders") == "count\n3\n(1 row)"


async def test_values_are_shown_as_postgres_writes_them_on_one_line_each(shop_url: str) -> None:
    table = await run_query(_config(shop_url), "SELECT id, customer, total, paid, placed FROM orders ORDER BY id")
    assert table.splitlines() == [
        "id | customer | total | paid | placed",
        "1 | Ada | 12.50 | true | 2026-01-05",
        "2 | Bo | 7.00 | false | NULL",
        "3 | Cy\\|d | 30.25 | true | infinity",
        "(3 rows)",
    ]
    notes = (await run_query(_config(shop_url), "SELECT body FROM notes ORDER BY length(body) DESC")).splitlines()
    assert notes[1] == "x" * 199 + "…"
    assert notes[2] == "two\\nlines"


async def test_rows_stop_at_the_cap_with_a_note(shop_url: str) -> None:
    table = await run_query(_config(shop_url, max_rows=100), "SELECT n FROM events ORDER BY n")
    lines = table.splitlines()
    assert lines[1] == "1" and lines[100] == "100" and len(lines) == 102
    assert "cut at 100 rows" in lines[-1]
    assert "cut" not in await run_query(_config(shop_url, max_rows=100), "SELECT n FROM events WHERE n <= 100")


async def test_rows_stop_early_when_the_output_would_be_too_long(shop_url: str) -> None:
    table = await run_query(_config(shop_url), "SELECT repeat('y', 150) FROM events", max_chars=2000)
    assert len(table) <= 2000
    assert "rows to fit the output" in table.splitlines()[-1]


async def test_explain_shows_the_plan_without_running_the_statement(shop_url: str) -> None:
    table = await run_query(_config(shop_url), "EXPLAIN SELECT * FROM orders")
    assert table.startswith("QUERY PLAN\nSeq Scan on orders")


async def test_the_database_reason_comes_back_so_the_model_can_fix_its_sql(shop_url: str) -> None:
    with pytest.raises(ToolError, match='column "nope" does not exist'):
        await run_query(_config(shop_url), "SELECT nope FROM orders")


REFUSED = [
    "DELETE FROM orders",
    "UPDATE orders SET total = 0; SELECT 1",
    "UPDATE orders SET total = 0",
    "INSERT INTO orders VALUES (9, 'Eve', 1, true, NULL)",
    "CREATE TABLE stolen (a integer)",
    "DROP TABLE orders",
    "TRUNCATE events",
    "SELECT * INTO copy_of_orders FROM orders",
    "WITH d AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM d",
    "SELECT * FROM orders FOR UPDATE",
    "EXPLAIN ANALYZE DELETE FROM orders",
    "DO $$ BEGIN DELETE FROM orders; END $$",
    "COMMIT",
    "SET ROLE NONE",
    "SELECT set_config('transaction_read_only', 'off', true)",
    "SELECT pg_read_file('/etc/hostname')",
    "SELECT ('/etc/hostname'::text).pg_read_file",
    "SELECT lo_import('/etc/hostname')",
    "SELECT query_to_xml('DELETE FROM orders RETURNING 1', true, true, '')",
    "SELECT pg_sleep(60)",
]


@pytest.mark.parametrize("sql", REFUSED)
async def test_writes_ddl_and_escapes_are_refused_and_change_nothing(shop_url: str, sql: str) -> None:
    before = _state(shop_url)
    with pytest.raises(ToolError, match="^refused, nothing was run: .+\\.$"):
        await run_query(_config(shop_url), sql)
    assert _state(shop_url) == before


async def test_copy_to_program_is_refused_and_runs_no_program(shop_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ToolError, match="COPY is refused"):
        await run_query(_config(shop_url), f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'")
    assert not marker.exists()


async def test_pg_terminate_backend_is_refused_and_the_other_session_lives(shop_url: str) -> None:
    with psycopg.connect(shop_url) as other:
        pid = other.info.backend_pid
        with pytest.raises(ToolError, match="pg_terminate_backend"):
            await run_query(_config(shop_url), f"SELECT pg_terminate_backend({pid})")
        assert other.execute("SELECT 1").fetchone() == (1,)


async def test_a_write_the_guard_cannot_see_is_stopped_by_the_read_only_transaction(shop_url: str) -> None:
    before = _state(shop_url)
    with pytest.raises(ToolError, match="read-only transaction"):
        await run_query(_config(shop_url), "SELECT bump()")
    assert _state(shop_url) == before


async def test_the_session_itself_is_read_only(shop_url: str) -> None:
    before = _state(shop_url)
    async with read_only_session(_config(shop_url)) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await conn.execute("DELETE FROM orders")
    assert _state(shop_url) == before


async def test_a_query_that_never_ends_is_cut_by_the_statement_timeout(shop_url: str) -> None:
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    with pytest.raises(ToolError, match="stopped after the 0.5 s statement timeout"):
        await run_query(_config(shop_url, timeout_s=0.5), endless)


async def test_a_superuser_role_is_refused_unless_allowed(shop_url: str) -> None:
    config = _config(shop_url, allow_superuser=False)
    with pytest.raises(ToolError, match="superuser"):
        await run_query(config, "SELECT count(*) FROM orders")
    spec = await sql_query_tool(config, counter=get_token_counter(None))
    assert "superuser" in spec.description and "orders" not in spec.description


async def test_a_read_only_role_needs_no_setting_and_sees_only_what_it_was_granted(reader_url: str) -> None:
    config = _config(reader_url, allow_superuser=False)
    assert await run_query(config, "SELECT count(*) FROM paid_orders") == "count\n2\n(1 row)"
    with pytest.raises(ToolError, match="permission denied"):
        await run_query(config, "SELECT * FROM notes")
    spec = await sql_query_tool(config, counter=get_token_counter(None))
    assert "public.orders" in spec.description and "public.paid_orders (view)" in spec.description
    assert "notes" not in spec.description and "private.keys" not in spec.description


async def test_the_schema_is_described_with_types_and_comments(shop_url: str) -> None:
    spec = await sql_query_tool(_config(shop_url), counter=get_token_counter(None))
    assert (
        'public.orders "Customer orders": id integer, customer text, total numeric(10,2) "in euros", '
        "paid boolean, placed date"
    ) in spec.description
    assert "private.keys: k text" in spec.description
    assert spec.requires_approval is False
    assert spec.timeout_s > 5.0  # the database's statement timeout fires first
    assert "each value cut to 1000 bytes" in spec.description


async def test_the_schema_is_cut_to_its_token_budget_with_a_note(shop_url: str) -> None:
    counter = get_token_counter(None)
    async with read_only_session(_config(shop_url)) as conn:
        tables = await read_schema(conn)
    description = describe_schema(tables, budget_tokens=40, counter=counter)
    assert counter.count(description) <= 40
    assert re.search(r"… and \d+ more tables, not listed for space", description)
    assert describe_schema(tables, budget_tokens=10_000, counter=counter).count("\n") == len(tables) - 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_database_is_a_sentence_and_the_password_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = f"postgresql://reader:s3cret-pass@127.0.0.1:{_closed_port()}/shop"
    config = _config(dsn)
    with caplog.at_level(logging.WARNING):
        with pytest.raises(ToolError, match="cannot be reached"):
            await run_query(config, "SELECT 1")
        spec = await sql_query_tool(config, counter=get_token_counter(None))
    assert "information_schema.columns" in spec.description
    assert caplog.records and "s3cret-pass" not in caplog.text


def test_settings_check_the_dsn_and_keep_its_password_secret() -> None:
    settings = load_settings(_env_file=None, sql_query_dsn="postgresql://reader:s3cret-pass@db.example/shop")
    assert "s3cret-pass" in settings.secret_values()
    assert "s3cret-pass" not in repr(settings)
    with pytest.raises(SettingsError, match="SQL_QUERY_DSN"):
        load_settings(_env_file=None, sql_query_dsn="mysql://db.example/shop")
    config = SqlQueryConfig.from_settings(load_settings(_env_file=None, sql_query_dsn="postgresql://db.example/shop"))
    assert config is not None and config.max_rows == 100 and config.timeout_s == 5.0 and not config.allow_superuser


async def test_the_tool_exists_only_when_its_dsn_is_set(shop_url: str) -> None:
    without = await add_sql_query(ToolRegistry(), engine_settings("http://127.0.0.1:9"))
    assert "sql_query" not in without
    with_dsn = await add_sql_query(
        ToolRegistry(), engine_settings("http://127.0.0.1:9", sql_query_dsn=shop_url, sql_query_allow_superuser=True)
    )
    assert "sql_query" in with_dsn


async def test_a_model_counts_with_sql_and_every_write_it_tries_is_refused(
    db: Database, openai_emulator: OpenAIEmulator, shop_url: str
) -> None:
    registry = builtin_registry()
    registry.register(await sql_query_tool(_config(shop_url, timeout_s=0.5), counter=get_token_counter(None)))
    engine = make_engine(db, openai_emulator.base_url, registry=registry)
    before = _state(shop_url)
    attempts = ["DELETE FROM orders", "UPDATE orders SET total = 0; SELECT 1", "CREATE TABLE stolen (a integer)",
                "SELECT pg_sleep(60)"]
    openai_emulator.script(
        ToolCalls([Call("sql_query", json.dumps({"sql": "SELECT count(*) FROM orders"}))]),
        ToolCalls([Call("sql_query", json.dumps({"sql": sql})) for sql in attempts]),
        Text("There are 3 orders, and I cannot change them."),
    )
    events = await events_of(engine, request("how many orders are there? then delete them"))
    assert isinstance(events[-1], Done)
    first, second, third = openai_emulator.chat_requests
    [tool] = [t for t in first["tools"] if t["function"]["name"] == "sql_query"]
    assert "public.orders" in tool["function"]["description"]
    count_result = [m for m in second["messages"] if m["role"] == "tool"][-1]
    assert "count\n3\n(1 row)" in count_result["content"]
    refusals = [m["content"] for m in third["messages"] if m["role"] == "tool"][-len(attempts):]
    assert len(refusals) == len(attempts)
    for content in refusals:
        assert "refused" in content and "count\n" not in content
    assert _state(shop_url) == before


# ----- bytes: values cut by the database, results stopped at their cap ----------------------------------


class ServerBytes:
    """A Unix-socket hop between psycopg and Postgres that counts the bytes the server sends: what crossed the wire."""

    def __init__(self, url: str) -> None:
        query = parse_qs(urlsplit(url).query)
        [socket_dir] = query["host"]
        port = query.get("port", ["5432"])[0]
        self.target = Path(socket_dir) / f".s.PGSQL.{port}"
        self.directory = Path(tempfile.mkdtemp(prefix="pgbytes-"))  # short: a socket path has ~100 characters
        self.url = url.replace(f"host={socket_dir}", f"host={self.directory}")
        self.received = 0
        self._server: asyncio.AbstractServer | None = None
        self._hops: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> ServerBytes:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.directory / self.target.name))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        # The client has closed its connection: each hop ends once both sides have seen that.
        if self._hops:
            _, left = await asyncio.wait(self._hops, timeout=5)
            for hop in left:
                hop.cancel()
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._hops.add(task)
        server_reader, server_writer = await asyncio.open_unix_connection(str(self.target))

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, count: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if count:
                        self.received += len(data)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        await asyncio.gather(pipe(client_reader, server_writer, count=False), pipe(server_reader, client_writer, count=True))


async def test_a_huge_value_never_crosses_the_wire_whole_and_the_answer_says_where_it_cut(shop_url: str) -> None:
    async with ServerBytes(shop_url) as wire:
        table = await run_query(_config(wire.url), "SELECT repeat('x', 10000000) AS blob, 1 AS n FROM generate_series(1, 4)")
    # 40 MB of values; what came over the wire is the cut values and the protocol around them.
    assert wire.received < 50_000
    lines = table.splitlines()
    assert lines[:5] == ["blob | n"] + ["x" * 199 + "… | 1"] * 4
    assert lines[5] == "(4 rows)"
    assert lines[6].startswith("(Values longer than 1000 bytes were cut to their first 1000 bytes by the database, in column blob;")


async def test_values_are_cut_at_their_byte_cap_without_splitting_a_character(shop_url: str) -> None:
    sql = "SELECT repeat('é', 600) AS two, repeat('😀', 300) AS four, repeat('x', 999) || 'é' AS edge, 'short' AS s, NULL AS n"
    async with read_only_session(_config(shop_url)) as conn:
        result = await fetch_result(conn, _allowed(sql), config=_config(shop_url, max_value_bytes=1000))
    [row] = result.rows
    assert row[0] == "é" * 500 and row[1] == "😀" * 250 and row[2] == "x" * 999
    assert row[3:] == ("short", None)
    assert result.cut_columns == ("two", "four", "edge") and result.value_cap_bytes == 1000
    assert result.stopped_at_bytes is None and not result.more


async def test_rows_stop_once_the_result_passes_its_byte_cap(shop_url: str) -> None:
    config = _config(shop_url, max_value_bytes=1000, max_result_bytes=10_000)
    async with read_only_session(config) as conn:
        result = await fetch_result(conn, _allowed("SELECT repeat('y', 900) FROM generate_series(1, 1000)"), config=config)
    fetched = sum(len(value or "") for row in result.rows for value in row)
    assert 10_000 <= fetched < 11_000 and len(result.rows) == 12
    assert result.stopped_at_bytes == 10_000 and result.cut_columns == ()
    table = await run_query(config, "SELECT repeat('y', 900) FROM generate_series(1, 1000)")
    assert "the rows stopped once the result passed 10000 bytes; there may be more" in table.splitlines()[-1]
    # Many columns share the result's cap: each value gets at most its share, so one row alone never passes it.
    wide = ", ".join(f"repeat('z', 500) AS z{i}" for i in range(40))
    async with read_only_session(config) as conn:
        result = await fetch_result(conn, _allowed(f"SELECT {wide}"), config=config)
    assert result.value_cap_bytes == 250 and {len(value or "") for value in result.rows[0]} == {250}


async def test_the_wrapper_keeps_order_names_types_and_comments_of_the_statement(shop_url: str) -> None:
    table = await run_query(
        _config(shop_url), "SELECT id, id AS id, paid, placed FROM orders ORDER BY id DESC -- newest first"
    )
    assert table.splitlines() == ["id | id | paid | placed", "3 | 3 | true | infinity", "2 | 2 | false | NULL",
                                  "1 | 1 | true | 2026-01-05", "(3 rows)"]
    assert await run_query(_config(shop_url), "VALUES (1, 'a'), (2, 'b')") == "column1 | column2\n1 | a\n2 | b\n(2 rows)"
    assert await run_query(_config(shop_url), "SELECT FROM orders") == "(no columns)\n\n\n\n(3 rows)"
    # Text that looks like the wrapper's own is only a value.
    sneaky = await run_query(_config(shop_url), "SELECT ')) AS w; SELECT 1 --' AS escape")
    assert sneaky == "escape\n)) AS w; SELECT 1 --\n(1 row)"


async def test_rows_fetched_in_many_batches_share_one_statement_timeout(shop_url: str) -> None:
    # 40 columns at 250 bytes each could fill the result's 10,000 bytes in one row: a row per FETCH, 20 FETCHes a
    # second, each well under the timeout on its own.
    columns = ", ".join(["slow_value(n)"] + [f"'v' AS v{i}" for i in range(39)])
    config = _config(shop_url, timeout_s=0.5, max_result_bytes=10_000)
    with pytest.raises(ToolError, match="stopped after the 0.5 s statement timeout"):
        await run_query(config, f"SELECT {columns} FROM generate_series(1, 100) AS g(n)")


def _allowed(sql: str) -> Allowed:
    verdict = check_sql(sql)
    assert isinstance(verdict, Allowed), verdict
    return verdict


def test_settings_name_the_byte_caps() -> None:
    config = SqlQueryConfig.from_settings(
        load_settings(_env_file=None, sql_query_dsn="postgresql://db.example/shop", sql_query_max_value_bytes=64,
                      sql_query_max_result_bytes=5000)
    )
    assert config is not None and (config.max_value_bytes, config.max_result_bytes) == (64, 5000)
    with pytest.raises(SettingsError, match="SQL_QUERY_MAX_VALUE_BYTES"):
        load_settings(_env_file=None, sql_query_max_value_bytes=3)


def test_the_wrapper_refuses_text_that_would_break_out_of_it() -> None:
    # sql_guard never lets such text through; the wrapper checks on its own that it made one statement.
    breakout = "SELECT 1) AS q(c1) OFFSET 0) AS w; DELETE FROM orders; SELECT * FROM (SELECT * FROM (SELECT 1"
    assert isinstance(check_sql(breakout), Refused)
    with pytest.raises(WrapError):
        capped_statement(breakout, columns=1, value_bytes=100)
    assert capped_statement("SELECT 1 -- a comment", columns=1, value_bytes=100).count("\n") == 2
