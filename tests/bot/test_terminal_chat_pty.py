"""`relaybot chat` in a pseudo-terminal, as a person runs it: the real `python -m bot chat` against the OpenAI
emulator and the test Postgres. Ctrl-C stops an answer and a second quits; logs stay off the screen; /help, /new
and /sources are answered without the model."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest

from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.pty_terminal import CTRL_C, EXIT_WAIT_S, Terminal, take_the_terminal

REPO = Path(__file__).resolve().parents[2]
# A log line in the text format (bot/cli.py's LOG_FORMAT), which must never reach the terminal.
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _env(**values: str) -> dict[str, str]:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", EMBEDDING_PROVIDER="none", TERM="xterm", **values)
    return keep


Start = Callable[..., Terminal]


@pytest.fixture
async def start_chat(database_url: str, openai_emulator: OpenAIEmulator, tmp_path: Path) -> AsyncIterator[Start]:
    """Starts `relaybot chat` in a new pseudo-terminal; keywords are settings for its environment."""
    started: list[Terminal] = []

    def start(**settings: str) -> Terminal:
        master, slave = os.openpty()
        env = _env(DATABASE_URL=database_url, LLM_BASE_URL=openai_emulator.base_url, DATA_DIR=str(tmp_path / "data"))
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "chat"], stdin=slave, stdout=slave, stderr=slave, env={**env, **settings},
            cwd=tmp_path, start_new_session=True, preexec_fn=take_the_terminal,
        )
        os.close(slave)
        started.append(Terminal(process, master))
        return started[-1]

    try:
        yield start
    finally:
        for terminal in started:
            if terminal.process.poll() is None:
                terminal.process.kill()
                await asyncio.to_thread(terminal.process.wait)
            asyncio.get_running_loop().remove_reader(terminal.master)
            os.close(terminal.master)


@pytest.fixture
async def chat(start_chat: Start) -> Terminal:
    return start_chat()  # in the test's loop, which reads the terminal


async def _run_outcomes(database_url: str) -> list[tuple[str, str | None]]:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute("SELECT outcome, stop_by FROM run_stops WHERE platform = 'console' ORDER BY started_at")
        return [(str(outcome), stop_by) for outcome, stop_by in await cursor.fetchall()]


async def test_ctrl_c_stops_the_answer_mid_stream_the_chat_goes_on_and_a_second_ctrl_c_quits(
    chat: Terminal, openai_emulator: OpenAIEmulator, database_url: str, tmp_path: Path
) -> None:
    story = "once upon a time " * 300
    openai_emulator.script(Text(story, chunk_chars=6, delay_s=0.05), Text("Second answer."))
    log_file = (tmp_path / "data" / "logs" / "chat.log").resolve()
    greeting = await chat.expect("you> ")
    assert f"Logs go to {log_file}." in greeting

    chat.type(b"tell me a long story\n")
    await chat.expect("bot> once upon a time once")
    chat.type(CTRL_C)
    await chat.expect("⏹ Stopped by ")
    await chat.expect("you> ")
    answer = chat.screen[chat.screen.index("bot> "):chat.screen.index("⏹ Stopped by ")]
    # The text shown so far stays on the screen, cut off mid-stream rather than played to the end.
    assert "once upon a time" in answer and answer.count("once") < story.count("once")
    [(outcome, stop_by)] = await _run_outcomes(database_url)
    assert outcome == "stopped" and stop_by  # through the engine's stop path, as the Stop button

    chat.type(b"and then?\n")
    await chat.expect("Second answer.")
    await chat.expect("you> ")
    second = openai_emulator.chat_requests[-1]["messages"]
    kept = [m["content"] for m in second if m["role"] == "assistant"]
    assert len(kept) == 1 and kept[0].startswith("once upon a time") and "⏹ Stopped by" in kept[0]

    chat.type(CTRL_C)  # idle now: a second Ctrl-C quits
    assert await chat.exit_code() == 0
    assert not LOG_LINE.search(chat.screen), chat.screen
    assert "Traceback" not in chat.screen
    logged = log_file.read_text()
    assert LOG_LINE.search(logged) and "stop asked by" in logged  # the log went to its file, not nowhere


async def test_help_new_and_sources_are_answered_without_the_model(
    chat: Terminal, openai_emulator: OpenAIEmulator, database_url: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vault.md").write_text("# Vault\n\nThe deploy key lives in the vault.\n")
    ingest = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "ingest", str(docs), cwd=tmp_path,
        env=_env(DATABASE_URL=database_url, DATA_DIR=str(tmp_path / "data")),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    assert await asyncio.wait_for(ingest.wait(), EXIT_WAIT_S) == 0
    openai_emulator.script(Text("In the vault [1]."), Text("A fresh start."))
    await chat.expect("you> ")

    chat.type(b"/help\n")
    helped = await chat.expect("you> ")
    assert "/new" in helped and "/sources" in helped and "Ctrl-C" in helped
    chat.type(b"/sources\n")
    assert "No answer" in await chat.expect("you> ")
    assert openai_emulator.chat_requests == []  # neither asked the model

    chat.type(b"where is the deploy key\n")
    answered = await chat.expect("you> ")
    assert "In the vault [1]." in answered and "[1] Vault" in answered
    chat.type(b"/sources\n")
    listed = await chat.expect("you> ")
    assert " *[1] Vault" in listed
    assert len(openai_emulator.chat_requests) == 1

    offered = {tool["function"]["name"] for tool in openai_emulator.chat_requests[0].get("tools") or []}
    # Nothing delivers a reminder in a terminal, and there is no platform to read back: neither tool is offered.
    assert "calculator" in offered and not {"create_reminder", "read_conversation"} & offered

    chat.type(b"/new\n")
    assert "New conversation" in await chat.expect("you> ")
    chat.type(b"something else\n")
    await chat.expect("A fresh start.")
    await chat.expect("you> ")
    later = openai_emulator.chat_requests[-1]["messages"]
    said = " ".join(str(m["content"]) for m in later if m["role"] in ("user", "assistant"))
    assert "something else" in said
    assert "deploy key" not in said and "In the vault" not in said  # no earlier turn rides along
    chat.type(b"/quit\n")
    assert await chat.exit_code() == 0
    assert not LOG_LINE.search(chat.screen), chat.screen


async def test_where_data_dir_cannot_take_the_log_file_only_warnings_show_and_the_chat_still_works(
    start_chat: Start, openai_emulator: OpenAIEmulator, tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "data-file"
    not_a_folder.write_text("")
    openai_emulator.script(Text("Still here."))
    chat = start_chat(DATA_DIR=str(not_a_folder))
    greeting = await chat.expect("you> ")
    assert f"cannot write the log to {not_a_folder / 'logs' / 'chat.log'}" in greeting and "Logs go to" not in greeting
    chat.type(b"hello?\n")
    await chat.expect("Still here.")
    await chat.expect("you> ")
    chat.type(b"/quit\n")
    assert await chat.exit_code() == 0
    assert " INFO " not in chat.screen and "Traceback" not in chat.screen, chat.screen
