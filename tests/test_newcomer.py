"""A newcomer's first try: the README's "Try it" shell block, run verbatim in a fresh copy of the repository, in a
pseudo-terminal, gives a first streamed answer with a cited source (LLM_BASE_URL pointed at the OpenAI emulator).

The block's `make install` builds a new .venv as on any machine; only where pip finds packages differs, since
tests reach no network: pip is told to use no index and to find the packages already installed beside this test
(PYTHONPATH), so it installs relaybot itself into the new .venv and takes every dependency as present."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.emulators.openai_server import OpenAIEmulator, Text
from tests.support.pty_terminal import Terminal, take_the_terminal
from tests.support.relaybot_process import reachable_workdir

REPO = Path(__file__).resolve().parents[1]
TRY_IT = re.compile(r"^## Try it\n.*?^```sh\n(?P<block>.*?)^```$", re.MULTILINE | re.DOTALL)


def try_it_block() -> str:
    """The README's first screen shell block, as a newcomer would paste it."""
    match = TRY_IT.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no '## Try it' section with a ```sh block"
    return match.group("block")


def fresh_copy(to: Path) -> Path:
    """The repository's tracked files, as a clean clone has them (the working tree's versions)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            target = to / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return to


def test_the_block_installs_ingests_and_chats_in_that_order() -> None:
    commands = [line.split("#")[0].strip() for line in try_it_block().splitlines()]
    commands = [command for command in commands if command]
    assert commands[-1].endswith("relaybot chat")
    assert any(command.startswith("make install") for command in commands)
    assert any("relaybot ingest ./docs" in command for command in commands)


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout: the newcomer starts from a clone")
@pytest.mark.skipif(shutil.which("make") is None, reason="the block runs make")
async def test_the_readmes_first_block_gives_a_streamed_answer_with_a_cited_source(
    openai_emulator: OpenAIEmulator,
) -> None:
    answer = "Answers stream into one message, edited as the tokens arrive [1]."
    openai_emulator.script(Text(answer, chunk_chars=5, delay_s=0.01))
    with reachable_workdir("relaybot-newcomer-") as home:
        clone = fresh_copy(home / "relaybot")
        master, slave = os.openpty()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", "TERM": "xterm",
            "LLM_BASE_URL": openai_emulator.base_url, "HF_HUB_OFFLINE": "1",
            # No network: pip takes the packages installed beside this test, and builds relaybot without fetching
            # a build backend (setuptools is one of those packages).
            "PYTHONPATH": sysconfig.get_paths()["purelib"], "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
        }
        process = subprocess.Popen(
            ["bash", "-e", "-c", try_it_block()], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=clone,
            start_new_session=True, preexec_fn=take_the_terminal,
        )
        os.close(slave)
        terminal = Terminal(process, master)
        try:
            await terminal.expect("you> ")
            terminal.type(b"How does an answer stream?\n")
            shown = await terminal.expect("you> ")
            assert "bot> Answers stream into one message, edited as the tokens arrive [1]." in shown
            cited = re.search(r"Sources:\s+\[1\] (?P<title>[^\n]+) — file://[^\n]+/relaybot/docs/\w+\.md", shown)
            assert cited, shown
            terminal.type(b"/quit\n")
            assert await terminal.exit_code() == 0, terminal.screen
        finally:
            if process.poll() is None:
                process.kill()
                await asyncio.to_thread(process.wait)
            asyncio.get_running_loop().remove_reader(master)
            os.close(master)
    request = openai_emulator.chat_requests[-1]
    assert request.get("stream") is True
    assert cited["title"] in str(request["messages"]), "the cited document was not in the prompt"
