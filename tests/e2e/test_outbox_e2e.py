"""Final texts a platform delays are never lost: kept in Postgres, handed over at shutdown, delivered by the next
process — each part once, found again by its answer id instead of posted twice."""

from __future__ import annotations

import asyncio

import pytest

from adapters.discord.surface import DiscordFinalDelivery
from adapters.slack.surface import SlackFinalDelivery
from adapters.streaming import MonotonicClock
from adapters.slack.surface import ReplyTarget
from core.ports import FinalPart, PendingFinal
from core.store.db import Database
from core.store.pending_finals import PendingFinals
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.e2e.slack_harness import bot_replies, eventually, mention, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000OUTBX"


async def pending_finals(db: Database) -> list[tuple[str, str]]:
    async with db.connection() as conn:
        cursor = await conn.execute("SELECT answer_id, owner FROM pending_finals WHERE channel = %s", (CHANNEL,))
        return [(str(row[0]), str(row[1])) for row in await cursor.fetchall()]


async def test_a_final_the_workspace_keeps_refusing_survives_a_restart_whole(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, shutdown_grace_s=0.0)
    answer = "Rotate the keys on Monday, then tell the on-call channel it is done."
    openai_emulator.script(Text(answer, chunk_chars=6, delay_s=0.15))
    event = mention(slack, CHANNEL, "what is the key rotation plan?")
    try:
        # Every edit from now on is refused for a long while: the final text cannot land.
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any("Rotate" in m.text for m in bot_replies(slack, CHANNEL, event["ts"])))
        slack.fail_next("chat.update", times=1000, retry_after_s=600)
        for _ in range(300):
            if await pending_finals(db):
                break
            await asyncio.sleep(0.02)
        assert await pending_finals(db), "the delayed final is kept in Postgres"
        await bot.adapter.interrupt_inflight()  # shutdown after the grace period
    finally:
        await bot.stop()
    [(_, owner)] = await pending_finals(db)
    assert owner == "", "handed over to whichever process delivers next"
    [shown] = bot_replies(slack, CHANNEL, event["ts"])
    assert "interrupted" not in shown.text, "an answer whose final waits is not cut short"

    slack.clear_faults()
    restarted = await start_bot(db, slack, openai_emulator.base_url)
    try:
        assert await eventually(lambda: [m.text for m in bot_replies(slack, CHANNEL, event["ts"])] == [answer])
        assert await pending_finals(db) == []
    finally:
        await restarted.stop()


async def test_a_part_already_posted_is_found_by_its_metadata_not_posted_twice(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        thread = slack.add_user_message(CHANNEL, "a question", "U0000ALICE", None)
        surfaces = bot.adapter.surfaces
        transport = surfaces.transport(ReplyTarget(team_id=slack.team_id, channel=CHANNEL, thread_ts=thread))
        final = PendingFinal(
            answer_id="answer-7", platform="slack", workspace=slack.team_id, channel=CHANNEL, thread=thread,
            parts=(FinalPart(text="part zero"), FinalPart(text="part one, final")),
        )
        # A process kept the final, recorded a post of part 1, posted it, then died before noting the message.
        dead = PendingFinals(db, owner="dead-7")
        await dead.keep(final)
        assert await dead.attempting("answer-7", 1)
        first = await transport.post("part one, as first posted", key="answer-7:1")
        await dead.release("answer-7")
        delivery = SlackFinalDelivery(surfaces)
        assert await bot.adapter.runner.deliver_pending(delivery, finder=delivery) == 1
        replies = bot_replies(slack, CHANNEL, thread)
        assert sorted(m.text for m in replies) == ["part one, final", "part zero"], "part one was not posted twice"
        assert first in [m.ts for m in replies]
    finally:
        await bot.stop()


async def test_a_discord_part_posted_again_with_its_nonce_is_the_same_message(
    db: Database, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    world = make_world(discord_emulator)
    async with running_bot(discord_emulator, db, openai_emulator) as (adapter, _engine):
        final = PendingFinal(
            answer_id="answer-9", platform="discord", workspace=str(world.guild_id), channel=str(world.channel_id),
            thread="", parts=(FinalPart(text="only part"),),
        )
        delivery = DiscordFinalDelivery(adapter.client, adapter.budgets, MonotonicClock())
        first = await delivery.post_part(final, 0, "only part")
        # A retry after a crash (the first post was never noted) gets the same message back from Discord.
        again = await delivery.post_part(final, 0, "only part")
        assert again == first
        assert [m.content for m in bot_messages(discord_emulator, world.channel_id)] == ["only part"]


async def test_under_a_workspace_post_cap_and_random_429s_every_answer_arrives_whole(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.cap_workspace_posts(20)  # chat.postMessage calls a (Slack) minute across the workspace
    slack.rate_limit_randomly(0.05, retry_after_s=(1, 2), seed=7, methods=["chat.postMessage", "chat.update"])
    bot = await start_bot(db, slack, openai_emulator.base_url)
    answers = {f"C0000CAP{n:02d}": f"Answer number {n}: the capped workspace still gets every word." for n in range(12)}
    try:
        openai_emulator.script(*(Text(text, chunk_chars=16, delay_s=0.02) for text in answers.values()))
        events = [mention(slack, channel, "question") for channel in answers]
        for event in events:
            await slack.deliver_event(bot.url, event)

        def shown() -> list[list[str]]:
            return [[m.text for m in bot_replies(slack, event["channel"], event["ts"])] for event in events]

        def all_arrived() -> bool:
            # The model answers in the order questions reach it: each thread shows one whole answer.
            return sorted(texts[0] for texts in shown() if len(texts) == 1) == sorted(answers.values())

        assert await eventually(all_arrived, limit_s=50.0), f"every answer arrives whole, none given up: {shown()}"
        assert slack.count_429.get("chat.postMessage", 0) + slack.random_429_count > 0, "the limits were hit"
    finally:
        await bot.stop()
