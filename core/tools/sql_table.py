"""Query results as a compact text table for the model: header, rows, and how many rows (and where they were cut)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_CELL_CHARS = 200
CELL_CUT = "…"
SEPARATOR = " | "


@dataclass(frozen=True, kw_only=True)
class QueryResult:
    """Rows fetched for one query; `more` says the database had rows beyond them (the row cap was hit)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str | None, ...], ...]
    more: bool
    cut_columns: tuple[str, ...] = ()  # columns with a value cut to value_cap_bytes by the database
    value_cap_bytes: int | None = None
    stopped_at_bytes: int | None = None  # rows stopped being fetched once the result passed this many bytes


def format_cell(value: str | None, *, max_chars: int = MAX_CELL_CHARS) -> str:
    """A value on one line, NULL spelt out, pipes escaped so columns stay apart, long values cut."""
    if value is None:
        return "NULL"
    text = value.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(text) > max_chars:
        text = text[: max_chars - len(CELL_CUT)] + CELL_CUT
    return text


def format_table(result: QueryResult, *, max_rows: int, max_chars: int) -> str:
    """The table in at most about `max_chars` characters, ending with the row count and a note when cut."""
    lines = [SEPARATOR.join(format_cell(name) for name in result.columns) if result.columns else "(no columns)"]
    size = len(lines[0])
    shown = 0
    cut_for_size = False
    cut_note = _value_cut_sentence(result.cut_columns, result.value_cap_bytes) if result.cut_columns else ""
    # Room kept for the closing sentences, so the whole output stays within max_chars.
    budget = max_chars - 160 - len(cut_note)
    for row in result.rows[:max_rows]:
        line = SEPARATOR.join(format_cell(value) for value in row)
        if shown and size + 1 + len(line) > budget:
            cut_for_size = True
            break
        lines.append(line)
        size += 1 + len(line)
        shown += 1
    lines.append(_count_sentence(shown, more=result.more or len(result.rows) > max_rows, cut_for_size=cut_for_size,
                                 stopped_at_bytes=result.stopped_at_bytes))
    if cut_note:
        lines.append(cut_note)
    return "\n".join(lines)


def _value_cut_sentence(columns: tuple[str, ...], cap_bytes: int | None) -> str:
    names = ", ".join(format_cell(name, max_chars=60) for name in columns[:10])
    if len(columns) > 10:
        names += f" and {len(columns) - 10} more"
    where = "column" if len(columns) == 1 else "columns"
    return (
        f"(Values longer than {cap_bytes} bytes were cut to their first {cap_bytes} bytes by the database, in {where} "
        f"{names}; select left(…), length(…) or a substring to see other parts.)"
    )


def _count_sentence(shown: int, *, more: bool, cut_for_size: bool, stopped_at_bytes: int | None = None) -> str:
    rows = "1 row" if shown == 1 else f"{shown} rows"
    if stopped_at_bytes is not None and not cut_for_size:
        return (
            f"({rows} shown: the rows stopped once the result passed {stopped_at_bytes} bytes; there may be more. "
            "Select fewer or shorter columns, fewer rows, or aggregate.)"
        )
    if cut_for_size:
        return f"({rows} shown: cut at {shown} rows to fit the output; there are more. Select fewer columns or rows, or aggregate.)"
    if more:
        return f"({rows} shown: cut at {shown} rows; there are more. Aggregate (count, GROUP BY) or add WHERE/LIMIT.)"
    return f"({rows})"
