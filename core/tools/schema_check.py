"""Whether a tool schema from a client or an MCP server is accepted: refs only inside it, size, depth, keywords, RE2 patterns.

Checked once per schema (a digest cache: a client sends the same tools with every request) in time linear in its
size; core/tools/schemas.py then applies an accepted schema to each call's arguments in bounded work.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import re2

from core.tools.patterns import compiled, re2_error_text, refusal

# What a tool's schema may weigh: the largest real MCP schemas seen are a few kB.
MAX_SCHEMA_BYTES = 64_000
MAX_SCHEMA_DEPTH = 32
# A schema's distinct patterns, and the time compiling them may take (a few take RE2 tens of ms, even to refuse).
MAX_SCHEMA_PATTERNS = 100
PATTERN_COMPILE_BUDGET_S = 0.02
CHECKED_CACHE_SIZE = 256
# Their evaluation re-walks the schema for every object or array they see, outside the step count.
UNSUPPORTED_KEYWORDS = ("unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef")
# Keywords whose value is one schema, a list of schemas, or names mapped to schemas (2020-12 and draft 7).
_ONE_SCHEMA = frozenset({
    "not", "if", "then", "else", "items", "contains", "additionalProperties", "propertyNames", "additionalItems",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema",
})
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


class SchemaRefused(ValueError):
    """A schema this server will not apply; the message names the problem for whoever wrote it."""


class _OutOfTime(SchemaRefused):
    """Its patterns took longer to compile than a schema may."""


_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _pattern_says(value: Any) -> str:
    if not isinstance(value, str):
        return "must be a string"
    try:
        compiled(value)
    except re2.error as error:
        reason = re2_error_text(error)
        # RE2's own syntax errors: what the writer most likely used is a Perl feature RE2 leaves out.
        hint = "; look-arounds and back-references are not supported" if reason.startswith("invalid") else ""
        return f"{_quote(value)} cannot be compiled by RE2: {reason}{hint}"
    return ""


def _type_says(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    ok = names and all(isinstance(name, str) and name in _TYPES for name in names) and len(set(names)) == len(names)
    return "" if ok else f"must be one of {', '.join(sorted(_TYPES))}, or a list of them without repeats"


def _strings_says(value: Any) -> str:
    ok = isinstance(value, list) and all(isinstance(item, str) for item in value) and len(set(value)) == len(value)
    return "" if ok else "must be a list of different strings"


def _says(ok: Callable[[Any], bool], wanted: str) -> Callable[[Any], str]:
    return lambda value: "" if ok(value) else f"must be {wanted}"


_SCHEMA = _says(_is_schema, "a schema (an object or a boolean)")
_SCHEMAS = _says(lambda v: isinstance(v, list) and bool(v) and all(map(_is_schema, v)), "a non-empty list of schemas")
_SCHEMA_MAP_SAYS = _says(lambda v: isinstance(v, dict) and all(map(_is_schema, v.values())), "an object of schemas")
_COUNT = _says(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a non-negative integer")


def _pattern_properties_says(value: Any) -> str:
    problem = _SCHEMA_MAP_SAYS(value)
    return problem or next((said for key in value if (said := _pattern_says(key))), "")


# What the 2020-12 meta-schema asks of one schema's own keywords, without descending: each schema inside is
# checked on its own (the walk finds them all), so the check is linear in the schema's size. The meta-schema
# itself, with its $dynamicRefs, took about 4 ms per kB: a quarter of a second for the largest schema.
_KEYWORDS: dict[str, Callable[[Any], str]] = {
    "type": _type_says,
    "enum": _says(lambda v: isinstance(v, list), "a list"),
    "required": _strings_says,
    "multipleOf": _says(lambda v: _is_number(v) and v > 0, "a number above 0"),
    **{key: _says(_is_number, "a number") for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
    **{key: _COUNT for key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                               "minContains", "maxContains")},
    **{key: _says(lambda v: isinstance(v, bool), "true or false") for key in ("uniqueItems", "readOnly", "writeOnly", "deprecated")},
    "pattern": _pattern_says,
    "patternProperties": _pattern_properties_says,
    **{key: _SCHEMA_MAP_SAYS for key in ("properties", "$defs", "definitions", "dependentSchemas")},
    **{key: _SCHEMAS for key in ("allOf", "anyOf", "oneOf", "prefixItems")},
    **{key: _SCHEMA for key in ("items", "not", "if", "then", "else", "contains", "additionalProperties", "propertyNames",
                                "contentSchema")},
    "dependentRequired": _says(lambda v: isinstance(v, dict) and not any(map(_strings_says, v.values())),
                               "an object of lists of different strings"),
    **{key: _says(lambda v: isinstance(v, str), "a string") for key in (
        "$ref", "$id", "$schema", "$anchor", "$comment", "title", "description", "format", "contentEncoding", "contentMediaType")},
}


def check_schema(schema: Any) -> None:
    """SchemaRefused naming the first problem: too big or deep, a reference out of the schema, a keyword not
    applied here, a pattern RE2 refuses, or a keyword whose value the 2020-12 meta-schema would reject."""
    if not isinstance(schema, dict):
        raise SchemaRefused("it must be a JSON object")
    found = _walk(schema)
    text = json.dumps(schema, ensure_ascii=False)
    if len(text) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"it is {len(text)} characters of JSON; at most {MAX_SCHEMA_BYTES} are accepted")
    # A client sends the same tools with every request, and each is checked twice (the 400 check, the run's specs).
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    problem = _checked.get(digest)
    if problem is None:
        problem, lasting = _problem(found)
        if lasting:
            _checked[digest] = problem
            while len(_checked) > CHECKED_CACHE_SIZE:
                _checked.pop(next(iter(_checked)))
    if problem:
        raise SchemaRefused(problem)


_checked: dict[bytes, str] = {}  # a schema's JSON digest → its problem, or ""


def _problem(found: _Found) -> tuple[str, bool]:
    """The first problem of the refs and keywords the walk found, or ""; and whether it holds for good (running out
    of compile time depends on the machine's load, and the patterns compiled so far are kept for the next try)."""
    try:
        _check_found(found)
    except _OutOfTime as refused:
        return str(refused), False
    except SchemaRefused as refused:
        return str(refused), True
    return "", True


def _check_patterns(found: _Found) -> None:
    patterns = {pattern for _, node in found.nodes for pattern in _patterns_of(node)}
    if len(patterns) > MAX_SCHEMA_PATTERNS:
        raise SchemaRefused(f"it has {len(patterns)} different patterns; at most {MAX_SCHEMA_PATTERNS} are accepted")
    # A few patterns take RE2 tens of milliseconds to compile (or to refuse): a schema may spend only so long on them.
    started = time.perf_counter()
    for pattern in sorted(patterns):
        refusal(pattern)
        if time.perf_counter() - started > PATTERN_COMPILE_BUDGET_S:
            raise _OutOfTime(f"its patterns take RE2 more than {PATTERN_COMPILE_BUDGET_S * 1000:g} ms to compile; simplify them")


def _patterns_of(node: dict[str, Any]) -> list[str]:
    found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    named = node.get("patternProperties")
    return found + [key for key in named if isinstance(key, str)] if isinstance(named, dict) else found


def _check_found(found: _Found) -> None:
    for ref in found.refs:
        if not ref.startswith("#") or (ref != "#" and not ref.startswith("#/")):
            raise SchemaRefused(f"the $ref {_quote(ref)} does not point inside the schema; only local '#/…' references are followed")
        if unquote(ref[1:]) not in found.schemas:
            raise SchemaRefused(f"the $ref {_quote(ref)} points at no schema inside this one")
    _check_patterns(found)
    for pointer, node in sorted(found.nodes, key=lambda item: item[0]):
        for keyword, value in node.items():
            check = _KEYWORDS.get(keyword)
            problem = check(value) if check is not None else ""
            if problem:
                where = f"{pointer}/{_escape(keyword)}".lstrip("/")
                if keyword in ("pattern", "patternProperties") and "RE2" in problem:
                    raise SchemaRefused(f"the pattern {problem} (at '{where}')")
                raise SchemaRefused(f"it is not a valid JSON schema (at '{where}'): {keyword} {problem}")


class _Found:
    def __init__(self) -> None:
        self.refs: list[str] = []
        self.schemas: set[str] = set()
        self.nodes: list[tuple[str, dict[str, Any]]] = []


def _walk(schema: dict[str, Any]) -> _Found:
    """Every place a schema stands (as JSON pointers) and every $ref, checking depth and keywords on the way.

    Iterative, so a schema nested past Python's recursion limit is refused, not a crash."""
    found = _Found()
    # (value, its JSON pointer, its depth, whether it stands where a schema does)
    stack: list[tuple[Any, str, int, bool]] = [(schema, "", 1, True)]
    while stack:
        value, pointer, depth, is_schema = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaRefused(f"it is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(value, list):
            stack.extend((item, f"{pointer}/{index}", depth + 1, is_schema) for index, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        if is_schema:
            found.schemas.add(pointer)
            found.nodes.append((pointer, value))
        for key, item in value.items():
            child = f"{pointer}/{_escape(key)}"
            if not is_schema:
                stack.append((item, child, depth + 1, False))
                continue
            if key in UNSUPPORTED_KEYWORDS:
                raise SchemaRefused(f"{key} is not supported in tool schemas (at '{pointer or '/'}')")
            if key == "$ref" and isinstance(item, str):
                found.refs.append(item)
            elif key == "$id" and pointer:
                raise SchemaRefused(f"a nested $id is not supported in tool schemas (at '{pointer}')")
            if key in _SCHEMA_MAP and isinstance(item, dict):
                stack.extend((sub, f"{child}/{_escape(name)}", depth + 2, True) for name, sub in item.items())
            else:
                stack.append((item, child, depth + 1, key in _ONE_SCHEMA or key in _SCHEMA_LIST))
    return found


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _quote(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:117] + "...")
