"""Citations end to end on both platforms: a folder ingested with a link base, six passages retrieved
from Postgres, a scripted answer citing [2], [9] and [1][4] — the final text has no [9], and the
sources reply lists exactly 1, 2 and 4, each titled with a link to its web address."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.e2e.slack_harness import bot_replies, eventually, mention, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

BASE = "https://github.com/acme/handbook/blob/main/docs/"
ANSWER = "Deploys need two reviewers [2], [9] and a green build on main [1][4]."
CLEANED = "Deploys need two reviewers [2] and a green build on main [1][4]."
QUESTION = "what are the deploy rules?"
# How the prompt numbers a passage: "[n] title (uri)" (core/sources.py render_numbered).
_NUMBERED = re.compile(r"^\[(\d+)\] (.+) \((\S+)\)$", re.M)


@pytest.fixture(autouse=True)
async def handbook(db: Database, tmp_path: Path) -> PgRetriever:
    """Six deploy documents ingested from a folder with a link base; found by words (no embeddings)."""
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    docs = tmp_path / "docs"
    (docs / "release process").mkdir(parents=True)
    topics = ["reviewers", "green builds", "freeze weeks", "rollbacks", "hotfixes", "feature flags"]
    for n, topic in enumerate(topics, start=1):
        folder = docs / "release process" if n % 2 else docs
        (folder / f"deploy {n}.md").write_text(f"# Deploy {topic}\n\nA deploy rule about {topic}: rule number {n}.\n")
    await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)], link_base=BASE),
        embedder=None,
    )
    return PgRetriever(db, None)


def numbered_in_prompt(openai: OpenAIEmulator) -> dict[int, tuple[str, str]]:
    """The passages the model was given, by number: title and address."""
    system = openai.chat_requests[-1]["messages"][0]["content"]
    return {int(n): (title, uri) for n, title, uri in _NUMBERED.findall(system)}


async def test_slack_answer_drops_the_ninth_citation_and_links_the_three_cited(
    db: Database, handbook: PgRetriever, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, retriever=handbook)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.01))
        event = mention(slack, "C0000GENRL", QUESTION)
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(m.text.startswith("*Sources*") for m in bot_replies(slack, "C0000GENRL", event["ts"])))
        answer, sources = bot_replies(slack, "C0000GENRL", event["ts"])
    finally:
        await bot.stop()
    prompt = numbered_in_prompt(openai_emulator)
    assert sorted(prompt) == [1, 2, 3, 4, 5, 6]
    assert all(uri.startswith(BASE) and " " not in uri for _, uri in prompt.values())
    assert answer.text == CLEANED
    lines = sources.text.splitlines()[1:]
    assert [line.split(".", 1)[0] for line in lines] == ["1", "2", "4"]
    for line, n in zip(lines, (1, 2, 4)):
        title, uri = prompt[n]
        assert line.startswith(f"{n}. <{uri}|{title}>")


async def test_discord_answer_drops_the_ninth_citation_and_links_the_three_cited(
    db: Database, handbook: PgRetriever, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.01))
    async with running_bot(dc, db, openai_emulator, retriever=handbook):
        asked = await dc.send_user_message(w.channel_id, w.alice, QUESTION, mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        await wait_for_text(dc, thread.id, CLEANED)
        [sources] = await dc.wait_for(lambda: [m for m in bot_messages(dc, thread.id) if m.embeds], what="sources embed")
    prompt = numbered_in_prompt(openai_emulator)
    assert sorted(prompt) == [1, 2, 3, 4, 5, 6]
    lines = sources.embeds[0]["description"].splitlines()
    assert [line.split("`")[1] for line in lines] == ["[1]", "[2]", "[4]"]
    for line, n in zip(lines, (1, 2, 4)):
        title, uri = prompt[n]
        assert line == f"`[{n}]` [{title}]({uri})"
