"""Crash repair finishes an answer's messages together, on the real Postgres: the interrupted note goes on its last
message only, an earlier part keeps its own text (issue 20, note-on-an-earlier-part); and each post's intent records
what its message is known by where the platform gives no key back (the part before it, the answer's start)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from adapters import answers, wording
from adapters.answers import AnswerRunner, post_intent_of
from core.events import AnswerDelta, Event
from core.ports import LiveMessage
from core.store.db import Database
from core.store.live_messages import LiveMessages
from tests.adapters.test_answers import Approvals, Shown
from tests.adapters.test_live_records import LostReplies, die, records

NOTE = wording.interrupted()


async def test_the_note_goes_on_an_answers_last_message_and_an_earlier_part_keeps_its_text(db: Database) -> None:
    """Part 0 was sealed (its final slice, no cursor) and part 1 was streaming when the process died: before, both got
    the note, one of them in the middle of the answer."""
    crashed = LiveMessages(db, owner="rolled-over")
    for message_id in ("11", "12"):
        await crashed.add(LiveMessage(platform="test", workspace="W", channel="C-rolled", message_id=message_id),
                          answer_id="a-rolled")
    await crashed.add(LiveMessage(platform="test", workspace="W", channel="C-rolled", message_id="13"),
                      answer_id="a-alone")
    await die(db, "rolled-over")
    shown = Shown({"11": "The sealed first part.", "12": "The second ▌", "13": "Another answer ▌"})
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="repairs"))
    assert await runner.repair_leftovers(shown) == 3
    assert shown.written == {"12": f"The second\n\n{NOTE}", "13": f"Another answer\n\n{NOTE}"}
    assert await records(db, "C-rolled") == []


async def test_an_earlier_part_still_at_its_cursor_loses_the_cursor_but_gets_no_note(db: Database) -> None:
    crashed = LiveMessages(db, owner="cut-edit")
    for message_id in ("21", "22"):
        await crashed.add(LiveMessage(platform="test", workspace="W", channel="C-cut", message_id=message_id),
                          answer_id="a-cut")
    await die(db, "cut-edit")
    shown = Shown({"21": "The first part ▌", "22": "The second ▌"})
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="repairs-cut"))
    assert await runner.repair_leftovers(shown) == 2
    assert shown.written == {"21": "The first part", "22": f"The second\n\n{NOTE}"}


class SecondReplyLost(LostReplies):
    """The first post's reply arrives; the second's never does (the process dies waiting)."""

    async def post(self, text: str, *, key: str | None = None) -> str:
        if not self.transport.texts:
            return await self.transport.post(text, key=key)
        return await super().post(text, key=key)


async def test_each_posts_intent_names_the_part_before_it_and_the_first_the_answers_start(db: Database) -> None:
    surface = SecondReplyLost("C-intents")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="intents"))
    first_words = "The answer starts here and goes on for a while. "
    seen: list[list[str]] = []

    async def events() -> AsyncIterator[Event]:
        yield AnswerDelta(text=first_words)
        for _ in range(500):  # the first message, and its record alone (its post's intent given way)
            now = await records(db, "C-intents")
            if surface.transport.texts and now == list(surface.transport.texts)[:1]:
                break
            await asyncio.sleep(0.01)
        seen.append(await records(db, "C-intents"))
        yield AnswerDelta(text="More of it, past the message's limit. " * 20)  # rolls over into a second message
        await asyncio.Event().wait()

    play = asyncio.ensure_future(runner.play(events(), surface))
    await asyncio.wait_for(surface.made.wait(), 10)
    left = await records(db, "C-intents")
    play.cancel()
    await asyncio.gather(play, return_exceptions=True)
    for task in asyncio.all_tasks():
        if task.get_coro().__qualname__ == "MessageStreamer._run":  # type: ignore[union-attr]
            task.cancel()
    [[first_record]] = seen
    first_id = list(surface.transport.texts)[0]
    assert first_record == first_id, "the first post's intent gave way to its message's record"
    [intent] = [post_intent_of(message_id) for message_id in left if message_id != first_id]
    assert intent is not None and intent.index == 1 and intent.after == first_id and intent.head is None

    first = post_intent_of(answers.intent_id("a-1", 0, 1700000000.5, head=first_words[: answers.INTENT_HEAD_CHARS]))
    assert first is not None and first.head == first_words[: answers.INTENT_HEAD_CHARS] and first.after is None
    later = post_intent_of(answers.intent_id("a-1", 2, 1700000000.5, after="1234.5678", head="x@y|z"))
    assert later is not None and (later.key, later.index, later.at, later.after, later.head) == (
        "a-1:2", 2, 1700000000.5, "1234.5678", "x@y|z")


async def test_the_first_posts_intent_holds_the_answers_start(db: Database) -> None:
    surface = LostReplies("C-head")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="head"))
    first_words = "  The answer starts here and goes on for a while. "

    async def events() -> AsyncIterator[Event]:
        yield AnswerDelta(text=first_words)
        await asyncio.Event().wait()

    play = asyncio.ensure_future(runner.play(events(), surface))
    await asyncio.wait_for(surface.made.wait(), 10)
    [intent] = [post_intent_of(message_id) for message_id in await records(db, "C-head")]
    play.cancel()
    await asyncio.gather(play, return_exceptions=True)
    for task in asyncio.all_tasks():
        if task.get_coro().__qualname__ == "MessageStreamer._run":  # type: ignore[union-attr]
            task.cancel()
    assert intent is not None and intent.index == 0 and intent.after is None
    assert intent.head == first_words.lstrip()[: answers.INTENT_HEAD_CHARS]
