"""Live records through database blips, on the real Postgres: a record is written and dropped whatever the blip, a
message is repaired at most once, and a message whose answer's final is kept is left to the outbox (issue 20)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adapters import live_records, wording
from adapters.answers import AnswerPlace, AnswerRunner
from adapters.streaming import MonotonicClock
from core.events import AnswerDelta, Done, Event
from core.ports import FinalPart, LiveMessage, PendingFinal
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.pending_finals import PendingFinals
from tests.adapters.test_answers import Approvals, RecordingSurface, Shown

NOTE = wording.interrupted()


async def blip(db: Database, operation: str, seconds: float) -> None:
    """Every `operation` (INSERT or DELETE) on live_messages refused for `seconds`, as by a restarting database."""
    async with db.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS live_blips (op text NOT NULL, until timestamptz NOT NULL)")
        await conn.execute(
            "CREATE OR REPLACE FUNCTION live_blip_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF EXISTS (SELECT 1 FROM live_blips WHERE op = TG_OP AND until > clock_timestamp()) THEN"
            " RAISE EXCEPTION 'terminating connection: the database is restarting' USING ERRCODE = '57P01';"
            " END IF; RETURN COALESCE(NEW, OLD); END $$"
        )
        await conn.execute("DROP TRIGGER IF EXISTS live_blip ON live_messages")
        await conn.execute("CREATE TRIGGER live_blip BEFORE INSERT OR DELETE ON live_messages"
                           " FOR EACH ROW EXECUTE FUNCTION live_blip_refuse()")
        await conn.execute("DELETE FROM live_blips")
        await conn.execute("INSERT INTO live_blips (op, until) VALUES (%s, clock_timestamp() + make_interval(secs => %s))",
                           (operation, seconds))


async def unblip(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute("DELETE FROM live_blips")


async def records(db: Database, channel: str) -> list[str]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT message_id FROM live_messages WHERE channel = %s ORDER BY message_id",
                                    (channel,))
        return [row[0] for row in await cursor.fetchall()]


async def die(db: Database, owner: str) -> None:
    async with db.connection() as conn:
        await conn.execute("UPDATE process_heartbeats SET seen_at = now() - interval '1 hour' WHERE owner = %s", (owner,))


async def _events(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


def surface_in(channel: str) -> RecordingSurface:
    surface = RecordingSurface(MonotonicClock())  # type: ignore[arg-type]
    surface.place = AnswerPlace(platform="test", workspace="W", channel=channel)
    return surface


async def test_a_delivered_answers_record_whose_delete_meets_a_blip_is_still_dropped(db: Database) -> None:
    """stale-live-record-repaired: the delete of the delivered answer's record is retried through the blip, so the
    next process's repair finds nothing (before: only logged, and the whole answer got the interrupted note)."""
    surface = surface_in("C-stale")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="first"))
    await blip(db, "DELETE", 0.3)
    await runner.play(_events(AnswerDelta(text="The whole answer."), Done(answer="The whole answer.")), surface)
    assert await records(db, "C-stale") == []
    await die(db, "first")
    later = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="second"))
    shown = Shown({message_id: text for message_id, text in surface.transport.texts.items()})
    assert await later.repair_leftovers(shown) == 0 and shown.written == {}


async def test_a_delete_failing_past_its_retries_is_done_on_the_next_round(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_records, "LIVE_WRITE_RETRY_S", (0.01,))
    surface = surface_in("C-later")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="slow"))
    await blip(db, "DELETE", 60)
    await runner.play(_events(AnswerDelta(text="Done at last."), Done(answer="Done at last.")), surface)
    assert await records(db, "C-later") != [], "the blip outlasted the retries"
    await unblip(db)
    assert await runner.repair_leftovers(Shown({})) == 0
    assert await records(db, "C-later") == []


async def test_a_repaired_message_whose_record_outlives_the_repair_gets_no_second_note(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """repaired-record-kept: the record's delete after a repair is retried on the next round; and a message already
    ending with the note (its repairer died before dropping the record) is not repaired again."""
    monkeypatch.setattr(live_records, "LIVE_WRITE_RETRY_S", (0.01,))
    await LiveMessages(db, owner="crashed").add(
        LiveMessage(platform="test", workspace="W", channel="C-twice", message_id="1"), answer_id="a-twice")
    await die(db, "crashed")
    repairer = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="repairer"))
    shown = Shown({"1": "Half an answer ▌"})
    await blip(db, "DELETE", 60)
    assert await repairer.repair_leftovers(shown) == 1
    assert await records(db, "C-twice") == ["1"]
    await unblip(db)
    await repairer.repair_leftovers(shown)
    assert await records(db, "C-twice") == [], "dropped on the next round"

    await LiveMessages(db, owner="crashed-again").add(
        LiveMessage(platform="test", workspace="W", channel="C-twice", message_id="2"), answer_id="a-again")
    await die(db, "crashed-again")
    already = Shown({"2": f"Half an answer\n\n{NOTE}"})
    assert await repairer.repair_leftovers(already) == 1
    assert already.written == {}, "one note, never two"
    assert await records(db, "C-twice") == []


async def test_a_message_of_a_kept_final_is_left_to_the_outbox_not_repaired(db: Database) -> None:
    """repair-overwrites-kept-final: the crashed process kept the final but died before dropping the record."""
    crashed = LiveMessages(db, owner="keeper")
    await crashed.add(LiveMessage(platform="test", workspace="W", channel="C-kept", message_id="1"), answer_id="a-kept")
    await crashed.add(LiveMessage(platform="test", workspace="W", channel="C-kept", message_id="2"), answer_id="a-lost")
    await PendingFinals(db, owner="keeper").keep(PendingFinal(
        answer_id="a-kept", platform="test", workspace="W", channel="C-kept", thread="",
        parts=(FinalPart(text="The kept answer.", message_id=None),),
    ))
    await die(db, "keeper")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="next"))
    shown = Shown({"1": "The kept ▌", "2": "Another ▌"})
    assert await runner.repair_leftovers(shown) == 1
    assert shown.written == {"2": f"Another\n\n{NOTE}"}, "only the answer with no kept final is repaired"
    assert await records(db, "C-kept") == []
    await PendingFinals(db, owner="next").delivered("a-kept")


async def test_a_record_is_written_through_a_blip_so_a_crash_after_it_leaves_nothing_at_the_cursor(db: Database) -> None:
    """unrecorded-message-after-crash (its failed-write half): the record is retried, not only logged."""
    surface = surface_in("C-add")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="adder"))
    await blip(db, "INSERT", 0.3)
    seen: list[tuple[list[str], list[str]]] = []

    async def messages_recorded() -> list[str]:  # the messages' own records (a post's intent record goes with them)
        return [message_id for message_id in await records(db, "C-add") if not message_id.startswith(live_records.INTENT_MARK)]

    async def events() -> AsyncIterator[Event]:
        yield AnswerDelta(text="Half")
        for _ in range(500):  # the post, then its record (at most a few seconds of retries)
            if surface.transport.texts and await messages_recorded():
                break
            await MonotonicClock().sleep(0.01)
        seen.append((await messages_recorded(), list(surface.transport.texts)))
        yield Done(answer="Half")

    await runner.play(events(), surface)
    assert seen == [(["m1"], ["m1"])], "recorded through the blip, while it streamed"
    assert await records(db, "C-add") == []


class LostReplies(RecordingSurface):
    """The platform makes each message and keeps its key, but its reply never arrives (the process dies waiting)."""

    def __init__(self, channel: str) -> None:
        super().__init__(MonotonicClock())  # type: ignore[arg-type]
        self.place = AnswerPlace(platform="test", workspace="W", channel=channel)
        self.keys: dict[str, str] = {}
        self.made = asyncio.Event()

    async def post(self, text: str, *, key: str | None = None) -> str:
        message_id = await self.transport.post(text, key=key)
        self.keys[key or ""] = message_id
        self.made.set()
        await asyncio.Event().wait()  # the reply is lost: nobody here learns the id
        return message_id


class Finding(Shown):
    """Shown messages with the platform's look-up of a post by its key (Slack: metadata; Discord: the channel)."""

    def __init__(self, surface: LostReplies) -> None:
        super().__init__(surface.transport.texts)  # type: ignore[arg-type]
        self.surface = surface
        self.looked_up: list[tuple[str, float]] = []

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None:
        self.looked_up.append((key, since))
        return self.surface.keys.get(key)


async def test_a_message_made_before_its_process_died_unseen_is_found_and_repaired(db: Database) -> None:
    """unrecorded-message-after-crash: the post's record is written before it is sent, so a process dying before the
    platform's reply leaves a record, and the next process finds the message by its key and finishes it."""
    surface = LostReplies("C-unseen")
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="dying"))

    async def events() -> AsyncIterator[Event]:
        yield AnswerDelta(text="The start of it")
        await asyncio.Event().wait()

    play = asyncio.ensure_future(runner.play(events(), surface))
    await asyncio.wait_for(surface.made.wait(), 10)
    play.cancel()  # killed: its tasks stop where they are
    await asyncio.gather(play, return_exceptions=True)
    for task in asyncio.all_tasks():  # the streamer's editor task dies with its process
        if task.get_coro().__qualname__ == "MessageStreamer._run":  # type: ignore[union-attr]
            task.cancel()
    await die(db, "dying")
    assert len(await records(db, "C-unseen")) == 1, "recorded before it was sent"
    later = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="after"))
    shown = Finding(surface)
    assert await later.repair_leftovers(shown) == 1
    [(key, since)] = shown.looked_up
    assert key.endswith(":0") and since > 0
    assert shown.written == {"m1": f"The start of it\n\n{NOTE}"}
    assert await records(db, "C-unseen") == []
