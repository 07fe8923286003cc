"""Counts the project modules a click runs through, from its arrival to the resumed run's first write of its answer."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from core import observe

ROOT = Path(__file__).resolve().parents[2]
# Measured at the resumed run's first post or edit (tests/e2e/test_slack_approvals_e2e.py, test_discord_approvals.py):
# every project module whose code ran for the click, engine and storage included. A click may not grow it.
# The per-team clients (team_clients, team_tokens) joined Slack's with issue 25; the API keys' ledger left both
# (core/quota.py asks a ledger only for its own platform's conversations).
MAX_CLICK_PATH_MODULES = {"slack": 71, "discord": 68}
# Where those modules are, for the map (docs/ARCHITECTURE.md, "The path of a click").
AREAS = (
    "adapters/http/", "adapters/streaming/", "adapters/slack/", "adapters/discord/", "adapters/",
    "core/agents/", "core/llm/", "core/tools/", "core/store/", "core/retrieval/", "core/", "bot/",
)

# Set in the context of the click's first project frame: every task started for the click inherits it,
# so what other tasks run meanwhile (jobs, heartbeats, the emulators) is not counted.
_ON_CLICK: ContextVar[bool] = ContextVar("on_click_path", default=False)


def _project_module(filename: str) -> str | None:
    """`filename` relative to the checkout when it is a project module (tests and libraries are not)."""
    if filename.startswith("<"):
        return None  # frozen or generated code
    try:
        relative = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if relative.startswith(("tests/", ".venv/")) or not relative.endswith(".py"):
        return None
    return relative


def area_of(module: str) -> str:
    return next(area for area in AREAS if module.startswith(area)) if module.startswith(AREAS) else module


class ClickPath:
    """Profiles the event loop's thread from `arm()`: once the click reaches one of `entries` (its first project
    function: the platform's HTTP handler or the button), every project module whose code runs in the click's
    tasks is noted, in order; `path` is that list when the resumed run first writes its answer (`written()`)."""

    def __init__(self, *entries: Callable[..., Any]) -> None:
        self._entries: frozenset[CodeType] = frozenset(entry.__code__ for entry in entries)
        self._modules: dict[str, None] = {}
        self._known: dict[str, str | None] = {}
        self._previous: Any = None
        self._armed = False
        self.path: list[str] | None = None

    def arm(self) -> None:
        self._previous = sys.getprofile()
        self._armed = True
        sys.setprofile(self._profile)

    def disarm(self) -> None:
        if self._armed:
            self._armed = False
            sys.setprofile(self._previous)

    def written(self) -> None:
        """Called at the platform client's message post or edit: the resumed run's first one ends the path."""
        if self._armed and self.path is None and _ON_CLICK.get() and observe.current_run() is not None:
            self.path = list(self._modules)
            self.disarm()

    def by_area(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for module in self.path or ():
            counts[area_of(module)] = counts.get(area_of(module), 0) + 1
        return counts

    def report(self) -> str:
        """The count, where the modules are, and the modules in the order the click reached them."""
        path = self.path or []
        areas = ", ".join(f"{area} {count}" for area, count in sorted(self.by_area().items()))
        return f"{len(path)} modules ({areas}):\n  " + "\n  ".join(path)

    def _note(self, frame: FrameType) -> None:
        filename = frame.f_code.co_filename
        if filename not in self._known:
            self._known[filename] = _project_module(filename)
        module = self._known[filename]
        if module is not None:
            self._modules.setdefault(module, None)

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        if _ON_CLICK.get():
            self._note(frame)
        elif frame.f_code in self._entries:
            _ON_CLICK.set(True)
            # The project frames the entry was called from (an HTTP middleware) are on the path too.
            outer: list[FrameType] = []
            caller = frame.f_back
            while caller is not None:
                outer.append(caller)
                caller = caller.f_back
            for each in reversed(outer):
                self._note(each)
            self._note(frame)
