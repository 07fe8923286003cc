"""The outbox side of an answer under database faults: a kept final names each message once, a failed keep is not
read as a hand-over, a kept part carries its unseen post, and a delivered final leaves no row behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from adapters.answers import AnswerPlace, AnswerRunner, Pacing
from adapters.streaming import MonotonicClock, RateBudget, RateLimited, StreamLimits
from core.approvals import ApprovalView
from core.citations import Citation
from core.events import AnswerDelta, Done, Event
from core.store.db import Database
from tests.adapters.streaming_fakes import MemoryTransport
from tests.support.ports import ports_for

pytestmark = pytest.mark.timeout(60)

MAX_CHARS = 200
# Three messages' worth of MAX_CHARS, in sentences.
LONG_ANSWER = " ".join(f"Sentence {n:02d} of an answer in three parts." for n in range(12))


class Approvals:
    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None: ...

    async def withdraw(self, continuation_id: str) -> bool:
        return True

    async def view(self, continuation_id: str) -> ApprovalView | None:
        return None


class Surface:
    """An answer's place on an in-memory platform, streamed on the real clock (the database is real)."""

    def __init__(self, channel: str) -> None:
        clock = MonotonicClock()
        self.transport = MemoryTransport(clock=clock, latency_s=0.01)  # type: ignore[arg-type]
        self.place = AnswerPlace(platform="test", workspace="W", channel=channel)
        self.pacing = Pacing(
            limits=StreamLimits(max_chars=MAX_CHARS, placeholder_after_s=30.0),
            edit_budget=RateBudget(capacity=50, refill_per_s=50, clock=clock),
            post_budget=RateBudget(capacity=50, refill_per_s=50, clock=clock), clock=clock,
        )

    async def post(self, text: str, *, key: str | None = None) -> str:
        return await self.transport.post(text, key=key)

    async def edit(self, message_id: str, text: str) -> None:
        await self.transport.edit(message_id, text)

    async def show_working(self) -> None: ...

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        return {}

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None: ...

    async def show_notice(self, text: str) -> None: ...


async def _events(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


@pytest.fixture
def admin(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@contextmanager
def refused(admin: psycopg.Connection[Any], channel: str, *, nth: int, ops: str = "INSERT OR UPDATE") -> Iterator[None]:
    """The `nth` write (`ops`) of the channel's kept final fails in the database (a blip), the others pass; the
    count is a sequence, which the refused statement's rollback does not undo."""
    tag = uuid.uuid4().hex[:8]
    admin.execute(f"CREATE SEQUENCE writes_{tag}")
    admin.execute(
        f"CREATE FUNCTION refuse_{tag}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.channel ELSE NEW.channel END) = '{channel}'"
        f" AND nextval('writes_{tag}') = {nth} THEN"
        " RAISE EXCEPTION 'terminating connection: the database is restarting'; END IF;"
        " RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END; END $$"
    )
    admin.execute(f"CREATE TRIGGER refuse_{tag} BEFORE {ops} ON pending_finals FOR EACH ROW EXECUTE FUNCTION refuse_{tag}()")
    try:
        yield
    finally:
        admin.execute(f"DROP TRIGGER refuse_{tag} ON pending_finals")
        admin.execute(f"DROP FUNCTION refuse_{tag}()")
        admin.execute(f"DROP SEQUENCE writes_{tag}")


def kept_row(admin: psycopg.Connection[Any], channel: str) -> tuple[Any, Any] | None:
    row = admin.execute("SELECT parts, attempted FROM pending_finals WHERE channel = %s", (channel,)).fetchone()
    return None if row is None else (row[0], row[1])


def new_channel() -> str:
    return f"C{uuid.uuid4().hex[:10].upper()}"


async def test_a_final_kept_while_a_posted_part_is_being_recorded_names_each_message_once(
    db: Database, admin: psycopg.Connection[Any]
) -> None:
    channel = new_channel()
    surface = Surface(channel)
    ports = ports_for(db)  # one process
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=ports.live, outbox=ports.outbox)
    admin.execute("CREATE TABLE IF NOT EXISTS kept_versions (channel text NOT NULL, parts jsonb NOT NULL)")
    admin.execute(
        "CREATE OR REPLACE FUNCTION log_kept() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO kept_versions VALUES (NEW.channel, NEW.parts); RETURN NULL; END $$"
    )
    admin.execute("CREATE OR REPLACE TRIGGER log_kept AFTER INSERT OR UPDATE OF parts ON pending_finals"
                  " FOR EACH ROW EXECUTE FUNCTION log_kept()")
    # The record of the second message is slow (a busy database): the final is kept meanwhile (after
    # FINAL_PENDING_AFTER_S), with that message's id already on its part and the third part still to post.
    admin.execute(
        "CREATE OR REPLACE FUNCTION slow_record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF NEW.channel = '{channel}' AND NEW.message_id = 'm2' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$"
    )
    admin.execute("CREATE OR REPLACE TRIGGER slow_record BEFORE INSERT ON live_messages"
                  " FOR EACH ROW EXECUTE FUNCTION slow_record()")
    try:
        await runner.play(_events(AnswerDelta(text=LONG_ANSWER), Done(answer=LONG_ANSWER)), surface)
    finally:
        admin.execute("DROP TRIGGER slow_record ON live_messages")
    assert "".join(surface.transport.final_texts()) == LONG_ANSWER and len(surface.transport.texts) == 3
    versions = [row[0] for row in admin.execute("SELECT parts FROM kept_versions WHERE channel = %s", (channel,))]
    assert versions, "the final was kept while the second message's record was slow"
    for parts in versions:
        ids = [part["message_id"] for part in parts if part["message_id"]]
        assert len(ids) == len(set(ids)), f"a kept final names a message for two parts: {ids}"


async def test_a_final_whose_keep_failed_in_a_blip_is_kept_again_and_posted_not_lost(
    db: Database, admin: psycopg.Connection[Any]
) -> None:
    channel = new_channel()
    surface = Surface(channel)
    ports = ports_for(db)  # one process
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=ports.live, outbox=ports.outbox)
    surface.transport.faults.append(RateLimited(0.3))  # the final's post: "later", so the final is kept
    with refused(admin, channel, nth=1):  # ...and that keep fails: there is no row
        await runner.play(_events(Done(answer="The final answer, whole.")), surface)
    assert surface.transport.final_texts() == ["The final answer, whole."], "nobody else had it to deliver"
    assert kept_row(admin, channel) is None


async def test_a_final_kept_while_a_post_is_unseen_holds_that_attempt_in_the_same_write(
    db: Database, admin: psycopg.Connection[Any]
) -> None:
    channel = new_channel()
    surface = Surface(channel)
    ports = ports_for(db)  # one process
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=ports.live, outbox=ports.outbox)
    surface.transport.gate = asyncio.Event()  # the first post hangs: sent, its outcome not seen
    # Any write after the keep fails (as if the process died right after it): the attempt must be in the keep.
    with refused(admin, channel, nth=2):
        playing = asyncio.ensure_future(runner.play(_events(Done(answer="Posted once, or found.")), surface))
        try:
            for _ in range(100):  # the final is kept FINAL_PENDING_AFTER_S after the answer ended
                await asyncio.sleep(0.05)
                row = kept_row(admin, channel)
                if row is not None:
                    break
            await asyncio.sleep(0.3)  # what the keep's write is followed by, if anything
            row = kept_row(admin, channel)
            assert row is not None, "the final is kept while its post waits"
            parts, attempted = row
            assert [part["message_id"] for part in parts] == [None]
            assert set(attempted) == {"0"}, "the kept part says its post was sent, for the next process to look up"
        finally:
            surface.transport.gate.set()
            await playing
    assert surface.transport.final_texts() == ["Posted once, or found."]


async def test_a_delivered_final_whose_row_drop_fails_in_a_blip_leaves_no_row(
    db: Database, admin: psycopg.Connection[Any]
) -> None:
    channel = new_channel()
    surface = Surface(channel)
    ports = ports_for(db)  # one process
    runner = AnswerRunner(platform="test", approvals=Approvals(), live=ports.live, outbox=ports.outbox)
    surface.transport.faults.append(RateLimited(0.3))  # kept while it waits
    with refused(admin, channel, nth=1, ops="DELETE"):  # the drop of the delivered final fails once
        await runner.play(_events(Done(answer="Delivered once.")), surface)
    assert surface.transport.final_texts() == ["Delivered once."]
    assert kept_row(admin, channel) is None, "a row left would be delivered again by the next process"
