"""Slack's `/relaybot` end to end with real Bolt: a workspace admin changes the channel's agent type in the modal and
the next question, taken by a second process on the same database, runs it; a non-admin is refused and nothing changes."""

from __future__ import annotations

import json

import pytest

from bot.channels_cli import format_history
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.e2e.slack_harness import ALICE, BOB, CAROL, bot_replies, eventually, mention, start_bot
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.retriever import InMemoryRetriever, MemoryDoc

pytestmark = pytest.mark.timeout(60)

CHANNEL = "C0000ADMIN"


def offered_tools(openai: OpenAIEmulator) -> list[str]:
    return [t["function"]["name"] for t in openai.chat_requests[-1].get("tools") or []]


async def test_an_admin_changes_the_agent_type_in_the_modal_and_another_process_answers_with_it(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    retriever = InMemoryRetriever(docs=[MemoryDoc(title="Zeppelins", text="zeppelins fly on tuesdays")])
    slack.make_admin(ALICE)
    first = await start_bot(db, slack, openai_emulator.base_url, retriever=retriever)
    second = await start_bot(db, slack, openai_emulator.base_url, retriever=retriever)
    try:
        delivery = await slack.deliver_command(first.url, slack.slash_command("/relaybot", "", user=ALICE, channel=CHANNEL))
        assert delivery.status == 200 and delivery.body == "", "acked at once"
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        blocks = {b.get("block_id"): b for b in opened.view["blocks"]}
        agent = blocks["agent_type"]["element"]
        assert agent["initial_option"]["value"] == "inherit" and "classic" in agent["initial_option"]["text"]["text"]
        assert "sources" not in blocks, "no stored source: none to offer"
        # The admin picks the agentic agent and adds a prompt paragraph; everything else stays as shown.
        submitted = slack.view_submission(opened.view_id, {"agent_type": "agentic", "system_prompt": "Answer in French."})
        answer = await slack.deliver_interaction(first.url, submitted)
        assert answer.status == 200 and answer.body == "", "closed: saved"
        assert await eventually(lambda: bool(slack.ephemerals))
        [confirmation] = slack.ephemerals
        assert confirmation.user == ALICE and "agent_type: - → agentic" in confirmation.text

        # The next question in that channel goes to the other process, which runs the agentic agent.
        openai_emulator.script(Text("Agentic answer."))
        asked = mention(slack, CHANNEL, "when do zeppelins fly")
        await slack.deliver_event(second.url, asked)
        assert await eventually(lambda: any(m.text == "Agentic answer." for m in bot_replies(slack, CHANNEL, asked["ts"])))
        assert "internal_search" in offered_tools(openai_emulator)
        assert "Answer in French." in json.dumps(openai_emulator.chat_requests[-1]["messages"])

        # Audited with who (slack:TEAM:USER), what, before → after; `relaybot channels history` shows it.
        history = await ChannelConfigStore(db).history(f"slack:{slack.team_id}:{CHANNEL}")
        assert {(e.field, e.before, e.after, e.changed_by) for e in history} == {
            ("agent_type", None, "agentic", f"slack:{slack.team_id}:{ALICE}"),
            ("system_prompt", None, "Answer in French.", f"slack:{slack.team_id}:{ALICE}"),
        }
        assert f"slack:{slack.team_id}:{ALICE}  slack:{slack.team_id}:{CHANNEL}  agent_type: - → agentic" in format_history(history)
    finally:
        await first.stop()
        await second.stop()


async def test_a_non_admin_is_refused_and_nothing_opens_or_changes(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=BOB, channel="C0000NOADM"))
        assert await eventually(lambda: bool(slack.ephemerals))
        [refusal] = slack.ephemerals
        assert refusal.user == BOB and "Only workspace admins and owners" in refusal.text
        assert slack.opened_views == [] and "views.open" not in slack.call_names()
        assert await ChannelConfigStore(db).history(f"slack:{slack.team_id}:C0000NOADM") == []
    finally:
        await bot.stop()


async def test_a_modal_submitted_after_the_admin_lost_the_right_changes_nothing(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    slack.make_admin(CAROL)
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=CAROL, channel="C0000DEMOT"))
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        # A wrong value is shown in its field, and nothing is saved.
        wrong = await slack.deliver_interaction(bot.url, slack.view_submission(
            opened.view_id, {"tool_policy": "{not json"}))
        assert json.loads(wrong.body)["response_action"] == "errors"
        assert "tool_policy" in json.loads(wrong.body)["errors"]
        # Demoted meanwhile: the submission is checked again.
        slack.add_user(CAROL)
        refused = await slack.deliver_interaction(bot.url, slack.view_submission(opened.view_id, {"agent_type": "research"}))
        errors = json.loads(refused.body)["errors"]
        assert "Only workspace admins and owners" in next(iter(errors.values()))
        assert await ChannelConfigStore(db).history(f"slack:{slack.team_id}:C0000DEMOT") == []
    finally:
        await bot.stop()


async def test_configured_admins_may_and_dms_are_not_channels(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, channel_admins=BOB)
    try:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=BOB, channel="D0000BOB01"))
        assert await eventually(lambda: bool(slack.ephemerals))
        assert "not in a DM" in slack.ephemerals[-1].text and slack.opened_views == []
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=BOB, channel="C0000CONFA"))
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        # The follow-ups checkbox left as shown keeps the channel inheriting it; ticked, it is set here.
        answer = await slack.deliver_interaction(bot.url, slack.view_submission(opened.view_id, {"model": "gpt-4o"}))
        assert answer.body == ""
        history = await ChannelConfigStore(db).history(f"slack:{slack.team_id}:C0000CONFA")
        assert [(e.field, e.after) for e in history] == [("model", "gpt-4o")]
    finally:
        await bot.stop()


async def test_an_admin_sets_a_persons_daily_questions_in_the_modal_and_the_next_one_over_it_is_refused(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    limited = "C0000LIMIT"  # a channel of its own: the database is shared by the module's tests
    slack.make_admin(ALICE)
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=limited))
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        blocks = {b.get("block_id"): b for b in opened.view["blocks"]}
        assert blocks["user_requests_per_day"]["element"]["placeholder"]["text"] == "no limit"
        assert "initial_value" not in blocks["user_tokens_per_day"]["element"]
        submitted = slack.view_submission(opened.view_id, {"user_requests_per_day": "1"})
        answer = await slack.deliver_interaction(bot.url, submitted)
        assert answer.status == 200 and answer.body == "", "closed: saved"
        history = await ChannelConfigStore(db).history(f"slack:{slack.team_id}:{limited}")
        assert {(e.field, e.after) for e in history} == {("user_requests_per_day", 1)}

        openai_emulator.script(Text("One answer today."))
        first = mention(slack, limited, "first question", user=BOB)
        await slack.deliver_event(bot.url, first)
        assert await eventually(lambda: any(m.text == "One answer today." for m in bot_replies(slack, limited, first["ts"])))
        second = mention(slack, limited, "second question", user=BOB)
        await slack.deliver_event(bot.url, second)
        assert await eventually(lambda: any("limit of 1 questions" in m.text for m in bot_replies(slack, limited, second["ts"]))), \
            [m.text for m in bot_replies(slack, limited, second["ts"])]
        assert len(openai_emulator.chat_requests) == 1
    finally:
        await bot.stop()
