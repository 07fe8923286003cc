"""Answer-everything channels (issue 27) end to end on real slack-bolt and discord.py: respond_to = mentions | threads |
all, set from the CLI and from chat, the per-minute cap and what is shown past it, Discord's refusal of `all`
without the Message Content intent, and a channel row that still says followups_need_mention."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from adapters.gate import OVER_CAP_REACTION
from bot.channels_cli import channels
from bot.cli import build_parser
from core.store.channel_config import ChannelConfigStore
from core.store.db import Database
from tests.adapters.discord.harness import bot_messages, make_world, running_bot, wait_for_text
from tests.e2e.slack_harness import ALICE, BOB, bot_replies, channel_message, eventually, mention, start_bot
from tests.e2e.test_discord_admin_e2e import MANAGE_GUILD, answered
from tests.emulators.discord import DiscordEmulator
from tests.emulators.discord.payloads import message_payload
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.engine import test_settings as make_settings

pytestmark = pytest.mark.timeout(90)

HELP = "C0000GENRL"
QUIET_S = 0.4  # how long a message that must stay unanswered is given to (wrongly) get an answer


async def cli(database_url: str, tmp_path: Path, llm_url: str, *argv: str, **settings: Any) -> int:
    """`relaybot channels …` as its own process would run it (its own settings and database pool)."""
    cli_settings = make_settings(llm_url, database_url=database_url, data_dir=tmp_path, **settings)
    return await channels(cli_settings, build_parser().parse_args(["channels", *argv]))


def asked(openai: OpenAIEmulator) -> list[str]:
    """The last user message of every model request so far."""
    out = []
    for request in openai.chat_requests:
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        out.append(str(users[-1].get("content")) if users else "")
    return out


def other_app_message(slack: SlackEmulator, text: str) -> dict[str, Any]:
    ts = slack.add_bot_message(HELP, text, bot_id="B0000OTHER", username="ci")
    return {"type": "message", "subtype": "bot_message", "bot_id": "B0000OTHER", "text": text, "ts": ts,
            "channel": HELP, "channel_type": "channel"}


def join_message(slack: SlackEmulator, user: str) -> dict[str, Any]:
    text = f"<@{user}> has joined the channel"
    ts = slack.add_user_message(HELP, text, user)
    return {"type": "message", "subtype": "channel_join", "user": user, "text": text, "ts": ts, "channel": HELP,
            "channel_type": "channel"}


def edit_of(event: dict[str, Any], text: str) -> dict[str, Any]:
    edited = {**event, "text": text, "edited": {"user": event["user"], "ts": f"{time.time():.6f}"}}
    return {"type": "message", "subtype": "message_changed", "hidden": True, "channel": HELP,
            "channel_type": "channel", "ts": f"{time.time():.6f}", "message": edited, "previous_message": event}


# ----- Slack ----------------------------------------------------------------------------------------


async def test_slack_all_answers_a_persons_top_level_message_in_its_thread_and_nothing_else(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    scope = f"slack:{slack.team_id}:{HELP}"
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        # Before: today's default (SLACK_THREAD_FOLLOWUPS) leaves a top-level message without a mention alone.
        before = channel_message(slack, HELP, "is anyone there?")
        await slack.deliver_event(bot.url, before)
        await asyncio.sleep(QUIET_S)
        assert openai_emulator.chat_requests == [] and bot_replies(slack, HELP, before["ts"]) == []

        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=all") == 0
        openai_emulator.script(Text("Reset it under Settings."), Text("Yes, the same page."), Text("Mentioned once."))
        question = channel_message(slack, HELP, "how do I reset my password")
        await slack.deliver_event(bot.url, question)
        assert await eventually(lambda: any(m.text == "Reset it under Settings."
                                            for m in bot_replies(slack, HELP, question["ts"])))

        # Another app's message, a join and an edit are no questions.
        for event in (other_app_message(slack, "deploy finished"), join_message(slack, BOB),
                      edit_of(question, "how do I reset my password on mobile")):
            await slack.deliver_event(bot.url, event)
        await asyncio.sleep(QUIET_S)
        assert len(openai_emulator.chat_requests) == 1

        # A follow-up in the bot's thread is answered as before.
        follow = channel_message(slack, HELP, "and on mobile?", thread_ts=question["ts"], user=BOB)
        await slack.deliver_event(bot.url, follow)
        assert await eventually(lambda: any(m.text == "Yes, the same page."
                                            for m in bot_replies(slack, HELP, question["ts"])))

        # A mention arrives twice (app_mention and message): answered once, in its thread.
        pinged = mention(slack, HELP, "who owns billing")
        as_message = {**pinged, "type": "message", "channel_type": "channel"}
        await slack.deliver_event(bot.url, as_message)
        await slack.deliver_event(bot.url, pinged)
        assert await eventually(lambda: any(m.text == "Mentioned once." for m in bot_replies(slack, HELP, pinged["ts"])))
        await asyncio.sleep(QUIET_S)
        assert len(openai_emulator.chat_requests) == 3
        assert asked(openai_emulator) == ["how do I reset my password", "and on mobile?", "who owns billing"]
    finally:
        await bot.stop()


async def test_slack_threads_answers_follow_ups_in_its_threads_and_a_mention_anywhere_but_no_top_level_message(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    scope = f"slack:{slack.team_id}:{HELP}"
    # The settings say follow-ups need a mention; the channel's own respond_to=threads wins over them.
    bot = await start_bot(db, slack, openai_emulator.base_url, slack_thread_followups=False)
    try:
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=threads") == 0
        openai_emulator.script(Text("First."), Text("Follow-up."), Text("In a stranger's thread."))
        plain = channel_message(slack, HELP, "no mention at the top")
        await slack.deliver_event(bot.url, plain)
        people = channel_message(slack, HELP, "a thread between people")
        reply = channel_message(slack, HELP, "a reply the bot is not in", thread_ts=people["ts"], user=BOB)
        await slack.deliver_event(bot.url, reply)
        await asyncio.sleep(QUIET_S)
        assert openai_emulator.chat_requests == []

        first = mention(slack, HELP, "what is the VPN address")
        await slack.deliver_event(bot.url, first)
        assert await eventually(lambda: any(m.text == "First." for m in bot_replies(slack, HELP, first["ts"])))
        follow = channel_message(slack, HELP, "and the port?", thread_ts=first["ts"])
        await slack.deliver_event(bot.url, follow)
        assert await eventually(lambda: any(m.text == "Follow-up." for m in bot_replies(slack, HELP, first["ts"])))
        # A mention in a thread the bot is not in is answered too.
        pinged = mention(slack, HELP, "can you help here", thread_ts=people["ts"])
        await slack.deliver_event(bot.url, pinged)
        assert await eventually(lambda: any(m.text == "In a stranger's thread."
                                            for m in bot_replies(slack, HELP, people["ts"])))

        # mentions: the follow-up without a mention is left alone now.
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=mentions") == 0
        await slack.deliver_event(bot.url, channel_message(slack, HELP, "and the password?", thread_ts=first["ts"]))
        await asyncio.sleep(QUIET_S)
        assert len(openai_emulator.chat_requests) == 3
    finally:
        await bot.stop()


async def test_slack_past_the_cap_one_sentence_then_a_reaction_and_a_mention_still_answers(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    scope = f"slack:{slack.team_id}:{HELP}"
    bot = await start_bot(db, slack, openai_emulator.base_url, respond_all_per_minute=2)
    now = [1000.0]
    bot.adapter.inbound.answer_all_cap.clock = lambda: now[0]  # the minute is the test's, not the machine's
    try:
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=all") == 0
        openai_emulator.script(Text("One."), Text("Two."), Text("Mentioned."), Text("Next minute."))
        for n, answer in ((1, "One."), (2, "Two.")):
            message = channel_message(slack, HELP, f"question {n}")
            await slack.deliver_event(bot.url, message)
            assert await eventually(lambda: any(m.text == answer for m in bot_replies(slack, HELP, message["ts"])))

        third = channel_message(slack, HELP, "question 3")
        await slack.deliver_event(bot.url, third)
        assert await eventually(lambda: len(bot_replies(slack, HELP, third["ts"])) == 1)
        told = bot_replies(slack, HELP, third["ts"])[0].text
        assert "at most 2 messages a minute" in told and "mention me" in told
        fourth = channel_message(slack, HELP, "question 4")
        await slack.deliver_event(bot.url, fourth)
        assert await eventually(lambda: "raised_hand" in slack.reactions_on(HELP, fourth["ts"]))
        assert bot_replies(slack, HELP, fourth["ts"]) == []

        pinged = mention(slack, HELP, "question 3 again")
        await slack.deliver_event(bot.url, pinged)
        assert await eventually(lambda: any(m.text == "Mentioned." for m in bot_replies(slack, HELP, pinged["ts"])))

        now[0] += 60.0
        later = channel_message(slack, HELP, "question 5")
        await slack.deliver_event(bot.url, later)
        assert await eventually(lambda: any(m.text == "Next minute." for m in bot_replies(slack, HELP, later["ts"])))
        assert asked(openai_emulator) == ["question 1", "question 2", "question 3 again", "question 5"]
    finally:
        await bot.stop()


async def test_slack_a_row_that_says_followups_need_mention_behaves_as_before(
    db: Database, database_url: str, tmp_path: Path, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slack = slack_emulator
    scope = f"slack:{slack.team_id}:{HELP}"
    # A row as an earlier version wrote it.
    async with db.connection() as conn:
        await conn.execute("INSERT INTO channel_config (scope, settings, updated_by) VALUES (%s, %s, 'cli:old') "
                           "ON CONFLICT (scope) DO UPDATE SET settings = EXCLUDED.settings",
                           (scope, Jsonb({"followups_need_mention": True})))
    bot = await start_bot(db, slack, openai_emulator.base_url)  # SLACK_THREAD_FOLLOWUPS=true: the row says otherwise
    try:
        openai_emulator.script(Text("First."), Text("Second."))
        first = mention(slack, HELP, "where is the handbook")
        await slack.deliver_event(bot.url, first)
        assert await eventually(lambda: any(m.text == "First." for m in bot_replies(slack, HELP, first["ts"])))
        await slack.deliver_event(bot.url, channel_message(slack, HELP, "and the wiki?", thread_ts=first["ts"]))
        await slack.deliver_event(bot.url, channel_message(slack, HELP, "top-level chatter"))
        await asyncio.sleep(QUIET_S)
        assert len(openai_emulator.chat_requests) == 1

        capsys.readouterr()
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "show", scope) == 0
        shown = capsys.readouterr().out
        assert f"mentions  ({scope})" in shown

        # The older field is still set the old way, and respond_to set later replaces it (both audited).
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "followups_need_mention=false") == 0
        follow = channel_message(slack, HELP, "and the wiki, then?", thread_ts=first["ts"])
        await slack.deliver_event(bot.url, follow)
        assert await eventually(lambda: any(m.text == "Second." for m in bot_replies(slack, HELP, first["ts"])))
        assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=mentions") == 0
        own = await ChannelConfigStore(db).get(scope)
        assert own.respond_to == "mentions" and own.followups_need_mention is None
        fields = [(e.field, e.before, e.after) for e in await ChannelConfigStore(db).history(scope)]
        assert sorted(fields[:2]) == [("followups_need_mention", False, None), ("respond_to", None, "mentions")]
    finally:
        await bot.stop()


async def test_slack_an_admin_sets_all_in_the_modal_and_the_next_top_level_message_is_answered(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    channel = "C0000MODAL"
    slack.make_admin(ALICE)
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        await slack.deliver_command(bot.url, slack.slash_command("/relaybot", "", user=ALICE, channel=channel))
        assert await eventually(lambda: bool(slack.opened_views))
        [opened] = slack.opened_views
        select = {b.get("block_id"): b for b in opened.view["blocks"]}["respond_to"]["element"]
        assert select["initial_option"]["value"] == "inherit" and "follow-ups" in select["initial_option"]["text"]["text"]
        assert [o["value"] for o in select["options"]] == ["inherit", "mentions", "threads", "all"]
        answer = await slack.deliver_interaction(bot.url, slack.view_submission(opened.view_id, {"respond_to": "all"}))
        assert answer.status == 200 and answer.body == "", "closed: saved"
        assert await eventually(lambda: bool(slack.ephemerals))
        assert "respond_to: - → all" in slack.ephemerals[0].text

        openai_emulator.script(Text("Answered without a mention."))
        question = channel_message(slack, channel, "where are the release notes")
        await slack.deliver_event(bot.url, question)
        assert await eventually(lambda: any(m.text == "Answered without a mention."
                                            for m in bot_replies(slack, channel, question["ts"])))
    finally:
        await bot.stop()


# ----- Discord --------------------------------------------------------------------------------------


async def test_discord_all_opens_a_thread_on_a_persons_message_and_ignores_bots_webhooks_joins_and_edits(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    dc.grant_role(w.alice, dc.add_role(w.guild_id, "mods", permissions=MANAGE_GUILD))
    other_bot = dc.add_user("ci-bot", bot=True)
    openai_emulator.script(Text("Restart the router."), Text("Then call IT."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True):
        # The intent's default is `threads`: a top-level message without a mention is left alone.
        await dc.send_user_message(w.channel_id, w.bob, "is anyone there?")
        await asyncio.sleep(QUIET_S)
        assert openai_emulator.chat_requests == []

        done = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "respond_to", "value": "all"}, w.alice, w.channel_id))
        assert "respond\\_to: - → all" in done
        question = await dc.send_user_message(w.channel_id, w.bob, "the wifi is down")
        thread = await dc.wait_for(lambda: dc.thread_of(question), what="a thread on the question")
        await wait_for_text(dc, thread.id, "Restart the router.")

        await dc.send_user_message(w.channel_id, other_bot, "build 12 passed")
        await dc.send_webhook_message(w.channel_id, "CI", "deploy finished")
        join = message_payload(dc.world, dc.message(question), for_gateway=True)
        # A join (type 7) carries no text on Discord; given some here, only its type keeps it from being answered.
        await dc.dispatch_raw("MESSAGE_CREATE", {**join, "id": str(dc.world.ids.next()), "type": 7,
                                                 "content": "bob joined the party"})
        await dc.edit_message(dc.message(question), {"content": "the wifi is down on floor 2"})
        await asyncio.sleep(QUIET_S)
        assert len(openai_emulator.chat_requests) == 1

        # A follow-up in the bot's thread, without a mention, as today.
        await dc.send_user_message(thread.id, w.bob, "still down")
        await wait_for_text(dc, thread.id, "Restart the router.Then call IT.")
    assert asked(openai_emulator) == ["the wifi is down", "still down"]


async def test_discord_refuses_all_without_the_message_content_intent_with_a_sentence(
    discord_emulator: DiscordEmulator, db: Database, database_url: str, tmp_path: Path, openai_emulator: OpenAIEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    dc.grant_role(w.alice, dc.add_role(w.guild_id, "mods", permissions=MANAGE_GUILD))
    scope = f"discord:{w.guild_id}:{w.channel_id}"
    async with running_bot(dc, db, openai_emulator):
        refused = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "respond_to", "value": "all"}, w.alice, w.channel_id))
        assert "not saved" in refused and "Message Content intent is off" in refused
        allowed = await answered(dc, await dc.invoke_slash(
            "relaybot config set", {"field": "respond_to", "value": "threads"}, w.alice, w.channel_id))
        assert "respond\\_to: - → threads" in allowed
    capsys.readouterr()
    assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=all") == 2
    assert "Message Content intent is off" in capsys.readouterr().err
    assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", f"discord:{w.guild_id}", "respond_to=all") == 2
    assert [e.after for e in await ChannelConfigStore(db).history(scope)] == ["threads"]
    assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=all",
                     discord_message_content_intent=True) == 0


async def test_discord_past_the_cap_one_reply_then_a_reaction(
    discord_emulator: DiscordEmulator, db: Database, database_url: str, tmp_path: Path, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    scope = f"discord:{w.guild_id}:{w.channel_id}"
    assert await cli(database_url, tmp_path, openai_emulator.base_url, "set", scope, "respond_to=all",
                     discord_message_content_intent=True) == 0
    openai_emulator.script(Text("Only one."), Text("Mentioned."))
    async with running_bot(dc, db, openai_emulator, discord_message_content_intent=True,
                           respond_all_per_minute=1) as (adapter, _):
        adapter.client.inbound.answer_all_cap.clock = lambda: 500.0  # one minute throughout
        first = await dc.send_user_message(w.channel_id, w.bob, "question 1")
        thread = await dc.wait_for(lambda: dc.thread_of(first), what="a thread on the first question")
        await wait_for_text(dc, thread.id, "Only one.")

        second = await dc.send_user_message(w.channel_id, w.bob, "question 2")
        told = await dc.wait_for(
            lambda: next((m for m in bot_messages(dc, w.channel_id)
                          if (m.message_reference or {}).get("message_id") == str(second)), None),
            what="the reply past the cap")
        assert "at most one message a minute" in told.content and "mention me" in told.content
        third = await dc.send_user_message(w.channel_id, w.bob, "question 3")
        await dc.wait_for(lambda: dc.message(third).reactions.get(OVER_CAP_REACTION), what="the reaction past the cap")
        assert dc.thread_of(second) is None and dc.thread_of(third) is None

        pinged = await dc.send_user_message(w.channel_id, w.bob, "question 3 again", mentions_bot=True)
        thread = await dc.wait_for(lambda: dc.thread_of(pinged), what="a thread on the mention")
        await wait_for_text(dc, thread.id, "Mentioned.")
    assert len(openai_emulator.chat_requests) == 2
