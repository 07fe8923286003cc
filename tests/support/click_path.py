"""Counts the project modules a click passes through, from the stack at the surface's first call for the resumed run."""

from __future__ import annotations

import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Below the engine's façade: the agent loop, model client, tools and storage do not count as hops.
NOT_COUNTED = ("core/agents/", "core/llm/", "core/tools/", "core/store/")
MAX_CLICK_PATH_MODULES = 4


def project_modules(stack: list[inspect.FrameInfo]) -> list[str]:
    """The project's modules on `stack`, outermost first, each once; tests and libraries left out."""
    modules: list[str] = []
    for frame in reversed(stack):
        if frame.filename.startswith("<"):
            continue  # frozen or generated code: not a project file
        path = Path(frame.filename).resolve()
        try:
            relative = path.relative_to(ROOT).as_posix()
        except ValueError:
            continue  # a library
        if relative.startswith(("tests/", ".venv/")) or relative.startswith(NOT_COUNTED):
            continue
        if relative not in modules:
            modules.append(relative)
    return modules


class StackRecorder:
    """Wraps a surface method: the stack of every call is kept, to read the one after the click."""

    def __init__(self) -> None:
        self.stacks: list[list[str]] = []

    def wrap(self, method):  # type: ignore[no-untyped-def]
        recorder = self

        surface_module = Path(inspect.getfile(method)).resolve().relative_to(ROOT).as_posix()

        async def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
            # The callers, then the surface itself (this wrapper stands in its frame).
            callers = project_modules(inspect.stack())
            recorder.stacks.append(callers + ([surface_module] if surface_module not in callers else []))
            return await method(*args, **kwargs)

        return recorded
