"""Files on a message are read whole up to their caps, and one left out is named to the asker, never silently cut."""

from __future__ import annotations

import aiohttp
import pytest

from adapters.policy import INCOMPLETE, FileOnMessage, read_capped, read_files
from core.attachments import TEXT_ATTACHMENT_MAX_BYTES, prepare_attachments
from core.events import AnswerDelta, Done
from core.llm.models import resolve_model
from core.requests import Actor, Attachment, Request
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.core.engine.support import key
from tests.e2e.slack_harness import bot_replies, eventually, mention, model_request_text, start_bot
from tests.emulators.discord import DiscordEmulator, UploadedFile
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator
from tests.support.engine import make_engine

pytestmark = pytest.mark.timeout(60)

# More than aiohttp buffers for one read (~128 KB): the size that reached the model as 127,803 bytes.
BIG_TEXT = b"".join(b"line %06d of a long log file\n" % n for n in range(4800))[:136_800]
OVER_CAP = b"x" * (TEXT_ATTACHMENT_MAX_BYTES + 50_000)
CHANNEL = "C0000GENRL"
# The test model's context would middle-truncate a 136 KB question; with room for it, the request shows every byte.
ROOMY_MODEL = {"context_limit": 200_000}


def _lines_of(data: bytes) -> str:
    return data.decode()


async def _get(slack: SlackEmulator, info: dict, read) -> bytes:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as session:
        async with session.get(info["url_private_download"],
                               headers={"Authorization": f"Bearer {slack.bot_token}"}) as response:
            assert response.status == 200
            return await read(response)


async def test_a_file_bigger_than_one_buffer_is_read_whole_from_the_slack_file_url(
    slack_emulator: SlackEmulator
) -> None:
    info = slack_emulator.add_file("server.log", BIG_TEXT, "text/plain")
    body = await _get(slack_emulator, info, lambda response: read_capped(response.content.read, TEXT_ATTACHMENT_MAX_BYTES))
    assert body == BIG_TEXT


async def test_a_body_past_the_cap_is_read_only_to_cap_plus_one_and_left_out(slack_emulator: SlackEmulator) -> None:
    info = slack_emulator.add_file("huge.txt", OVER_CAP, "text/plain")
    body = await _get(slack_emulator, info, lambda response: read_capped(response.content.read, TEXT_ATTACHMENT_MAX_BYTES))
    assert len(body) == TEXT_ATTACHMENT_MAX_BYTES + 1

    # A platform that reported no size: the download itself is what finds the file too large.
    async def download(file: FileOnMessage, cap: int) -> bytes | None:
        return await _get(slack_emulator, info, lambda response: read_capped(response.content.read, cap))

    (attachment,) = await read_files([FileOnMessage(filename="huge.txt", content_type="text/plain", size=0, handle=info)],
                                     download)
    assert attachment.data == b"" and attachment.skipped.startswith("too large")


async def test_a_download_that_came_short_is_left_out_and_said_never_read_as_the_whole_file() -> None:
    async def short(file: FileOnMessage, cap: int) -> bytes | None:
        return BIG_TEXT[:127_803]  # what one buffered read returned

    (attachment,) = await read_files(
        [FileOnMessage(filename="server.log", content_type="text/plain", size=len(BIG_TEXT), handle=None)], short
    )
    assert attachment.skipped == INCOMPLETE and attachment.data == b""
    prepared = await prepare_attachments([attachment], model=resolve_model("gpt-4o"))
    assert "server.log" in prepared.notice and INCOMPLETE in prepared.notice
    assert "line 000000" not in prepared.text


async def test_what_cannot_be_read_is_named_in_one_sentence_and_told_to_the_model() -> None:
    files = [
        Attachment(filename="notes.md", content_type="text/markdown", data=b"# Plan"),
        Attachment(filename="huge.txt", content_type="text/plain", data=OVER_CAP),
        Attachment(filename="photo.png", content_type="image/png", data=b"\x89PNG"),
        Attachment(filename="archive.zip", content_type="application/zip", data=b"", skipped="not a text file, document or image I can read"),
    ]
    prepared = await prepare_attachments(files, model=resolve_model("gpt-3.5-turbo"))  # a model without vision
    assert prepared.notice == (
        "I left out huge.txt (too large: over 200,000 bytes), photo.png (an image, and this model cannot see images)"
        " and archive.zip (not a text file, document or image I can read); this answer does not use them."
    )
    assert "# Plan" in prepared.text and "huge.txt of type text/plain was left out" in prepared.text
    assert (await prepare_attachments(files[:1], model=resolve_model("gpt-4o"))).notice == ""


async def test_the_answer_opens_with_the_left_out_sentence_whatever_the_model_says(
    db: Database, openai_emulator: OpenAIEmulator
) -> None:
    engine = make_engine(db, openai_emulator.base_url)
    openai_emulator.script(Text("Here is my summary."))
    asked = Request(question="summarise this", conversation=key("C-files"), user=Actor(id="U1", name="Ada"),
                    attachments=(Attachment(filename="huge.txt", content_type="text/plain", data=OVER_CAP),))
    events = [event async for event in engine.ask(asked)]
    deltas = [event.text for event in events if isinstance(event, AnswerDelta)]
    notice = "I left out huge.txt (too large: over 200,000 bytes); this answer does not use it."
    assert deltas[0] == f"{notice}\n\n"
    done = events[-1]
    assert isinstance(done, Done) and done.answer == f"{notice}\n\nHere is my summary." == "".join(deltas)


async def test_discord_a_file_bigger_than_one_buffer_reaches_the_model_whole_and_one_past_the_cap_is_named(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Read it all."), Text("Could not."))
    async with running_bot(dc, db, openai_emulator, llm_model_overrides=ROOMY_MODEL):
        await dc.send_dm(w.alice, "what is in the log?", attachments=[UploadedFile(filename="server.log", data=BIG_TEXT)])
        channel = dc.dm_channel_id(w.alice)
        await wait_for_text(dc, channel, "Read it all.")
        await dc.send_dm(w.alice, "and this one?", attachments=[UploadedFile(filename="huge.txt", data=OVER_CAP)])
        notice = "I left out huge.txt (too large: over 200,000 bytes); this answer does not use it."
        await wait_for_text(dc, channel, f"Read it all.{notice}\n\nCould not.")
    first, second = openai_emulator.chat_requests
    asked = model_request_text(first)
    assert _lines_of(BIG_TEXT) in asked  # every byte, the last line included
    assert "xxxxxxxxxx" not in model_request_text(second)


async def test_slack_a_file_past_its_cap_is_named_at_the_top_of_the_answer(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url)
    try:
        huge = slack.add_file("huge.txt", OVER_CAP, "text/plain")
        openai_emulator.script(Text("Could not."))
        event = mention(slack, CHANNEL, "what is in this?")
        event["files"] = [huge]
        await slack.deliver_event(bot.url, event)
        notice = "I left out huge.txt (too large: over 200,000 bytes); this answer does not use it."
        assert await eventually(lambda: any(m.text == f"{notice}\n\nCould not." for m in bot_replies(slack, CHANNEL, event["ts"]))), \
            [m.text for m in bot_replies(slack, CHANNEL, event["ts"])]
    finally:
        await bot.stop()


async def test_slack_a_file_bigger_than_one_buffer_reaches_the_model_whole(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, llm_model_overrides=ROOMY_MODEL)
    try:
        log_file = slack.add_file("server.log", BIG_TEXT, "text/plain")
        openai_emulator.script(Text("Read it all."))
        event = mention(slack, CHANNEL, "what is in the log?")
        event["files"] = [log_file]
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(m.text == "Read it all." for m in bot_replies(slack, CHANNEL, event["ts"])))
        assert _lines_of(BIG_TEXT) in model_request_text(openai_emulator.chat_requests[-1])
    finally:
        await bot.stop()
