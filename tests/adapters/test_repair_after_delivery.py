"""Crash repair after the outbox delivered a dead process's kept final, on the real Postgres: the answer's live records
go with its row, so no repair ends a delivered message with the interrupted note (issue 20,
repair-overwrites-kept-final: another process's delivery pass took the final before this one's repair ran)."""

from __future__ import annotations

from adapters import answers
from adapters.answers import AnswerRunner
from core.ports import FinalPart, LiveMessage, PendingFinal
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.pending_finals import PendingFinals
from tests.adapters.test_answers import Approvals, Shown
from tests.adapters.test_live_records import die, records


class FindingShown(Shown):
    """Shown messages with the platform's look-up of a post by its key (Slack: the part's metadata)."""

    def __init__(self, texts: dict[str, str | None], keys: dict[str, str]) -> None:
        super().__init__(texts)
        self.keys = keys

    async def find_post(self, message: LiveMessage, key: str, *, since: float) -> str | None:
        return self.keys.get(key)


class Delivery:
    """A FinalDelivery and PartFinder over `shown`: finds the part its dead process posted unseen, edits it whole."""

    def __init__(self, shown: FindingShown) -> None:
        self.shown = shown

    async def post_part(self, final: PendingFinal, index: int, text: str) -> str:
        raise AssertionError("the part is shown already: it is found, never posted again")

    async def edit_part(self, final: PendingFinal, message_id: str, text: str) -> None:
        self.shown.texts[message_id] = text

    async def find_part(self, final: PendingFinal, index: int, *, since: float) -> str | None:
        return self.shown.keys.get(f"{final.answer_id}:{index}")


async def test_a_post_intent_of_a_final_another_process_delivered_is_not_repaired(db: Database) -> None:
    """The dead process kept its final and recorded the intent of part 1's post, whose reply it never saw. A delivery
    pass of another process finds the part and finishes it whole; a repair after that must leave it whole (before:
    the intent outlived the row, and repair found the message by its key and added the note)."""
    at = 1_700_000_000.0
    dead_live, dead_outbox = LiveMessages(db, owner="dead-keeper"), PendingFinals(db, owner="dead-keeper")
    place = {"platform": "test", "workspace": "W", "channel": "C-delivered-first"}
    await dead_live.add(LiveMessage(**place, message_id=answers.intent_id("a-whole", 1, at)), answer_id="a-whole")
    await dead_outbox.keep(PendingFinal(**place, answer_id="a-whole", thread="", parts=(
        FinalPart(text="The first part. ", message_id="m1"), FinalPart(text="The second part."),
    )), attempted={1: at})
    await die(db, "dead-keeper")
    shown = FindingShown({"m1": "The first part. ", "m2": "The sec ▌"}, keys={"a-whole:1": "m2"})

    deliverer = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="deliverer"),
                             outbox=PendingFinals(db, owner="deliverer"))
    delivery = Delivery(shown)
    assert await deliverer.deliver_pending(delivery, finder=delivery) == 1
    assert shown.texts["m2"] == "The second part."
    assert await records(db, "C-delivered-first") == [], "the answer's records went with its row"

    repairer = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="repairer"))
    assert await repairer.repair_leftovers(shown) == 0
    assert shown.written == {}, "a delivered part gets no note"


async def test_a_record_of_a_kept_final_is_never_claimed_even_if_its_owner_went_stale_meanwhile(db: Database) -> None:
    """take_all drops the orphans of kept finals, then claims the rest, in two statements: an owner found stale only by
    the second (its heartbeat went stale between them) had its record claimed and repaired, note and all, although
    the outbox holds its final (seen in a 3,000-schedule sweep)."""
    place = {"platform": "test", "workspace": "W", "channel": "C-stale-between"}
    await LiveMessages(db, owner="going-stale").add(LiveMessage(**place, message_id="5"), answer_id="a-race")
    await PendingFinals(db, owner="going-stale").keep(PendingFinal(**place, answer_id="a-race", thread="", parts=(
        FinalPart(text="The kept answer, whole.", message_id="5"),)))
    async with db.connection() as conn:
        # The owner's heartbeat goes stale right after the first statement, as a process dying then would leave it.
        await conn.execute(
            "CREATE OR REPLACE FUNCTION stale_between() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " UPDATE process_heartbeats SET seen_at = now() - interval '1 hour' WHERE owner = 'going-stale';"
            " RETURN NULL; END $$"
        )
        await conn.execute("CREATE TRIGGER stale_between AFTER DELETE ON live_messages"
                           " FOR EACH STATEMENT EXECUTE FUNCTION stale_between()")
    try:
        repairer = AnswerRunner(platform="test", approvals=Approvals(), live=LiveMessages(db, owner="racing-repairer"))
        shown = FindingShown({"5": "The kept answer, whole."}, keys={})
        assert await repairer.repair_leftovers(shown) == 0
        assert shown.written == {}, "the outbox finishes it"
    finally:
        async with db.connection() as conn:
            await conn.execute("DROP TRIGGER stale_between ON live_messages")
    await PendingFinals(db, owner="going-stale").delivered("a-race")
    assert await records(db, "C-stale-between") == []
