"""Whether one SQL statement may run for sql_query: parsed by Postgres's own parser, only reads pass."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pglast import ast, parse_sql
from pglast.parser import ParseError, scan

MAX_SQL_CHARS = 20_000
# Building the parse tree costs about 30 µs a token and runs on the event loop (pglast holds the GIL, so a thread
# would not help): 2,000 tokens keep a check under about 70 ms. Counting them first (Postgres's own scanner) is
# a hundred times cheaper.
MAX_SQL_TOKENS = 2_000

# A READ ONLY transaction stops writes to tables, not these: they read or write files, end other
# sessions, change settings (set_config can even turn transaction_read_only off), take locks,
# send notifications, run SQL text the parser never saw, or reach other servers. Names are matched
# without their schema and case-insensitively, so `PG_CATALOG.Set_Config` is caught too.
DENIED_FUNCTIONS = frozenset(
    {
        "pg_read_file", "pg_read_binary_file", "pg_stat_file", "pg_logdir_ls", "pg_current_logfile",
        "set_config",
        "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile", "pg_promote",
        "pg_switch_wal", "pg_start_backup", "pg_stop_backup", "pg_import_system_collations",
        "pg_extension_config_dump", "pg_truncate_visibility_map", "pg_prewarm",
        "pg_notify",
        # Both assign a transaction id: a write to the commit log that a read has no need of.
        "txid_current", "pg_current_xact_id",
        "nextval", "setval",
        "loread", "lowrite",
        # These execute a query given as text, which this check never sees.
        "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml", "cursor_to_xmlschema",
        "ts_stat", "ts_rewrite",
        # pgsql-http / pg_net (network requests) and pg_cron (schedules SQL to run later, outside this transaction).
        "http", "schedule", "schedule_in_database", "unschedule", "alter_job",
    }
)
DENIED_PREFIXES = (
    "pg_ls_",  # directory listings of the server's disk
    "lo_",  # large objects: lo_import / lo_export read and write server files
    "pg_sleep",  # pg_sleep, pg_sleep_for, pg_sleep_until: nothing but a stall
    "dblink",  # other connections, which run anything
    "pg_advisory", "pg_try_advisory",
    "pg_file_",  # adminpack writes files
    "pg_stat_reset", "pg_stat_statements_reset",
    "pg_create_", "pg_drop_replication_slot", "pg_replication_slot_", "pg_copy_", "pg_logical_",
    "pg_replication_origin_", "pg_wal_replay_", "pg_backup_", "pg_log_",
    "binary_upgrade_",
    "pg_background",  # runs SQL in a background worker, outside this transaction
    "http_",
)


@dataclass(frozen=True)
class Allowed:
    """The statement may run; `sql` is it alone (no trailing semicolon) and `explain` says it is an EXPLAIN."""

    sql: str
    explain: bool


@dataclass(frozen=True)
class Refused:
    """The statement may not run; `reason` is a sentence for the model."""

    reason: str


Verdict = Allowed | Refused


def is_denied_function(name: str) -> bool:
    lowered = name.lower()
    return lowered in DENIED_FUNCTIONS or lowered.startswith(DENIED_PREFIXES)


def check_sql(sql: str) -> Verdict:
    """Allow one SELECT / WITH / VALUES / TABLE, or EXPLAIN (without ANALYZE) of one; refuse anything else."""
    if len(sql) > MAX_SQL_CHARS:
        return Refused(f"the statement is longer than {MAX_SQL_CHARS} characters.")
    try:
        if len(scan(sql)) > MAX_SQL_TOKENS:
            return Refused(
                f"the statement has more than {MAX_SQL_TOKENS} tokens (names, numbers, strings and symbols); "
                "shorten it, e.g. a range or a join instead of a long IN list, or several smaller queries."
            )
        statements = parse_sql(sql)
    except ParseError as error:
        return Refused(f"the statement is not valid SQL: {error}.")
    except RecursionError:
        return Refused("the statement is nested too deeply.")
    if not statements:
        return Refused("there is no statement; send one SELECT.")
    if len(statements) > 1:
        return Refused("only one statement per call is allowed; send each SELECT in its own call.")
    raw = statements[0]
    statement = raw.stmt
    explain = isinstance(statement, ast.ExplainStmt)
    if explain:
        if any(option.defname.lower() == "analyze" for option in statement.options or ()):
            return Refused("EXPLAIN ANALYZE runs the statement; use EXPLAIN without ANALYZE.")
        statement = statement.query
    if not isinstance(statement, ast.SelectStmt):
        what = "EXPLAIN of anything but a query" if explain else _statement_name(statement)
        return Refused(f"{what} is refused: only SELECT, WITH … SELECT, VALUES, TABLE and EXPLAIN may run, read-only.")
    reason = _find_forbidden(statement)
    if reason is not None:
        return Refused(reason)
    return Allowed(sql=_statement_text(sql, raw), explain=explain)


def _find_forbidden(root: ast.Node) -> str | None:
    """Why something inside the query is refused, or None: the first write, lock or denied call found."""
    for node in _walk(root):
        if isinstance(node, ast.SelectStmt):
            if node.intoClause is not None:
                return "SELECT … INTO creates a table and is refused; select the rows without INTO."
            if node.lockingClause:
                return "FOR UPDATE / FOR SHARE take row locks and are refused; select without them."
        elif type(node).__name__.endswith("Stmt"):
            # Inside a query only a data-modifying WITH (INSERT/UPDATE/DELETE/MERGE) can be another statement.
            return f"{_statement_name(node)} inside the query is refused: only reads may run."
        elif isinstance(node, ast.FuncCall):
            name = node.funcname[-1].sval
            if is_denied_function(name):
                return f"the function {name}() is refused here: it does more than read data."
        elif isinstance(node, (ast.ColumnRef, ast.A_Indirection)):
            # `(x).f` and `t.f` may call f(x) or f(t) (attribute notation): the same calls, spelt as a field.
            fields = node.fields[1:] if isinstance(node, ast.ColumnRef) else node.indirection
            for part in fields or ():
                if isinstance(part, ast.String) and is_denied_function(part.sval):
                    return f"the function {part.sval}() is refused here (called as a field): it does more than read data."
    return None


def _walk(root: ast.Node) -> Iterator[ast.Node]:
    """Every node under `root`, itself included; a stack, not recursion, so deep nesting cannot overflow it."""
    stack: list[object] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Node):
            yield item
            stack.extend(getattr(item, name, None) for name in type(item).__slots__)
        elif isinstance(item, (tuple, list)):
            stack.extend(item)


def _statement_name(node: ast.Node) -> str:
    names = {
        "InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE",
        "CopyStmt": "COPY", "CreateStmt": "CREATE TABLE", "CreateTableAsStmt": "CREATE TABLE AS",
        "DropStmt": "DROP", "TruncateStmt": "TRUNCATE", "VariableSetStmt": "SET", "VariableShowStmt": "SHOW",
        "TransactionStmt": "A transaction command", "DoStmt": "DO", "CallStmt": "CALL",
    }
    return names.get(type(node).__name__, f"A {type(node).__name__.removesuffix('Stmt')} statement")


def _statement_text(sql: str, raw: ast.RawStmt) -> str:
    # pglast's locations count bytes of the UTF-8 text, not characters.
    encoded = sql.encode("utf-8")
    start = raw.stmt_location or 0
    end = start + raw.stmt_len if raw.stmt_len else len(encoded)
    return encoded[start:end].decode("utf-8").strip()
