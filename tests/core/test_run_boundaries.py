"""Runs, their endings and the agents talk through public, typed surfaces: one value in, no private reads (issue 23)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from core.agents import BaseAgent
from core.events import Usage
from core.runs import RunNeeds, Runs

ROOT = Path(__file__).resolve().parents[2]
# The run's modules and the agents: each reads only its own private names (self._x), never another object's.
RUN_MODULES = ("core/runs.py", "core/run_endings.py", "core/approvals.py",
               "core/approval_views.py", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "core/agents").glob("*.py")))


def private_reads(path: Path) -> list[str]:
    """`other._name` and getattr(other, "_name") in a module, where `other` is not self or cls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", RUN_MODULES)
def test_the_run_modules_read_no_other_objects_private_state(module: str) -> None:
    path = ROOT / module
    assert path.exists(), module
    assert private_reads(path) == []


def test_runs_are_built_from_one_value_of_what_they_need() -> None:
    assert list(inspect.signature(Runs.__init__).parameters) == ["self", "needs"]
    fields = {field.name for field in dataclasses.fields(RunNeeds)}
    assert {"settings", "deps", "conversations", "continuations", "history", "locks", "stops"} <= fields
    assert RunNeeds.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_an_agent_says_the_tokens_its_loop_counted_through_a_typed_property() -> None:
    usage = inspect.getattr_static(BaseAgent, "usage")
    assert isinstance(usage, property)
    assert inspect.signature(usage.fget).return_annotation in (Usage, "Usage")
