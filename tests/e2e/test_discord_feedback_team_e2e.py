"""Discord 👍/👎 per guild (issue 25, tenant isolation): a click from another guild naming an answer's button keeps
no vote on it, as an approval of another team is not found; the answer's own guild's click is kept, under its guild."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters import wording
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database
from core.store.feedback import FeedbackStore
from tests.adapters.discord.harness import bot_messages, button_ids, make_world, running_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text

pytestmark = pytest.mark.timeout(60)


async def test_a_vote_from_another_guild_naming_an_answer_is_not_kept_and_one_from_its_own_guild_is(
    db: Database, tmp_path: Path, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploys.md").write_text("# Deploys\n\nEvery deploy needs two reviewers.\n")
    await ingest(db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)]), embedder=None)
    dc = discord_emulator
    w = make_world(dc)
    other_guild = dc.add_guild("Other guild")
    other_channel = dc.add_channel(other_guild, "general")
    dc.add_member(other_guild, w.bob)
    openai_emulator.script(Text("Deploys need two reviewers [1]."))
    async with running_bot(dc, db, openai_emulator, retriever=PgRetriever(db, None), feedback_buttons=True):
        asked = await dc.send_user_message(w.channel_id, w.alice, "what do deploys need?", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        answer = await dc.wait_for(
            lambda: next((m for m in bot_messages(dc, thread.id) if any(i.startswith("rb:f:") for i in button_ids(m))), None),
            15.0, what="feedback buttons",
        )
        up, _ = button_ids(answer)

        # A hand-made interaction from the other guild's channel naming the answer's message and its 👍.
        forged = await dc.click_custom_id(other_channel, up, w.bob, message_id=answer.id)
        await dc.wait_for(lambda: any(wording.feedback_unknown_answer() in (r.content or "")
                                      for r in dc.interaction_responses(forged)), what="the refusal")
        assert await FeedbackStore(db).export() == []

        liked = await dc.click_button(answer.id, up, w.bob)
        await dc.wait_for(lambda: any("Thanks for the 👍" in (r.content or "") for r in dc.interaction_responses(liked)),
                          what="thanks")
    [vote] = await FeedbackStore(db).export()
    assert (vote.user_name, vote.vote, vote.workspace) == ("bob", 1, str(w.guild_id))
    assert await FeedbackStore(db).export(team=("discord", str(other_guild))) == []
