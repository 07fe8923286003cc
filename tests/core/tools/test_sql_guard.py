"""sql_guard: what one statement may be, decided on Postgres's own parse tree."""

from __future__ import annotations

import pytest

from core.tools.sql_guard import MAX_SQL_CHARS, MAX_SQL_TOKENS, Allowed, Refused, check_sql, is_denied_function

ALLOWED = [
    "SELECT count(*) FROM orders",
    "select id, total from public.orders where paid order by id limit 5;",
    "WITH big AS (SELECT * FROM orders WHERE total > 10) SELECT count(*) FROM big",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "VALUES (1, 'a'), (2, 'b')",
    "TABLE orders",
    "SELECT 1 UNION ALL SELECT 2 EXCEPT SELECT 3",
    "SELECT * FROM generate_series(1, 3) AS g(n) CROSS JOIN LATERAL (SELECT n * 2) AS d(m)",
    "SELECT current_setting('TimeZone'), now(), lower('A'), o.customer FROM orders o",
    "EXPLAIN SELECT * FROM orders",
    "EXPLAIN (VERBOSE, COSTS off) SELECT * FROM orders",
    "SELECT '100%' AS pct, '{x}' AS braces -- a trailing comment",
    "SELECT 'DELETE FROM orders; DROP TABLE orders'",
]

# statement → a word the refusal must contain
REFUSED = {
    "DELETE FROM orders": "DELETE",
    "UPDATE orders SET total = 0": "UPDATE",
    "UPDATE orders SET total = 0; SELECT 1": "one statement",
    "SELECT 1; SELECT 2": "one statement",
    "INSERT INTO orders VALUES (9)": "INSERT",
    "MERGE INTO orders o USING orders p ON o.id = p.id WHEN MATCHED THEN DELETE": "MERGE",
    "CREATE TABLE x (a int)": "CREATE TABLE",
    "CREATE TABLE x AS SELECT * FROM orders": "CREATE TABLE AS",
    "DROP TABLE orders": "DROP",
    "TRUNCATE orders": "TRUNCATE",
    "COPY orders TO PROGRAM 'cat > /tmp/x'": "COPY",
    "COPY (SELECT 1) TO '/tmp/x'": "COPY",
    "SET transaction_read_only = off": "SET",
    "SET ROLE postgres": "SET",
    "COMMIT": "transaction",
    "BEGIN": "transaction",
    "DO $$ BEGIN DELETE FROM orders; END $$": "DO",
    "CALL p()": "CALL",
    "SHOW ALL": "SHOW",
    "NOTIFY chan": "Notify",
    "WITH d AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM d": "DELETE",
    "SELECT * FROM (WITH u AS (UPDATE orders SET total = 0 RETURNING 1) SELECT * FROM u) s": "UPDATE",
    "SELECT * INTO copy_of_orders FROM orders": "INTO",
    "SELECT * FROM orders FOR UPDATE": "FOR UPDATE",
    "SELECT * FROM orders FOR KEY SHARE": "FOR UPDATE",
    "EXPLAIN ANALYZE DELETE FROM orders": "ANALYZE",
    "EXPLAIN (ANALYZE) SELECT 1": "ANALYZE",
    "EXPLAIN (ANALYZE false) SELECT 1": "ANALYZE",
    "EXPLAIN DELETE FROM orders": "EXPLAIN",
    "EXPLAIN CREATE TABLE x AS SELECT 1": "EXPLAIN",
    "SELECT pg_sleep(60)": "pg_sleep",
    "SELECT pg_sleep_for('1 minute')": "pg_sleep_for",
    "SELECT set_config('transaction_read_only', 'off', true)": "set_config",
    "select PG_CATALOG.Set_Config('a.b', 'c', false)": "Set_Config",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity": "pg_terminate_backend",
    "SELECT pg_cancel_backend(1)": "pg_cancel_backend",
    "SELECT pg_read_file('/etc/passwd')": "pg_read_file",
    "SELECT pg_read_binary_file('/etc/passwd')": "pg_read_binary_file",
    "SELECT * FROM pg_ls_dir('.')": "pg_ls_dir",
    "SELECT lo_import('/etc/passwd')": "lo_import",
    "SELECT lo_export(1, '/tmp/x')": "lo_export",
    "SELECT pg_reload_conf()": "pg_reload_conf",
    "SELECT pg_advisory_lock(1)": "pg_advisory_lock",
    "SELECT dblink_exec('dbname=x', 'DELETE FROM orders')": "dblink_exec",
    "SELECT query_to_xml('DELETE FROM orders RETURNING 1', true, true, '')": "query_to_xml",
    "SELECT pg_notify('chan', 'hi')": "pg_notify",
    "SELECT nextval('s')": "nextval",
    # Attribute notation calls the function too: ('/etc/passwd'::text).pg_read_file reads the file.
    "SELECT ('/etc/passwd'::text).pg_read_file": "pg_read_file",
    "SELECT t.pg_sleep FROM orders t": "pg_sleep",
    # Denied calls are found wherever they hide.
    "SELECT (SELECT pg_terminate_backend(1))": "pg_terminate_backend",
    "SELECT 1 UNION SELECT pg_reload_conf()::int": "pg_reload_conf",
    "SELECT * FROM orders WHERE id IN (SELECT pg_cancel_backend(1)::int)": "pg_cancel_backend",
    "WITH x AS (SELECT set_config('a.b', 'c', false)) SELECT * FROM x": "set_config",
    "EXPLAIN SELECT pg_read_file('/etc/passwd')": "pg_read_file",
    "SELECT count(*) FILTER (WHERE pg_sleep(1) IS NULL) FROM orders": "pg_sleep",
    "": "no statement",
    ";": "no statement",
    "SELEC 1": "not valid SQL",
}


@pytest.mark.parametrize("sql", ALLOWED)
def test_reads_are_allowed(sql: str) -> None:
    verdict = check_sql(sql)
    assert isinstance(verdict, Allowed), verdict


@pytest.mark.parametrize(("sql", "word"), REFUSED.items())
def test_everything_else_is_refused_with_a_sentence(sql: str, word: str) -> None:
    verdict = check_sql(sql)
    assert isinstance(verdict, Refused), f"{sql!r} was allowed"
    assert word.lower() in verdict.reason.lower()
    assert verdict.reason.endswith(".")


def test_the_allowed_statement_is_returned_alone_without_its_semicolon() -> None:
    assert check_sql("  SELECT 'é' ;  ") == Allowed(sql="SELECT 'é'", explain=False)
    assert check_sql("EXPLAIN SELECT 1;") == Allowed(sql="EXPLAIN SELECT 1", explain=True)


def test_a_very_long_statement_is_refused() -> None:
    assert isinstance(check_sql("SELECT " + "1 + " * MAX_SQL_CHARS + "1"), Refused)


def test_a_statement_of_too_many_tokens_is_refused_before_it_is_parsed() -> None:
    # Short enough in characters, but each token is a node of the parse tree built on the event loop.
    many = "SELECT " + "+".join(["1"] * 6000)
    assert len(many) < MAX_SQL_CHARS
    verdict = check_sql(many)
    assert isinstance(verdict, Refused) and f"more than {MAX_SQL_TOKENS} tokens" in verdict.reason
    listed = "SELECT * FROM orders WHERE id IN (" + ", ".join(str(n) for n in range(MAX_SQL_TOKENS // 2 - 10)) + ")"
    assert isinstance(check_sql(listed), Allowed)


def test_a_denied_call_is_found_at_the_bottom_of_deep_nesting() -> None:
    depth = 600  # 1,800 tokens, under MAX_SQL_TOKENS; the tree is 1,804 nodes deep, past Python's recursion limit
    assert isinstance(check_sql("SELECT " + "(SELECT " * depth + "1" + ")" * depth), Allowed)
    verdict = check_sql("SELECT " + "(SELECT " * depth + "pg_sleep(1)" + ")" * depth)
    assert isinstance(verdict, Refused) and "pg_sleep" in verdict.reason


def test_the_deny_list_matches_names_and_prefixes_case_insensitively() -> None:
    assert is_denied_function("PG_SLEEP")
    assert is_denied_function("lo_unlink")
    assert is_denied_function("pg_ls_waldir")
    assert not is_denied_function("current_setting")
    assert not is_denied_function("lower")
    assert not is_denied_function("count")
