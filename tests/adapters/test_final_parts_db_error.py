"""A database error while recording a posted part of a multi-part final drops none of the parts after it, nor repeats one."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from adapters.slack.surface import SlackFinalDelivery
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.e2e.slack_harness import bot_replies, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

# Generous: every live-record write here meets the renamed table and is retried (~3 s each) before it gives up.
# The DDL goes through an async connection: a blocking one would hold the event loop while its ALTER waits for a
# lock the bot's own open transaction holds, which could then never commit (a deadlock, seen under load).
pytestmark = pytest.mark.timeout(180)

CHANNEL = "C0000PARTS"

# Three of Discord's 2000-character messages' worth, in sentences.
ANSWER = " ".join(f"Sentence {n:03d} of a long answer that needs several messages." for n in range(90))


async def test_a_failing_record_of_posted_parts_still_delivers_every_part_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, database_url: str
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=60, delay_s=0.01))
    async with running_bot(dc, db, openai_emulator):
        asked = await dc.send_user_message(w.channel_id, w.alice, "tell me everything", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await dc.wait_for(lambda: bot_messages(dc, thread.id) or None, what="the first part")
        # From now on every record of a posted message fails in the database (a real error, not a stub).
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("ALTER TABLE live_messages RENAME TO live_messages_away")
            try:
                # Each record of a post is retried ~3 s before it is given up, several per part: far past the
                # usual wait on a loaded machine.
                parts = await wait_for_text(dc, thread.id, ANSWER, timeout=120.0)
            finally:
                await admin.execute("ALTER TABLE live_messages_away RENAME TO live_messages")
        await asyncio.sleep(0.2)
    assert len(parts) >= 3
    assert "".join(m.content for m in bot_messages(dc, thread.id)) == ANSWER  # every part, none twice


async def test_a_kept_final_whose_posted_part_cannot_be_recorded_is_delivered_later_each_part_once(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, database_url: str
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
        final = PendingFinal(
            answer_id="answer-db-1", platform="slack", workspace=slack.team_id, channel=CHANNEL, thread=thread,
            parts=(FinalPart(text="part zero"), FinalPart(text="part one"), FinalPart(text="part two, the end")),
        )
        dead = PendingFinals(db, owner="dead-db-1")
        await dead.keep(final)
        await dead.release("answer-db-1")
        delivery = SlackFinalDelivery(bot.adapter.surfaces)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            # Recording a posted part (its message id in `parts`) fails in the database; the rest still works.
            await admin.execute(
                "CREATE FUNCTION refuse_parts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.parts IS DISTINCT FROM OLD.parts THEN RAISE EXCEPTION 'disk full'; END IF; RETURN NEW; END $$"
            )
            await admin.execute("CREATE TRIGGER refuse_parts BEFORE UPDATE ON pending_finals"
                          " FOR EACH ROW EXECUTE FUNCTION refuse_parts()")
            try:
                assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 0
            finally:
                await admin.execute("DROP TRIGGER refuse_parts ON pending_finals")
                await admin.execute("DROP FUNCTION refuse_parts()")
            assert [m.text for m in bot_replies(slack, CHANNEL, thread)] == ["part zero"]
            await admin.execute("UPDATE pending_finals SET not_before = now() WHERE answer_id = 'answer-db-1'")  # backoff over
        assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 1
        assert [m.text for m in bot_replies(slack, CHANNEL, thread)] == ["part zero", "part one", "part two, the end"]
    finally:
        await bot.stop()


async def test_kept_finals_a_database_outage_interrupted_are_delivered_once_it_is_back(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator, database_url: str
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        threads = [slack.add_user_message(CHANNEL, f"question {n}", "U0000ALICE", None) for n in range(2)]
        dead = PendingFinals(db, owner="dead-db-2")
        for n, thread in enumerate(threads):
            await dead.keep(PendingFinal(answer_id=f"answer-db-2-{n}", platform="slack", workspace=slack.team_id,
                                         channel=CHANNEL, thread=thread, parts=(FinalPart(text=f"answer {n}"),)))
            await dead.release(f"answer-db-2-{n}")
        delivery = SlackFinalDelivery(bot.adapter.surfaces)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            # Once claimed, nothing more about a final can be written: the database went away mid-pass.
            await admin.execute(
                "CREATE FUNCTION refuse_claimed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF OLD.owner <> '' THEN RAISE EXCEPTION 'database going away'; END IF; RETURN NEW; END $$"
            )
            await admin.execute("CREATE TRIGGER refuse_claimed BEFORE UPDATE OR DELETE ON pending_finals"
                          " FOR EACH ROW EXECUTE FUNCTION refuse_claimed()")
            try:
                with pytest.raises(psycopg.Error):
                    await bot.adapter.runner.deliver_pending(delivery, finder=delivery)
            finally:
                await admin.execute("DROP TRIGGER refuse_claimed ON pending_finals")
                await admin.execute("DROP FUNCTION refuse_claimed()")
            await admin.execute("UPDATE pending_finals SET not_before = now() WHERE channel = %s", (CHANNEL,))
        delivered = 0
        for _ in range(3):  # the job's next passes, the database back
            try:
                delivered += await bot.adapter.runner.deliver_pending(delivery, finder=delivery)
            except psycopg.Error:
                pass
        assert delivered == 2
        for n, thread in enumerate(threads):
            assert [m.text for m in bot_replies(slack, CHANNEL, thread)] == [f"answer {n}"]
    finally:
        await bot.stop()
