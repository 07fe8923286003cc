"""The run id and conversation key reach every log line of a run, tasks started inside it included."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core import observe
from core.observe import RunContextFilter

log = logging.getLogger("tests.observe")


def stamped(message: str) -> logging.LogRecord:
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, message, (), None)
    RunContextFilter().filter(record)
    return record


def test_lines_outside_a_run_have_empty_fields() -> None:
    record = stamped("idle")
    assert (record.run_id, record.conversation, record.run_tag) == ("", "", "")


def test_a_run_scope_stamps_its_lines_and_ends_with_the_block() -> None:
    with observe.run_scope(run_id="r1", platform="slack", conversation="slack:T:C:1.0"):
        record = stamped("inside")
        assert (record.run_id, record.conversation) == ("r1", "slack:T:C:1.0")
        assert record.run_tag == " [run r1 slack:T:C:1.0]"
        assert observe.current_platform() == "slack"
    assert stamped("after").run_id == ""
    assert observe.current_platform() == ""


def test_the_engine_joins_the_run_an_adapter_bound_and_names_its_conversation() -> None:
    with observe.run_scope(run_id="answer-1", platform="discord"):
        with observe.run_scope(platform="discord", conversation="discord:G:C:T") as joined:
            assert joined.run_id == "answer-1"
        # The conversation stays named for the rest of the adapter's run.
        assert stamped("later").conversation == "discord:G:C:T"


def test_a_run_scope_without_a_bound_run_binds_a_fresh_id_each_time() -> None:
    with observe.run_scope(conversation="test:W:C") as first:
        pass
    with observe.run_scope(conversation="test:W:C") as second:
        pass
    assert first.run_id and second.run_id and first.run_id != second.run_id


async def test_a_task_started_before_the_conversation_is_named_sees_it_once_named() -> None:
    # Like the streamer's editor task: created by AnswerRunner.play before the engine runs.
    named = asyncio.Event()
    seen: list[logging.LogRecord] = []

    async def editor() -> None:
        seen.append(stamped("before"))
        await named.wait()
        seen.append(stamped("after"))

    with observe.run_scope(run_id="answer-2", platform="slack"):
        task = asyncio.create_task(editor())
        await asyncio.sleep(0)
        observe.name_conversation("slack:T:C:2.0")
        named.set()
        await task
    assert [(r.run_id, r.conversation) for r in seen] == [("answer-2", ""), ("answer-2", "slack:T:C:2.0")]


async def test_tasks_created_with_a_platform_context_know_their_platform() -> None:
    async def which() -> str:
        return observe.current_platform()

    assert await asyncio.create_task(which(), context=observe.platform_context("discord")) == "discord"
    assert observe.current_platform() == ""
    with observe.platform_scope("slack"):
        assert await asyncio.create_task(which()) == "slack"


def test_a_scope_closed_from_another_context_does_not_raise() -> None:
    # An async generator finalised by the loop runs its `finally` in a context that never set the variable.
    import contextvars

    scope = observe.run_scope(run_id="r3")
    context = contextvars.copy_context()
    context.run(scope.__enter__)
    scope.__exit__(None, None, None)  # here, not in `context`: the reset is skipped, not an error


@pytest.mark.parametrize(("parts", "label"), [
    (("slack", "T1", "C1", "1.5"), "slack:T1:C1:1.5"),
    (("discord", "@dm", "42", ""), "discord:@dm:42"),
])
def test_conversation_labels(parts: tuple[str, str, str, str], label: str) -> None:
    platform, workspace, channel, thread = parts
    assert observe.conversation_label(platform=platform, workspace=workspace, channel=channel, thread=thread) == label
