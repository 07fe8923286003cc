"""The `calculator` tool: arithmetic over a whitelist of AST nodes, never `eval`."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from core.tools.context import ToolContext
from core.tools.registry import ToolError, ToolSpec

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
# Integers beyond this many bits (about 3,000 digits) are refused before they are computed;
# it also stays under Python's 4,300-digit int-to-str limit.
MAX_INT_BITS = 10_000
# A bound on recursion: a 500-character sum of single digits nests about 250 levels deep.
MAX_DEPTH = 300
MAX_ROUND_DIGITS = 100

Number = int | float

FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
}
# How many positional arguments each function accepts.
ARITY: dict[str, tuple[int, ...]] = {name: (1,) for name in FUNCTIONS} | {"log": (1, 2), "round": (1, 2)}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

BINARY_OPERATORS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}

DESCRIPTION = (
    "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % ** and parentheses, "
    "the functions sqrt, log (natural, or log(x, base)), log10, exp, sin, cos, tan (radians), abs, "
    "round, floor, ceil, and the constants pi and e. Use it for any calculation instead of doing it in your head."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "description": "The expression, e.g. '(17.5 * 3) / sqrt(2)'.",
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}


def evaluate(expression: str) -> Number:
    """The value of `expression`; a `ToolError` explains anything refused or impossible."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters; split the calculation.")
    if not expression.strip():
        raise ToolError("the expression is empty.")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else "it cannot be parsed"
        raise ToolError(f"the expression is not valid arithmetic ({reason}).") from None
    try:
        return _check(_eval(tree.body, 0))
    except ZeroDivisionError:
        raise ToolError("division by zero.") from None
    except OverflowError:
        raise ToolError("the result is too large.") from None
    except ValueError as exc:
        # math functions report domain errors this way (sqrt(-1), log(0)).
        raise ToolError(f"the calculation is undefined ({exc}).") from None


def format_number(value: Number) -> str:
    """`value` as the model should read it: integers exactly, floats to 15 significant digits."""
    if isinstance(value, int):
        return str(value)
    return format(value, ".15g")


async def run_calculator(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    expression = arguments["expression"]
    return f"{expression.strip()} = {format_number(evaluate(expression))}"


CALCULATOR = ToolSpec(
    name="calculator",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    run=run_calculator,
    requires_approval=False,
    timeout_s=5.0,
)


def _eval(node: ast.expr, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise ToolError("the expression is nested too deeply.")
    match node:
        case ast.Constant(value=value) if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _check(value)
        case ast.Constant(value=value):
            raise ToolError(f"{value!r} is not a real number; only numbers are allowed.")
        case ast.Name(id=name) if name in CONSTANTS:
            return CONSTANTS[name]
        case ast.Name(id=name):
            raise ToolError(f"unknown name {name!r}; only the constants pi and e are available.")
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _check(+_eval(operand, depth + 1))
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return _check(-_eval(operand, depth + 1))
        case ast.BinOp(left=left, op=ast.Pow(), right=right):
            return _power(_eval(left, depth + 1), _eval(right, depth + 1))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in BINARY_OPERATORS:
            return _check(BINARY_OPERATORS[type(op)](_eval(left, depth + 1), _eval(right, depth + 1)))
        case ast.BinOp(op=ast.BitXor()):
            raise ToolError("'^' is not a power here; write powers with '**'.")
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in FUNCTIONS:
            if not any(isinstance(arg, ast.Starred) for arg in args) and len(args) in ARITY[name]:
                values = [_eval(arg, depth + 1) for arg in args]
                return _call(name, values)
            expected = " or ".join(str(n) for n in ARITY[name])
            raise ToolError(f"{name} takes {expected} argument(s).")
        case ast.Call(func=ast.Name(id=name), keywords=[]) if name not in FUNCTIONS:
            raise ToolError(f"unknown function {name!r}; available: {', '.join(FUNCTIONS)}.")
        case ast.Call(func=ast.Name(id=name)) if name in FUNCTIONS:
            raise ToolError(f"{name} takes positional arguments only.")
        case ast.Call():
            raise ToolError(f"only these functions can be called: {', '.join(FUNCTIONS)}.")
        case _:
            raise ToolError(f"{type(node).__name__} is not allowed; use numbers, operators and the listed functions.")


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponents above {MAX_EXPONENT} are refused.")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        # Refuse before computing: base**n has at least n*(bits(base)-1) bits, and when that is
        # under the limit the true size is at most twice it, which is still cheap to compute.
        if (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
            raise ToolError("the result is too large.")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("the result is not a real number.")
    return _check(result)


def _call(name: str, values: list[Number]) -> Number:
    if name == "round" and len(values) == 2:
        digits = values[1]
        if not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS:
            raise ToolError(
                f"round's second argument must be a whole number between -{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}."
            )
    return _check(FUNCTIONS[name](*values))


def _check(value: Number) -> Number:
    if isinstance(value, bool):
        raise ToolError("the result is not a number.")
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ToolError("the result is too large.")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError("the result is too large or undefined.")
        return value
    raise ToolError("the result is not a real number.")
