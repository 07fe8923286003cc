"""What sql_query tells the model of its database: tables, columns, types and comments, within a token budget."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import AsyncConnection

from core.tokens import TokenCounter

MAX_COMMENT_CHARS = 200

# Only what the connecting role may select from, outside the system schemas; partitions are left out
# (their parent is listed). Comments come from pg_description (COMMENT ON TABLE / COLUMN).
SCHEMA_QUERY = """
SELECT n.nspname, c.relname, c.relkind::text, obj_description(c.oid, 'pg_class'),
       a.attname, format_type(a.atttypid, a.atttypmod), col_description(c.oid, a.attnum)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f')
  AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
  AND has_schema_privilege(n.oid, 'USAGE')
  AND has_column_privilege(c.oid, a.attnum, 'SELECT')
ORDER BY n.nspname, c.relname, a.attnum
"""

KIND_NAMES = {"v": "view", "m": "materialized view", "f": "foreign table"}


@dataclass(frozen=True, kw_only=True)
class Column:
    name: str
    type: str
    comment: str | None = None


@dataclass(frozen=True, kw_only=True)
class Table:
    schema: str
    name: str
    kind: str  # pg_class.relkind: r table, p partitioned table, v view, m materialized view, f foreign table
    comment: str | None
    columns: tuple[Column, ...]


async def read_schema(conn: AsyncConnection) -> list[Table]:
    """The tables and views `conn`'s role may read, with their columns, in schema and name order."""
    async with conn.cursor() as cursor:
        await cursor.execute(SCHEMA_QUERY)
        records = await cursor.fetchall()
    tables: list[Table] = []
    columns: list[Column] = []
    for index, (schema, name, kind, comment, column, type_name, column_comment) in enumerate(records):
        columns.append(Column(name=column, type=type_name, comment=column_comment))
        last = index + 1 == len(records) or records[index + 1][:2] != (schema, name)
        if last:
            tables.append(Table(schema=schema, name=name, kind=kind, comment=comment, columns=tuple(columns)))
            columns = []
    return tables


def table_line(table: Table) -> str:
    """One line: `schema.name (kind) "comment": column type "comment", …`."""
    head = f"{_identifier(table.schema)}.{_identifier(table.name)}"
    if table.kind in KIND_NAMES:
        head += f" ({KIND_NAMES[table.kind]})"
    if table.comment:
        head += f" {_quoted(table.comment)}"
    columns = ", ".join(
        f"{_identifier(column.name)} {column.type}" + (f" {_quoted(column.comment)}" if column.comment else "")
        for column in table.columns
    )
    return f"{head}: {columns}"


def describe_schema(tables: list[Table], *, budget_tokens: int, counter: TokenCounter) -> str:
    """A line per table, as many as fit in `budget_tokens`, then a note naming how many were left out."""
    if not tables:
        return "No tables are visible to this connection."
    lines: list[str] = []
    used = 0
    for index, table in enumerate(tables):
        line = table_line(table)
        cost = counter.count(line) + 1
        left = len(tables) - index - 1
        # Keep room for the closing note unless this is the last table.
        reserve = 0 if left == 0 else counter.count(_left_out_note(left)) + 1
        if used + cost + reserve > budget_tokens:
            lines.append(_left_out_note(len(tables) - index))
            break
        lines.append(line)
        used += cost
    return "\n".join(lines)


def _left_out_note(count: int) -> str:
    tables = "table" if count == 1 else "tables"
    return f"… and {count} more {tables}, not listed for space: query information_schema.columns to see them."


def _identifier(name: str) -> str:
    # Quoted only where SQL needs it, so the model copies names that work.
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'


def _quoted(comment: str) -> str:
    text = " ".join(comment.split())
    if len(text) > MAX_COMMENT_CHARS:
        text = text[: MAX_COMMENT_CHARS - 1] + "…"
    return '"' + text.replace('"', "'") + '"'
