"""A Discord answer's final text brings its own 👍/👎 (issue 22's "the answer carries its own controls", on Discord):
the edit that writes the final text swaps Stop for the feedback buttons, and no edit follows it for the buttons —
one call fewer per answer on the bot-wide budget every answer shares."""

from __future__ import annotations

import pytest

from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text

pytestmark = pytest.mark.timeout(60)

ANSWER = "The release train leaves every Tuesday at noon, after the staging checks pass."


def custom_ids(components: tuple[dict, ...] | list[dict]) -> list[str]:
    return [button["custom_id"] for row in components for button in row.get("components", [])]


async def test_the_final_edit_swaps_stop_for_feedback_and_nothing_edits_after_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=6, delay_s=0.05))
    async with running_bot(dc, db, openai_emulator, feedback_buttons=True):
        asked = await dc.send_user_message(w.channel_id, w.alice, "when does the release train leave?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")

        def answered() -> bool:
            return any(m.content == ANSWER and any(i.startswith("rb:f:") for i in custom_ids(m.components))
                       for m in bot_messages(dc, thread.id))

        await dc.wait_for(answered, what="the final text with its buttons", timeout=30)
        [message] = [m for m in bot_messages(dc, thread.id) if m.content == ANSWER]
        first, last = message.versions[0], message.versions[-1]
        assert first.content != ANSWER and any(i.startswith("rb:s:") for i in custom_ids(first.components))
        assert last.content == ANSWER
        assert {i.split(":")[2] for i in custom_ids(last.components)} == {"u", "d"}, custom_ids(last.components)
        # The version before the last still streamed: the final text and its buttons came in one edit.
        assert message.versions[-2].content != ANSWER
        assert not any(i.startswith("rb:f:") for v in message.versions[:-1] for i in custom_ids(v.components))

