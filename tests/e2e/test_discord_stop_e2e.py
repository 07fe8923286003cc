"""Discord Stop end to end (real discord.py, the Discord emulator): a button on the streaming answer, in any process."""

from __future__ import annotations

import pytest

from core.requests import Actor
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, button_ids, make_world, running_bot
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.engine import make_engine

pytestmark = pytest.mark.timeout(60)

STORY = "word " * 3000  # a minute of streaming: only a stop ends it early


def streaming_answer(dc: DiscordEmulator, channel_id: int) -> StoredMessage | None:
    found = [m for m in bot_messages(dc, channel_id) if any(i.startswith("rb:s:") for i in button_ids(m))]
    return found[0] if found else None


async def test_the_asker_stops_a_streaming_answer_and_a_late_click_is_told(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(STORY, chunk_chars=5, delay_s=0.02))
    async with running_bot(dc, db, openai_emulator) as (_, engine):
        asked = await dc.send_user_message(w.channel_id, w.alice, "tell me a long story", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        answer = await dc.wait_for(lambda: streaming_answer(dc, thread.id), what="Stop button")
        [stop] = button_ids(answer)

        refused = await dc.click_button(answer.id, stop, w.bob)
        await dc.wait_for(
            lambda: any("can stop this answer" in (r.content or "") and r.ephemeral for r in dc.interaction_responses(refused)),
            what="refusal",
        )
        await dc.click_button(answer.id, stop, w.alice)
        stopped = await dc.wait_for(
            lambda: next((m for m in bot_messages(dc, thread.id) if "⏹ Stopped by alice." in m.content), None),
            what="stopped answer",
        )
        assert stopped.id == answer.id and "word" in stopped.content
        assert await dc.wait_for(lambda: not dc.message(answer.id).components or None, what="button dropped")

        # The button is gone; a click that still arrives (an old client) is told the answer has finished.
        late = await engine.runs.stop(stop.removeprefix("rb:s:"), actor=Actor(id=str(w.alice), name="alice"))
        assert late.outcome == "ended" and "already finished" in late.message


async def test_a_stop_clicked_through_another_process_stops_the_run(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(STORY, chunk_chars=5, delay_s=0.02))
    async with running_bot(dc, db, openai_emulator):
        asked = await dc.send_user_message(w.channel_id, w.alice, "tell me a long story", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        answer = await dc.wait_for(lambda: streaming_answer(dc, thread.id), what="Stop button")
        run_id = button_ids(answer)[0].removeprefix("rb:s:")
        # Another process's engine over the same database takes the click.
        elsewhere = make_engine(db, openai_emulator.base_url)
        result = await elsewhere.runs.stop(run_id, actor=Actor(id=str(w.alice), name="alice"))
        assert result.outcome == "stopping"
        await dc.wait_for(
            lambda: next((m for m in bot_messages(dc, thread.id) if "⏹ Stopped by alice." in m.content), None),
            what="stopped answer",
        )
