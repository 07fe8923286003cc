"""Tool schemas from clients and MCP servers, checked once and applied in bounded work: local refs only, RE2 patterns, caps.

A schema may only point inside itself (`#/…` JSON pointers, resolved by a `referencing.Registry` whose
retrieval refuses every URI), is capped in size and depth, and its `pattern`/`patternProperties` are
compiled by RE2 (linear-time matching; a pattern RE2 cannot compile — look-arounds, back-references — is
refused). Applying a schema to arguments counts every keyword it evaluates against a budget, so no schema
(a chain of `$ref`s each used twice, say) can make one call's check take more than a bounded amount of work.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import re2
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

# What a tool's schema may weigh: the largest real MCP schemas seen are a few kB.
MAX_SCHEMA_BYTES = 64_000
MAX_SCHEMA_DEPTH = 32
# What one call's arguments may weigh before they are checked against the schema.
MAX_ARGUMENT_CHARS = 100_000
MAX_ARGUMENT_DEPTH = 64
# Keyword evaluations one check may take (a typical call takes tens); a string matched by a pattern
# costs one more per PATTERN_CHARS_PER_STEP characters, a list or object keyword value one per 16 entries.
# A `$ref` costs REF_STEPS (resolving it takes about that many keywords' time). 10,000 steps take about 50 ms.
MAX_VALIDATION_STEPS = 10_000
REF_STEPS = 5
ERROR_STEPS = 10  # making an error (its message, its path) costs about ten keywords' time
PATTERN_CHARS_PER_STEP = 1_000
# The best of the first errors is as good a sentence for the model as the best of all; the rest is not looked for.
MAX_ERRORS_RANKED = 20
# RE2's limits for one pattern: its memory (a bigger program is refused while compiling), its length and its
# program's size (matching time grows with it); a schema's distinct patterns, and the time compiling them.
RE2_MAX_MEM_BYTES = 256 * 1024
MAX_PATTERN_CHARS = 1_000
MAX_PATTERN_PROGRAM = 5_000
MAX_SCHEMA_PATTERNS = 100
PATTERN_COMPILE_BUDGET_S = 0.05
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


class _OverBudget(Exception):
    """Raised inside a check that used up its steps."""


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    # Every URI: a ref that left the schema would make the server fetch a URL or read a file for its writer.
    raise referencing.exceptions.NoSuchResource(ref=uri)


REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the writer's mistake, said in the 400; not a line on stderr
    options.never_capture = True  # only whether it matches is asked
    options.max_mem = RE2_MAX_MEM_BYTES
    return options


_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=4096)
def _program(pattern: str) -> tuple[Any, str]:
    """The RE2 program for a pattern and "", or None and why not (refusals are kept too: they cost as much)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return None, f"it is longer than {MAX_PATTERN_CHARS} characters"
    try:
        program = re2.compile(pattern, options=_OPTIONS)
    except UnicodeEncodeError:
        return None, "it is not valid Unicode (a lone surrogate)"
    except re2.error as error:
        return None, re2_error_text(error)
    if program.programsize > MAX_PATTERN_PROGRAM:
        return None, f"its RE2 program has {program.programsize} instructions; at most {MAX_PATTERN_PROGRAM} are accepted"
    return program, ""


def compiled(pattern: str) -> Any:
    """The RE2 program for a pattern (re2.error saying why when it is refused)."""
    program, problem = _program(pattern)
    if program is None:
        raise re2.error(problem)
    return program


def re2_error_text(error: BaseException) -> str:
    detail = error.args[0] if error.args else ""
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


# ----- applying a schema: every keyword counted -------------------------------------------------

_steps: contextvars.ContextVar[list[int]] = contextvars.ContextVar("schema_steps")


def _charge(steps: int) -> None:
    left = _steps.get(None)
    if left is None:
        return  # outside `validate` (e.g. a library's own use): nothing to count against
    left[0] -= steps
    if left[0] < 0:
        raise _OverBudget


Keyword = Callable[[Any, Any, Any, dict[str, Any]], Iterator[ValidationError] | None]


def _weight(value: Any) -> int:
    """Steps for looking over a value once: one per 16 entries of a list or object, per 1,000 characters of text."""
    if isinstance(value, (list, dict)):
        return len(value) // 16
    return len(value) // PATTERN_CHARS_PER_STEP if isinstance(value, str) else 0


def _counted(keyword: Keyword, weight: int, *, compares: bool) -> Keyword:
    def counted(validator: Any, value: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
        _charge(weight + _weight(value) + (_weight(instance) if compares else 0))
        for error in keyword(validator, value, instance, schema) or ():
            # A message quotes the instance whole (a repr of all of it): long ones cost their length, once.
            if not getattr(error, "_charged", False):
                error._charged = True  # type: ignore[attr-defined]
                _charge(ERROR_STEPS + len(error.message) // PATTERN_CHARS_PER_STEP)
            yield error

    return counted


def search(pattern: str, text: str) -> bool:
    """Whether RE2 finds `pattern` in `text`, in time linear in the text (re2.error for a pattern it refuses)."""
    try:
        return compiled(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate, which UTF-8 (and so RE2) cannot hold: matched as U+FFFD
        return compiled(pattern).search(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")) is not None


def _search(pattern: str, text: str) -> bool:
    # RE2's time is linear in the text, times a factor that grows with the program when its DFA gives way.
    _charge(1 + len(text) * (1 + compiled(pattern).programsize // 64) // PATTERN_CHARS_PER_STEP)
    return search(pattern, text)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [name for name in instance
              if name not in properties and not any(_search(pattern, name) for pattern in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form equal exactly when JSON Schema calls two values equal (1 == 1.0, true != 1)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    # One step per entry: building the form costs about a keyword's time per value.
    _charge(len(value) if isinstance(value, (list, dict)) else _weight(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    # jsonschema's own check compares every pair of objects: quadratic in the array's length.
    if not unique or not validator.is_type(instance, "array"):
        return
    _charge(len(instance) // 4)  # numbers and short strings: a quarter step each
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


# Keywords that compare the whole instance with their value: they cost what the instance weighs.
_COMPARING = frozenset({"enum", "const"})
_OWN = {"pattern": _pattern, "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties, "uniqueItems": _unique_items}
GuardedValidator = extend(
    Draft202012Validator,
    validators={name: _counted(_OWN.get(name, keyword), REF_STEPS if name == "$ref" else 1, compares=name in _COMPARING)
                for name, keyword in Draft202012Validator.VALIDATORS.items()},
)


# ----- checking a schema once -------------------------------------------------------------------

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
        problem = _problem(found)
        _checked[digest] = problem
        while len(_checked) > CHECKED_CACHE_SIZE:
            _checked.pop(next(iter(_checked)))
    if problem:
        raise SchemaRefused(problem)


CHECKED_CACHE_SIZE = 256
_checked: dict[bytes, str] = {}  # a schema's JSON digest → its problem, or ""


def _problem(found: _Found) -> str:
    """The first problem of the refs and keywords the walk found, or ""."""
    try:
        _check_found(found)
    except SchemaRefused as refused:
        return str(refused)
    return ""


def _check_patterns(found: _Found) -> None:
    patterns = {pattern for _, node in found.nodes for pattern in _patterns_of(node)}
    if len(patterns) > MAX_SCHEMA_PATTERNS:
        raise SchemaRefused(f"it has {len(patterns)} different patterns; at most {MAX_SCHEMA_PATTERNS} are accepted")
    # A few patterns take RE2 tens of milliseconds to compile (or to refuse): a schema may spend only so long on them.
    started = time.perf_counter()
    for pattern in sorted(patterns):
        _program(pattern)
        if time.perf_counter() - started > PATTERN_COMPILE_BUDGET_S:
            raise SchemaRefused(f"its patterns take RE2 more than {PATTERN_COMPILE_BUDGET_S * 1000:g} ms to compile; simplify them")


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


# ----- applying it ------------------------------------------------------------------------------

def validator_for(schema: dict[str, Any]) -> Any:
    """A validator for a checked schema, resolving refs only inside it."""
    return GuardedValidator(schema, registry=REGISTRY)


def arguments_problem(validator: Any, arguments: Any) -> str:
    """Why `arguments` do not fit the schema, as a predicate ("do not match its schema at 'a': …"), or "" when
    they do; bounded work whatever the schema and arguments."""
    token = _steps.set([MAX_VALIDATION_STEPS])
    try:
        problem = best_match(itertools.islice(validator.iter_errors(arguments), MAX_ERRORS_RANKED))
    except _OverBudget:
        return f"could not be checked against its schema: that took more than {MAX_VALIDATION_STEPS} steps; send simpler arguments"
    except RecursionError:
        return "could not be checked against its schema: its references loop, or the arguments nest too deeply"
    except Exception as error:  # a schema that passed the checks but cannot be applied to these arguments
        return f"could not be checked against its schema ({type(error).__name__})"
    finally:
        _steps.reset(token)
    if problem is None:
        return ""
    where = "/".join(str(part) for part in problem.absolute_path)
    location = f" at '{where}'" if where else ""
    return f"do not match its schema{location}: {problem.message}"


def depth_over(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (iterative: safe on any depth json.loads returned)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
