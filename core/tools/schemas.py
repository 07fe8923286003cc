"""Tool schemas applied to a call's arguments in bounded work: refs resolved only inside the schema, RE2 patterns, a budget.

A schema is accepted first by core/tools/schema_check.py. Applying it counts every keyword it evaluates against
a budget, so no schema (a chain of `$ref`s each used twice, say) can make one call's check take more than a
bounded amount of work; the arguments themselves are capped in size and depth.
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

from core.tools.patterns import compiled, search

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


class _OverBudget(Exception):
    """Raised inside a check that used up its steps."""


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    # Every URI: a ref that left the schema would make the server fetch a URL or read a file for its writer.
    raise referencing.exceptions.NoSuchResource(ref=uri)


REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


# ----- every keyword counted --------------------------------------------------------------------

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
