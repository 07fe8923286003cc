"""👍/👎 end to end on both platforms (real Bolt and discord.py, the emulators): buttons under a cited answer, a 👍,
a 👎 whose modal sends a reason, a changed vote; the export holds question, answer, sources, vote and comment.

Acked within 3 s is checked by the emulators, not by a clock here: Discord's refuses an interaction callback
after its 3 s deadline (so every response below proves an ack in time), Slack's refuses a trigger_id older than
3 s (so the 👎 modal opening proves the click was handled in time), and Bolt answers the HTTP request before
its listener runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bot.feedback_cli import render
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.search import PgRetriever
from core.store.db import Database
from core.store.feedback import FeedbackStore
from tests.adapters.discord.harness import bot_messages, button_ids, make_world, running_bot
from tests.e2e.slack_harness import ALICE, BOB, bot_replies, eventually, mention, start_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(60)

BASE = "https://github.com/acme/handbook/blob/main/docs/"
QUESTION = "what do deploys need?"
ANSWER = "Deploys need two reviewers [1]."
REASON = "It leaves out the freeze weeks."
CHANNEL = "C0000FDBK1"


@pytest.fixture(autouse=True)
async def handbook(db: Database, tmp_path: Path) -> PgRetriever:
    """One deploy document, ingested with a link base, found by words (no embeddings)."""
    async with db.connection() as conn:
        await conn.execute("DELETE FROM sources")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy reviewers.md").write_text("# Deploy reviewers\n\nEvery deploy needs two reviewers.\n")
    await ingest(
        db, IngestRequest(source="handbook", exposure="prefetch", targets=[str(docs)], link_base=BASE),
        embedder=None,
    )
    return PgRetriever(db, None)


def exported(rows: list[object], platform: str) -> dict[str, dict[str, object]]:
    """`relaybot feedback --format json` of the votes on one platform, by user name."""
    records = json.loads(render(rows, output="json"))  # type: ignore[arg-type]
    return {r["user_name"]: r for r in records if r["platform"] == platform}


def check_export(records: dict[str, dict[str, object]], *, alice: str, bob: str) -> None:
    assert set(records) == {alice, bob}
    for record in records.values():
        assert record["question"].endswith(QUESTION) and record["answer"] == ANSWER  # type: ignore[union-attr]
        assert record["sources"] == [{"title": "Deploy reviewers", "uri": BASE + "deploy%20reviewers.md"}]
    # Alice's 👍 became a 👎 she gave no reason for; Bob's 👎 carries his.
    assert (records[alice]["vote"], records[alice]["comment"]) == ("down", "")
    assert (records[bob]["vote"], records[bob]["comment"]) == ("down", REASON)


async def votes_become(feedback: object, expected: set[tuple[str, int]]) -> None:
    """Polls the store (bounded) until its votes are `expected`, as (user id, vote)."""
    for _ in range(300):
        if {(r.user_id, r.vote) for r in await feedback.export()} == expected:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the votes never became {expected}")


def feedback_message(slack: SlackEmulator, thread_ts: str) -> object | None:
    found = [m for m in bot_replies(slack, CHANNEL, thread_ts) if any(b.get("type") == "context_actions" for b in m.blocks or [])]
    return found[0] if found else None


async def test_slack_votes_a_reason_in_a_modal_and_a_changed_vote_are_stored_and_exported(
    db: Database, handbook: PgRetriever, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, retriever=handbook, feedback_buttons=True)
    try:
        openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.01))
        event = mention(slack, CHANNEL, QUESTION)
        await slack.deliver_event(bot.url, event)
        # 👍/👎 come with the final text; the sources reply follows it.
        assert await eventually(lambda: feedback_message(slack, event["ts"]) is not None
                                and len(bot_replies(slack, CHANNEL, event["ts"])) == 2)
        # On the answer's own message (under its text, a markdown block), above the sources reply.
        answer, sources = bot_replies(slack, CHANNEL, event["ts"])
        assert answer.text == ANSWER and sources.text.startswith("*Sources*") and feedback_message(slack, event["ts"]) is answer
        buttons = answer
        assert buttons.blocks[0] == {"type": "markdown", "text": ANSWER}
        [element] = buttons.blocks[1]["elements"]
        assert element["type"] == "feedback_buttons" and element["action_id"] == "relaybot_feedback"

        status, _ = await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL, buttons.ts, user=ALICE, positive=True))
        assert status == 200
        assert await eventually(lambda: any(e.user == ALICE and "Thanks for the 👍" in e.text for e in slack.ephemerals))
        assert [(r.user_id, r.vote) for r in await FeedbackStore(db).export()] == [(ALICE, 1)]

        status, _ = await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL, buttons.ts, user=BOB, positive=False))
        assert status == 200
        assert await eventually(lambda: any(v.user_id == BOB for v in slack.opened_views))
        [why] = [v for v in slack.opened_views if v.user_id == BOB]
        assert why.view["callback_id"] == "relaybot_feedback_why"
        status, _ = await slack.deliver_interaction(bot.url, slack.view_submission(why.view_id, {"why": REASON}))
        assert status == 200
        assert await eventually(lambda: any(e.user == BOB and "what you wrote" in e.text for e in slack.ephemerals))

        # Alice changes her vote, then closes the modal without a word: her 👎 stands, one row still.
        await slack.deliver_interaction(bot.url, slack.feedback_click(CHANNEL, buttons.ts, user=ALICE, positive=False))
        assert await eventually(lambda: any(v.user_id == ALICE for v in slack.opened_views))
        await votes_become(FeedbackStore(db), {(ALICE, -1), (BOB, -1)})
        check_export(exported(await FeedbackStore(db).export(), "slack"), alice="u0000alice", bob="u0000bob")
    finally:
        await bot.stop()


async def test_discord_votes_a_reason_in_a_modal_and_a_changed_vote_are_stored_and_exported(
    db: Database, handbook: PgRetriever, discord_emulator: DiscordEmulator, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text(ANSWER, chunk_chars=5, delay_s=0.01))
    async with running_bot(dc, db, openai_emulator, retriever=handbook, feedback_buttons=True) as (_, engine):
        asked = await dc.send_user_message(w.channel_id, w.alice, QUESTION, mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(asked), what="thread")
        answer = await dc.wait_for(
            lambda: next((m for m in bot_messages(dc, thread.id) if any(i.startswith("rb:f:") for i in button_ids(m))), None),
            15.0, what="feedback buttons",
        )
        # On the answer's own (last) message, which keeps its text.
        assert answer.content == ANSWER
        up, down = button_ids(answer)
        assert up.startswith("rb:f:u:") and down.startswith("rb:f:d:")

        liked = await dc.click_button(answer.id, up, w.alice)
        await dc.wait_for(lambda: any("Thanks for the 👍" in (r.content or "") for r in dc.interaction_responses(liked)),
                          what="thanks")
        first = dc.interaction_responses(liked)[0]
        assert (first.kind, first.callback_type) == ("callback", 5)  # a deferred private answer, then the thanks

        disliked = await dc.click_button(answer.id, down, w.bob)
        await dc.wait_for(lambda: dc.interaction(disliked).modal, what="modal")
        first = dc.interaction_responses(disliked)[0]
        # The modal is the first response (type 9), never after a defer.
        assert first.callback_type == 9
        submitted = await dc.submit_modal(disliked, {"why": REASON})
        await dc.wait_for(lambda: any("what you wrote" in (r.content or "") for r in dc.interaction_responses(submitted)),
                          what="reason noted")
        assert dc.interaction_responses(submitted)[0].callback_type == 5

        # Alice changes her vote and dismisses the modal: her 👎 stands, one row still.
        changed = await dc.click_button(answer.id, down, w.alice)
        await dc.wait_for(lambda: dc.interaction(changed).modal, what="second modal")

        async def both_down() -> bool:
            return {r.user_name: r.vote for r in await FeedbackStore(db).export() if r.platform == "discord"} == {
                "alice": -1, "bob": -1}

        await dc.wait_for(both_down, what="alice's changed vote")
        check_export(exported(await FeedbackStore(db).export(), "discord"), alice="alice", bob="bob")
