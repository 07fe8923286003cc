"""Discord's one door: a POST Discord carried out is never done twice (5xx or a lost connection after the
work, past the nonce's window), and Discord's errors are read by one rule (permanent or "later")."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import discord
import pytest

from adapters.discord.notifier import DiscordNotifier
from adapters.discord.surface import DiscordFinalDelivery
from adapters.discord.transport import ChannelTransport, guarded
from adapters.discord.transport_http import OutcomeUnknown, is_permanent
from adapters.streaming import MonotonicClock, TransientSendError
from adapters.streaming.send import SEND_ATTEMPTS
from adapters.streaming.transport import PermanentSendError
from core.ports import FinalPart, PendingFinal
from core.requests import ConversationKey
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text

ANSWER = "the database first, then the cache"


async def test_a_post_discord_did_before_answering_500_is_not_sent_again_by_discord_py(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(w.channel_id)
        dc.fail_after_work("message_create", status=500)
        with pytest.raises(OutcomeUnknown):
            await guarded(channel.send("once"))
    # discord.py's own loop used to send it up to five times.
    assert [m.content for m in bot_messages(dc, w.channel_id)] == ["once"]
    assert len(dc.requests_to("message_create")) == 1


@pytest.mark.parametrize("kind", ["status", "drop"])
async def test_a_part_whose_reply_was_lost_past_the_nonce_window_is_found_not_posted_twice(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, kind: str
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    # Discord remembers a nonce for minutes; a retry later than that is a new message unless looked up.
    dc.set_nonce_window(0.0)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        transport = ChannelTransport(adapter.client.get_partial_messageable(w.channel_id))
        dc.fail_after_work("message_create", kind=kind)  # type: ignore[arg-type]
        with pytest.raises(TransientSendError):
            await transport.post("part one", key="answer-1:0")
        message_id = await transport.post("part one", key="answer-1:0")
    posted = bot_messages(dc, w.channel_id)
    assert [m.content for m in posted] == ["part one"]
    assert message_id == str(posted[0].id)


async def test_a_kept_final_delivered_after_the_nonce_window_reuses_the_part_a_lost_reply_posted(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    """Process A streamed part 0 (its reply lost), kept the final with the attempt and stopped; B delivers it
    after Discord forgot the nonce. B finds A's message (showing a streamed start, cursor and all) among
    other messages of the bot, finishes it, and posts only part 1."""
    dc = discord_emulator
    w = make_world(dc)
    dc.set_nonce_window(0.0)
    final = PendingFinal(
        answer_id="answer-2", platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id), thread="",
        parts=(FinalPart(text="part one, whole"), FinalPart(text="part two")),
    )
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(w.channel_id)
        attempted = time.time()
        dc.fail_after_work("message_create", kind="drop")
        with pytest.raises(TransientSendError):
            await ChannelTransport(channel).post("part one ▌", key="answer-2:0")
        await guarded(channel.send("another answer's words"))
        gone = PendingFinals(db, owner="gone-a")
        await gone.keep(final)
        assert await gone.attempting("answer-2", 0, at=attempted)
        await gone.release("answer-2")
        delivery = DiscordFinalDelivery(adapter.client, adapter.budgets, MonotonicClock())
        assert await adapter.runner.deliver_pending(delivery, finder=delivery) == 1
    assert [m.content for m in bot_messages(dc, w.channel_id)] == ["part one, whole", "another answer's words", "part two"]


async def test_an_answer_streams_once_when_its_first_post_and_an_edit_answer_500_after_the_work(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    dc.set_nonce_window(0.0)
    openai_emulator.script(Text(ANSWER))
    async with running_bot(dc, db, openai_emulator):
        dc.fail_after_work("message_create", status=502)
        dc.fail_after_work("message_edit", status=500)
        asked = await dc.send_user_message(w.channel_id, w.alice, "which first?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, ANSWER)
    assert [m.content for m in bot_messages(dc, thread.id) if not m.embeds] == [ANSWER]


async def test_a_thread_opened_before_a_500_is_used_not_opened_again(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER))
    async with running_bot(dc, db, openai_emulator):
        dc.fail_after_work("thread_from_message", status=500)
        asked = await dc.send_user_message(w.channel_id, w.alice, "which first?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, ANSWER)
    # Answered in the thread the first call opened, not in the channel as if none could be opened.
    assert bot_messages(dc, w.channel_id) == []
    assert len(dc.requests_to("thread_from_message")) == 1


async def test_missing_permissions_is_retried_and_an_unknown_channel_is_permanent(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    closed = dc.add_channel(w.guild_id, "no-threads", threads_allowed=False)
    asked = await dc.send_user_message(closed, w.alice, "hello")
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(closed, guild_id=w.guild_id)
        message = await guarded(channel.fetch_message(asked))
        # 403 Missing Permissions (50013): an admin may grant it; retried with backoff, never dropped.
        with pytest.raises(TransientSendError) as missing:
            await guarded(message.create_thread(name="t"))
        assert not isinstance(missing.value, PermanentSendError)
        # 404 Unknown Channel (10003): never; still the discord.py error callers tell apart.
        with pytest.raises(PermanentSendError) as unknown:
            await guarded(adapter.client.get_partial_messageable(123456789).send("nowhere"))
        assert isinstance(unknown.value, discord.NotFound) and unknown.value.code == 10003


def test_discord_documents_which_errors_are_permanent() -> None:
    assert is_permanent(status=404, code=10003)  # Unknown Channel
    assert is_permanent(status=404, code=10008)  # Unknown Message
    assert is_permanent(status=403, code=50001)  # Missing Access, for that channel
    assert not is_permanent(status=403, code=50013)  # Missing Permissions: may be granted
    assert not is_permanent(status=409, code=0)


async def test_an_ask_overflow_followup_discord_made_before_a_500_is_not_made_twice(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    long_answer = "word " * 900  # three messages: the response, then two followups
    openai_emulator.script(Text(long_answer, chunk_chars=300))
    async with running_bot(dc, db, openai_emulator):
        dc.fail_after_work("webhook_create", status=500)
        await dc.invoke_slash("ask", {"question": "long one"}, w.alice, w.channel_id)

        def shown() -> str:
            return "".join(m.content for m in bot_messages(dc, w.channel_id))

        await dc.wait_for(lambda: shown() == long_answer, 20, what="the whole answer, once")
    assert dc.faults.fired == 1
    assert len(bot_messages(dc, w.channel_id)) == 3


async def test_an_interaction_is_answered_while_the_channels_deliveries_wait_out_a_long_429(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    """Interaction responses have 3 s and a lane of their own: never behind the channel's or the bot's budget."""
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER))
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        adapter.budgets(w.channel_id).penalize(60.0)
        assert adapter.budgets.global_budget is not None
        adapter.budgets.global_budget.penalize(60.0)
        interaction_id = await dc.invoke_slash("ask", {"question": "now?"}, w.alice, w.channel_id)
        responses = await dc.wait_for(lambda: dc.interaction_responses(interaction_id), 2.5, what="the deferral")
    assert responses[0].kind == "callback" and responses[0].callback_type == 5


async def test_reading_a_conversation_takes_a_call_of_the_bot_wide_budget_first(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    await dc.send_user_message(w.channel_id, w.alice, "earlier words")
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True) as (adapter, _):
        conversation = ConversationKey(platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id))
        assert adapter.budgets.global_budget is not None
        adapter.budgets.global_budget.penalize(1.5)
        reading = asyncio.create_task(adapter.reader.read(conversation, scope="channel", limit=10))
        await asyncio.sleep(0.3)
        # Paused by a 429 on the bot-wide limit: the read waits for it instead of adding to it.
        assert dc.requests_to("message_list") == [] and not reading.done()
        read = await reading
    assert [m.text for m in read] == ["earlier words"]


async def test_an_ask_whose_deferral_answered_500_after_the_work_is_still_answered(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER))
    async with running_bot(dc, db, openai_emulator):
        dc.fail_after_work("interaction_callback", status=500)
        interaction_id = await dc.invoke_slash("ask", {"question": "which first?"}, w.alice, w.channel_id)
        await wait_for_text(dc, w.channel_id, ANSWER)
    # One deferral: sent again, Discord would refuse it as already acknowledged and the answer would be lost.
    assert [r.kind for r in dc.interaction_responses(interaction_id)].count("callback") == 1


async def test_a_re_post_answered_with_the_first_message_for_its_nonce_shows_the_new_text(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    """Within the nonce's window Discord returns the first message, which shows the first attempt's text."""
    dc = discord_emulator
    w = make_world(dc)
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        transport = ChannelTransport(adapter.client.get_partial_messageable(w.channel_id))
        dc.fail_after_work("message_create", kind="drop")
        with pytest.raises(TransientSendError):
            await transport.post("the data ▌", key="answer-3:0")
        message_id = await transport.post("the database first", key="answer-3:0")
    [posted] = bot_messages(dc, w.channel_id)
    assert (str(posted.id), posted.content) == (message_id, "the database first")


async def test_a_lost_placeholder_is_not_confused_with_another_answers_placeholder(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    """Two answers in one channel, each replying to its question, both first show the placeholder."""
    dc = discord_emulator
    w = make_world(dc)
    dc.set_nonce_window(0.0)
    first = await dc.send_user_message(w.channel_id, w.alice, "one?")
    second = await dc.send_user_message(w.channel_id, w.bob, "two?")
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        channel = adapter.client.get_partial_messageable(w.channel_id)
        # The other answer's placeholder comes first, within the look-up's reach (its skew margin).
        others = await ChannelTransport(channel, reply_to=second).post("_thinking…_", key="answer-5:0")
        mine = ChannelTransport(channel, reply_to=first)
        dc.fail_after_work("message_create", status=500)
        with pytest.raises(TransientSendError):
            await mine.post("_thinking…_", key="answer-4:0")
        found = await mine.post("_thinking…_", key="answer-4:0")
    assert found != others
    assert {m.message_reference["message_id"] for m in bot_messages(dc, w.channel_id)} == {str(first), str(second)}


async def held() -> None:
    """The reminder's claim is this process's throughout."""


class QuickClock(MonotonicClock):
    """Real time, with backoffs a hundredth as long."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / 100)


async def test_a_reminder_retried_after_an_unseen_post_is_found_not_posted_twice(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    """The reminder job retries a delivery that failed; its last post may have arrived (found by the look-up from the recorded attempt, past the nonce's window)."""
    dc = discord_emulator
    w = make_world(dc)
    conversation = ConversationKey(platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id))
    async with running_bot(dc, db, openai_emulator) as (adapter, _):
        notifier = DiscordNotifier(client=lambda: adapter.client, budgets=adapter.budgets, clock=QuickClock())
        dc.fail_after_work("message_create", status=500)
        # Every look-up of this delivery loses its connection too: it gives up, not knowing.
        # (aiohttp itself sends a GET again once when a kept-alive connection drops.)
        dc.fail_after_work("message_list", kind="drop", times=2 * SEND_ATTEMPTS)
        dc.set_nonce_window(0.0)  # the look-up, not the reminder's nonce, must find it
        attempted_at = datetime.now(timezone.utc)  # what the reminder job records before the first attempt
        reminder = {"conversation": conversation, "user": str(w.alice), "text": "stand-up in 5", "key": "reminder:1",
                    "check_claim": held}
        with pytest.raises(TransientSendError):
            await notifier.deliver_reminder(**reminder, attempted_at=None)
        await notifier.deliver_reminder(**reminder, attempted_at=attempted_at)
    assert [m.content for m in bot_messages(dc, w.channel_id)] == [f"<@{w.alice}> stand-up in 5"]


async def test_a_kept_final_older_than_outbox_max_age_is_dropped_with_an_error_line(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # OUTBOX_MAX_AGE_S is the platform-independent rule: Discord used the default whatever it was set to.
    dc = discord_emulator
    w = make_world(dc)
    final = PendingFinal(
        answer_id="answer-old", platform="discord", workspace=str(w.guild_id), channel=str(w.channel_id), thread="",
        parts=(FinalPart(text="too late to say"),),
    )
    async with running_bot(dc, db, openai_emulator, outbox_max_age_s=3600) as (adapter, _):
        gone = PendingFinals(db, owner="gone-old")
        await gone.keep(final)
        await gone.release("answer-old")
        async with db.connection() as conn:
            await conn.execute("UPDATE pending_finals SET created_at = now() - interval '2 hours' WHERE answer_id = 'answer-old'")
        delivery = DiscordFinalDelivery(adapter.client, adapter.budgets, MonotonicClock())
        assert await adapter.runner.deliver_pending(delivery, finder=delivery) == 0
    assert bot_messages(dc, w.channel_id) == []
    async with db.connection() as conn:
        left = await (await conn.execute("SELECT count(*) FROM pending_finals WHERE answer_id = 'answer-old'")).fetchone()
    assert left is not None and left[0] == 0
    assert any(r.levelname == "ERROR" and "answer-old" in r.getMessage() for r in caplog.records)


async def test_a_call_on_the_session_closed_at_shutdown_is_later_not_a_traceback(
    discord_emulator: DiscordEmulator,
) -> None:
    # What an answer still streaming meets once the client closed its aiohttp session at shutdown.
    import aiohttp

    session = aiohttp.ClientSession()
    await session.close()
    with pytest.raises(TransientSendError):
        await guarded(session.get(f"{discord_emulator.base_url}/api/v10/gateway"))
    assert discord_emulator.requests_to("message_create") == []
