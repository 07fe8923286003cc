"""PDF, Word, PowerPoint, Excel and HTML files on a question are read into it, in a child whose time, memory and
environment are capped; what a cap stopped is said at the top of the answer."""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
from pathlib import Path

import pytest
from docx import Document
from openpyxl import Workbook

import core.document_reader as reader
from core.attachments import DOCUMENT_ATTACHMENT_MAX_TOKENS, prepare_attachments
from core.document_reader import DocumentText, Unread, read_document
from core.llm.models import resolve_model
from core.requests import Attachment
from core.store.db import Database
from tests.adapters.discord.harness import make_world, running_bot, wait_for_text
from tests.core.retrieval.test_loaders import minimal_pdf
from tests.e2e.slack_harness import bot_replies, eventually, mention, model_request_text, start_bot
from tests.emulators.discord import DiscordEmulator, UploadedFile
from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.emulators.slack import SlackEmulator

pytestmark = pytest.mark.timeout(90)

CHANNEL = "C0000DOCS1"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ROOMY_MODEL = {"context_limit": 200_000}


def _docx(*paragraphs: str) -> bytes:
    document = Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _xlsx(rows: list[list[str]]) -> bytes:
    book = Workbook()
    for row in rows:
        book.active.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _zip_bomb() -> bytes:
    """A "Word document" whose one member unpacks to 60 MB of spaces (about 60 KB packed)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b" " * 60_000_000)
    return out.getvalue()


async def test_slack_a_pdf_and_a_word_document_on_a_mention_reach_the_model_as_text(
    db: Database, slack_emulator: SlackEmulator, openai_emulator: OpenAIEmulator
) -> None:
    slack = slack_emulator
    bot = await start_bot(db, slack, openai_emulator.base_url, llm_model_overrides=ROOMY_MODEL)
    try:
        pdf = slack.add_file("runbook.pdf", minimal_pdf("Restart the ingest worker first"), "application/pdf")
        word = slack.add_file("plan.docx", _docx("Quarterly plan: ship the importer"), DOCX_TYPE)
        openai_emulator.script(Text("Read both."))
        event = mention(slack, CHANNEL, "what do these say?")
        event["files"] = [pdf, word]
        await slack.deliver_event(bot.url, event)
        assert await eventually(lambda: any(m.text == "Read both." for m in bot_replies(slack, CHANNEL, event["ts"])))
        asked = model_request_text(openai_emulator.chat_requests[-1])
        assert "Restart the ingest worker first" in asked and "Quarterly plan: ship the importer" in asked
    finally:
        await bot.stop()


async def test_discord_a_workbook_in_a_dm_reaches_the_model_and_a_zip_bomb_is_named_not_unpacked(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    w = make_world(dc)
    openai_emulator.script(Text("Counted."))
    async with running_bot(dc, db, openai_emulator, llm_model_overrides=ROOMY_MODEL):
        await dc.send_dm(w.alice, "totals?", attachments=[
            UploadedFile(filename="sales.xlsx", data=_xlsx([["region", "total"], ["north", "4211"]]), content_type=XLSX_TYPE),
            UploadedFile(filename="bomb.docx", data=_zip_bomb(), content_type=DOCX_TYPE),
        ])
        notice = "I left out bomb.docx (too large unpacked: over 50,000,000 bytes); this answer does not use it."
        await wait_for_text(dc, dc.dm_channel_id(w.alice), f"{notice}\n\nCounted.")
    asked = model_request_text(openai_emulator.chat_requests[-1])
    assert "north" in asked and "4211" in asked


async def test_a_long_document_is_read_to_its_token_cap_and_the_answer_says_so() -> None:
    words = " ".join(f"word{n}" for n in range(3 * DOCUMENT_ATTACHMENT_MAX_TOKENS))
    html = f"<html><body><main><p>{words}</p><p>THE-VERY-END</p></main></body></html>".encode()
    prepared = await prepare_attachments([Attachment(filename="long.html", content_type="text/html", data=html)],
                                         model=resolve_model("gpt-4o"))
    assert "word0 word1" in prepared.text and "THE-VERY-END" not in prepared.text
    assert prepared.notice == (f"I read only the first {DOCUMENT_ATTACHMENT_MAX_TOKENS:,} tokens of long.html; "
                               "this answer does not use the rest.")


async def test_html_is_read_for_its_main_content_not_its_markup() -> None:
    page = b"<html><head><script>var x = 1;</script></head><body><nav>Home | About</nav><main><h1>Release</h1>" \
           b"<p>The release ships on Friday after the freeze.</p></main></body></html>"
    prepared = await prepare_attachments([Attachment(filename="notes.html", content_type="text/html", data=page)],
                                         model=resolve_model("gpt-4o"))
    assert "The release ships on Friday" in prepared.text and "<script>" not in prepared.text


def _running_children(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(int(pid))
        except OSError:
            continue
    return found


async def test_a_reader_past_its_time_is_killed_and_the_file_named(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "relaybot-test-stuck-reader"
    # A parser a hostile file sent into a loop: the door stops it whatever it does.
    monkeypatch.setattr(reader, "_CHILD", f"import time; time.sleep(120)  # {marker}")
    monkeypatch.setattr(reader, "DOCUMENT_READ_TIMEOUT_S", 1.0)
    read = await read_document(b"%PDF-1.4", kind="pdf", filename="loop.pdf")
    assert read == Unread("it took over 1 s to read")
    assert _running_children(marker) == []


async def test_a_reader_that_wants_too_much_memory_fails_inside_its_child(monkeypatch: pytest.MonkeyPatch) -> None:
    greedy = ("import sys; sys.path.insert(0, sys.argv[1]); import core.retrieval.loaders as loaders; "
              "loaders.document_from_bytes = lambda *a, **k: bytearray(4_000_000_000); "
              "from core.document_reader import child_main; child_main()")
    monkeypatch.setattr(reader, "_CHILD", greedy)
    read = await read_document(b"<html></html>", kind="html", filename="greedy.html")
    assert read == Unread("reading it needed more memory than a file may take")


async def test_the_reader_sees_none_of_the_bots_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-never-in-the-reader")
    monkeypatch.setenv("LLM_API_KEY", "sk-never-in-the-reader")
    tell_env = ("import os, sys, json; sys.stdin.buffer.read(); "
                "sys.stdout.write(json.dumps({'text': repr(dict(os.environ)), 'cut': False}))")
    monkeypatch.setattr(reader, "_CHILD", tell_env)
    read = await read_document(b"x", kind="html", filename="env.html")
    assert isinstance(read, DocumentText)
    assert "never-in-the-reader" not in read.text and "SLACK_BOT_TOKEN" not in read.text


async def test_documents_on_one_message_are_read_a_few_at_a_time_and_all_answer() -> None:
    files = [Attachment(filename=f"page{n}.html", content_type="text/html",
                        data=f"<html><body><main><p>Page number {n} of the set.</p></main></body></html>".encode())
             for n in range(5)]
    prepared = await asyncio.wait_for(prepare_attachments(files, model=resolve_model("gpt-4o")), 60)
    assert all(f"Page number {n} of the set." in prepared.text for n in range(5)) and prepared.notice == ""
