"""sql_query's byte caps, applied in SQL: the checked statement wrapped so each value crosses the wire cut to N bytes."""

from __future__ import annotations

from pglast.parser import ParseError, split

# The smallest per-value cap: a cut backs off to the start of a character, up to 3 bytes.
MIN_VALUE_BYTES = 16
# What a UTF-8 byte is when it continues a character (10xxxxxx): a cut before it would split one.
_CONTINUATION_MASK = 192
_CONTINUATION = 128


class WrapError(Exception):
    """The wrapped statement did not come out as one statement (never expected: the caller refuses to run it)."""


def capped_statement(sql: str, *, columns: int, value_bytes: int) -> str:
    """`sql` (an Allowed statement) as a subquery whose every column comes back as two: its text cut to at most
    `value_bytes` bytes of UTF-8 at a character boundary, and whether it was cut. `columns` is how many `sql` has.

    Only integers and names of our own are formatted in; the user's statement is the text sql_guard checked,
    on its own lines so a trailing `--` comment cannot reach the wrapper.
    """
    if columns < 1:
        raise ValueError("a statement without columns has nothing to cap")
    n = max(MIN_VALUE_BYTES, value_bytes)
    aliases = ", ".join(f"c{i}" for i in range(1, columns + 1))
    # One more character than fits: if even that many are no more than n bytes, the value was whole.
    heads = ", ".join(f"convert_to(left(q.c{i}::text, {n + 1}), 'UTF8') AS b{i}" for i in range(1, columns + 1))
    outputs = ", ".join(f"{_cut(f'w.b{i}', n)}, coalesce(octet_length(w.b{i}) > {n}, false)" for i in range(1, columns + 1))
    # OFFSET 0 keeps the middle query from being folded into the outer one, which would compute every head
    # once per place the outer query names it.
    wrapped = f"SELECT {outputs} FROM (SELECT {heads} FROM (\n{sql}\n) AS q({aliases}) OFFSET 0) AS w"
    # Postgres's parser in C, without building a Python tree: ~30 ms for the most columns a query can have.
    try:
        one = len(split(wrapped)) == 1
    except ParseError:
        one = False
    if not one:
        raise WrapError("the capped statement is not one statement")
    return wrapped


def _cut(b: str, n: int) -> str:
    """SQL for the bytea `b` as text, cut to at most n bytes without splitting a character (at most 3 bytes back)."""
    starts = " ".join(
        f"WHEN (get_byte({b}, {n - back}) & {_CONTINUATION_MASK}) <> {_CONTINUATION} THEN {n - back}" for back in range(3)
    )
    return (
        f"CASE WHEN octet_length({b}) <= {n} THEN convert_from({b}, 'UTF8') "
        f"ELSE convert_from(substring({b} FROM 1 FOR CASE {starts} ELSE {n - 3} END), 'UTF8') END"
    )
