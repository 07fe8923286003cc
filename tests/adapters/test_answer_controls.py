"""Optional answer controls are a typed protocol (issue 23): a surface has AnswerControls whole or not at all, every
platform's surface has them, and no control is looked up by its name as a string."""

from __future__ import annotations

import ast
from pathlib import Path

from adapters.answer_protocols import AnswerControls, PostFinder
from adapters.answers import AnswerRunner
from adapters.discord.surface import DiscordShownMessages, DiscordSurface
from adapters.slack.native_stream import NativeSlackSurface
from adapters.slack.surface import SlackShownMessages, SlackSurface
from core.events import AnswerDelta, Done, RunStarted
from tests.adapters.streaming_fakes import FakeClock
from tests.adapters.test_answers import Approvals, MemoryLive, RecordingSurface, _events

ROOT = Path(__file__).resolve().parents[2]
CONTROL_NAMES = {"show_stop", "end_stop", "clear_stop", "will_finish", "show_feedback", "find_post", "controls",
                 "controlled", "show_view"}


class ControlledSurface(RecordingSurface):
    """Every control, each call noted in order."""

    async def show_stop(self, run_id: str) -> None:
        self.calls.append(f"show_stop {run_id}")

    async def end_stop(self) -> None:
        self.calls.append("end_stop")

    async def clear_stop(self) -> None:
        self.calls.append("clear_stop")

    async def will_finish(self, run_id: str) -> None:
        self.calls.append(f"will_finish {run_id}")

    async def show_feedback(self, run_id: str, answer_ids: list[str]) -> None:
        self.calls.append(f"show_feedback {run_id} {len(answer_ids)}")


class StopOnlySurface(RecordingSurface):
    """A Stop button and nothing else: not AnswerControls."""

    async def show_stop(self, run_id: str) -> None:
        self.calls.append(f"show_stop {run_id}")


def test_every_platforms_surface_has_the_controls_whole_and_its_read_back_finds_posts() -> None:
    for surface in (SlackSurface, NativeSlackSurface, DiscordSurface):
        assert issubclass(surface, AnswerControls), surface
    for shown in (SlackShownMessages, DiscordShownMessages):
        assert issubclass(shown, PostFinder), shown
    assert not issubclass(StopOnlySurface, AnswerControls)


async def test_a_surface_with_the_controls_gets_each_in_order() -> None:
    clock = FakeClock()
    surface = ControlledSurface(clock)
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    events = _events(RunStarted(run_id="r-1", asked_by="U1"), AnswerDelta(text="Done."), Done(answer="Done."))
    await clock.run(runner.play(events, surface))
    assert surface.calls == ["working", "show_stop r-1", "end_stop", "will_finish r-1", "show_feedback r-1 1",
                             "clear_stop"]
    assert surface.transport.final_texts() == ["Done."]


async def test_a_surface_with_only_some_controls_is_offered_none() -> None:
    """Before, each control was looked up by name: a surface with a Stop button but no way to take it away kept it
    on an answer that had ended."""
    clock = FakeClock()
    surface = StopOnlySurface(clock)
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=MemoryLive())
    events = _events(RunStarted(run_id="r-2", asked_by="U1"), AnswerDelta(text="Done."), Done(answer="Done."))
    await clock.run(runner.play(events, surface))
    assert surface.calls == ["working"]
    assert surface.transport.final_texts() == ["Done."]


def test_no_control_is_looked_up_by_its_name() -> None:
    files = [*sorted((ROOT / "adapters").glob("answer*.py")), ROOT / "adapters" / "discord" / "surface.py",
             ROOT / "adapters" / "slack" / "surface.py"]
    lookups = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CONTROL_NAMES):
                lookups.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.args[1].value}")
    assert lookups == []
