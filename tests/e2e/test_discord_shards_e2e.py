"""Discord shards over real `relaybot run` processes on one Postgres and one Discord emulator: each process runs its
shards, and every guild's mention, Approve click and DM is answered exactly once; with automatic assignment the
shards of a process killed are taken over by the one left; the bot-wide budget is split by the guilds each one runs."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from core.store.heartbeats import STALE_AFTER_S
from tests.adapters.discord.harness import approval_message, button_ids
from tests.emulators.discord import DiscordEmulator, StoredMessage
from tests.emulators.openai_server import Call, OpenAIEmulator, Text, ToolCalls
from tests.support.processes import free_port, healthy

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


@dataclass
class Process:
    port: int
    process: asyncio.subprocess.Process
    log: Path


def _env(database_url: str, openai: OpenAIEmulator, dc: DiscordEmulator, port: int, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "HF_HUB_OFFLINE")}
    env.update(
        PYTHONPATH=str(REPO), DATABASE_URL=database_url, LLM_BASE_URL=openai.base_url, LLM_API_KEY="sk-test",
        EMBEDDING_PROVIDER="none", DISCORD_TOKEN=dc.token, DISCORD_API_BASE=dc.api_base,
        DISCORD_GATEWAY_URL=dc.gateway_url, HTTP_PORT=str(port), SHUTDOWN_GRACE_S="1",
        # The emulator's windows are scaled (a tenth of Discord's) and a process's are not: its channel budget (4 in
        # Discord's 5 s) is scaled up instead, so its posts are paced as Discord's own windows would pace them.
        DISCORD_CHANNEL_BUDGET_PER_5S=str(round(4 / dc.time_scale)),
        # Beats of a second (at most the default): each beat follows the shard leases (claims, takeovers).
        HEARTBEAT_INTERVAL_S="1",
        # The calculator asks for approval, so a question about a sum shows Approve / Reject.
        TOOL_APPROVAL_POLICY='{"calculator": "always"}', **extra,
    )
    return env


async def _start(database_url: str, openai: OpenAIEmulator, dc: DiscordEmulator, workdir: Path, name: str,
                 **extra: str) -> Process:
    port = free_port()
    log = workdir / f"{name}.log"
    with log.open("wb") as output:  # the child writes to its own copy of the file
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", env=_env(database_url, openai, dc, port, **extra), cwd=workdir,
            stdout=output, stderr=asyncio.subprocess.STDOUT,
        )
    return Process(port=port, process=process, log=log)


@asynccontextmanager
async def processes(*started: Process) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for running in started:
            if running.process.returncode is None:
                running.process.send_signal(signal.SIGTERM)
        for running in started:
            try:
                await asyncio.wait_for(running.process.wait(), 30)
            except asyncio.TimeoutError:
                running.process.kill()
                await running.process.wait()


async def _until(what: str, check: Any, *, timeout_s: float = WAIT_S, logs: tuple[Process, ...] = ()) -> None:
    for _ in range(int(timeout_s / 0.1)):
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.1)
    tails = "\n".join(f"--- {p.log.name}\n{p.log.read_text(errors='replace')[-3000:]}" for p in logs)
    raise AssertionError(f"{what} not within {timeout_s:g} s\n{tails}")


def _script(openai: OpenAIEmulator) -> None:
    """A question is answered "answer to <question>"; one about a sum first calls the calculator (approval)."""

    def reply(body: dict[str, Any]) -> Text | ToolCalls:
        messages = body["messages"]
        question = next(str(m.get("content")) for m in reversed(messages) if m.get("role") == "user")
        if messages[-1].get("role") == "tool":
            return Text(f"approved answer to {question.split('> ')[-1]}")
        if "sum" in question:
            return ToolCalls([Call("calculator", '{"expression": "2+2"}')])
        return Text(f"answer to {question.split('> ')[-1]}")

    openai.script_fn(reply)


def _bot_texts(dc: DiscordEmulator) -> list[str]:
    return [m.content for m in dc.world.messages.values() if m.author_id == dc.bot_user_id and not m.deleted]


def _count(dc: DiscordEmulator, text: str) -> int:
    return sum(1 for content in _bot_texts(dc) if content == text)


async def _every_event_answered_once(dc: DiscordEmulator, guilds: dict[str, tuple[int, int]], asker: int,
                                     logs: tuple[Process, ...]) -> None:
    """In each guild a mention and an Approve click, and a DM; each answer shown once, however many processes hear."""
    for name, (_, channel) in guilds.items():
        asked = await dc.send_user_message(channel, asker, f"hello from {name}", mentions_bot=True)
        await _until(f"the answer in {name}", lambda: _count(dc, f"answer to hello from {name}") >= 1, logs=logs)
        thread = dc.thread_of(asked)
        assert thread is not None
        summed = await dc.send_user_message(channel, asker, f"the sum in {name}", mentions_bot=True)
        await _until(f"the approval in {name}", lambda: dc.thread_of(summed) is not None
                     and approval_message(dc, dc.thread_of(summed).id) is not None, logs=logs)
        summed_thread = dc.thread_of(summed)
        assert summed_thread is not None
        approval: StoredMessage | None = approval_message(dc, summed_thread.id)
        assert approval is not None
        await dc.click_button(approval.id, button_ids(approval)[0], asker)
        await _until(f"the approved answer in {name}",
                     lambda: _count(dc, f"approved answer to the sum in {name}") >= 1, logs=logs)
    await dc.send_dm(asker, "hello in a DM")
    await _until("the DM's answer", lambda: _count(dc, "answer to hello in a DM") >= 1, logs=logs)
    await asyncio.sleep(2.0)  # a second process answering too would have posted by now
    for name in guilds:
        assert _count(dc, f"answer to hello from {name}") == 1, _bot_texts(dc)
        assert _count(dc, f"approved answer to the sum in {name}") == 1, _bot_texts(dc)
    assert _count(dc, "answer to hello in a DM") == 1, _bot_texts(dc)
    assert len(dc.requests_to("thread_from_message")) == 2 * len(guilds), "one thread a question"


async def _bot_shares(database_url: str, expected: tuple[float, ...]) -> bool:
    """Whether the live processes' shares of the Discord bot's budget are `expected` (largest first)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT shares FROM process_heartbeats")
        shares = [float(share) for (row,) in await cursor.fetchall() for scope, share in (row or {}).items()
                  if scope.startswith("discord:")]
    return len(shares) == len(expected) and all(
        abs(got - want) < 1e-6 for got, want in zip(sorted(shares, reverse=True), expected))


def _world(dc: DiscordEmulator) -> tuple[dict[str, tuple[int, int]], int]:
    dc.world.max_concurrency = 2  # a bot whose two shards may identify at once (no 5 s between them)
    guilds: dict[str, tuple[int, int]] = {}
    for shard in (0, 1):
        for n in range(2):
            guild = dc.add_guild(f"g{shard}{n}", on_shard=(shard, 2))
            guilds[f"guild {shard}.{n}"] = (guild, dc.add_channel(guild, "general"))
    return guilds, dc.add_user("ada")


async def test_two_processes_one_shard_each_answer_every_guilds_mention_click_and_dm_once(
    database_url: str, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path,
) -> None:
    dc = discord_emulator
    guilds, ada = _world(dc)
    extra = dc.add_guild("g02", on_shard=(0, 2))  # shard 0 holds three guilds, shard 1 two
    guilds["guild 0.2"] = (extra, dc.add_channel(extra, "general"))
    _script(openai_emulator)
    zero = await _start(database_url, openai_emulator, dc, tmp_path, "shard0", DISCORD_SHARD_COUNT="2",
                        DISCORD_SHARD_IDS="0")
    one = await _start(database_url, openai_emulator, dc, tmp_path, "shard1", DISCORD_SHARD_COUNT="2",
                       DISCORD_SHARD_IDS="1")
    async with processes(zero, one):
        await _until("both processes up, one shard each", lambda: _all_healthy(zero, one), logs=(zero, one))
        await _until("both shards connected", lambda: dc.live_shards == [(0, 2), (1, 2)], logs=(zero, one))
        # The bot-wide budget is split by the guilds each process's shard holds: 3/5 and 2/5.
        await _until("the bot-wide budget split 3:2", lambda: _bot_shares(database_url, (0.6, 0.4)), logs=(zero, one))
        await _every_event_answered_once(dc, guilds, ada, (zero, one))
        assert "Discord shards 0 of 2 run here" in zero.log.read_text()
        assert "Discord shards 1 of 2 run here" in one.log.read_text()


async def test_a_process_with_another_shard_count_is_refused_with_a_sentence_and_exit_2(
    database_url: str, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path,
) -> None:
    dc = discord_emulator
    _world(dc)
    running = await _start(database_url, openai_emulator, dc, tmp_path, "two", DISCORD_SHARD_COUNT="2")
    async with processes(running):
        await _until("the first process up", lambda: _all_healthy(running), logs=(running,))
        await _until("it claims both shards", lambda: dc.live_shards == [(0, 2), (1, 2)], logs=(running,))
        refused = await _start(database_url, openai_emulator, dc, tmp_path, "four", DISCORD_SHARD_COUNT="4")
        async with processes(refused):
            code = await asyncio.wait_for(refused.process.wait(), 120)
        output = refused.log.read_text()
        assert code == 2, output[-3000:]
        assert "DISCORD_SHARD_COUNT is 4 here but 2 in 1 other live process(es) of this bot" in output
        assert "Traceback" not in output
        assert dc.live_shards == [(0, 2), (1, 2)], "the running one goes on with both shards"


@pytest.mark.parametrize("first_runs", ["claimed shards", "DISCORD_SHARD_IDS=0"])
async def test_automatic_shards_are_claimed_and_a_killed_processes_shards_taken_over(
    database_url: str, openai_emulator: OpenAIEmulator, discord_emulator: DiscordEmulator, tmp_path: Path,
    first_runs: str,
) -> None:
    """The second process claims shard 1: taken from the first when that claimed both (which then gives it up at its
    next beat), free when the first runs shard 0 by setting. Killed, the first's shard is taken over by the second:
    a new client over both, the old one closed."""
    dc = discord_emulator
    guilds, ada = _world(dc)
    _script(openai_emulator)
    fixed = {"DISCORD_SHARD_IDS": "0"} if first_runs == "DISCORD_SHARD_IDS=0" else {}
    first = await _start(database_url, openai_emulator, dc, tmp_path, "first", DISCORD_SHARD_COUNT="2", **fixed)
    async with processes(first):
        await _until("the first process up", lambda: _all_healthy(first), logs=(first,))
        await _until("its shards connected", lambda: dc.live_shards == ([(0, 2)] if fixed else [(0, 2), (1, 2)]),
                     logs=(first,))
        second = await _start(database_url, openai_emulator, dc, tmp_path, "second", DISCORD_SHARD_COUNT="2")
        async with processes(second):
            await _until("the second process up", lambda: _all_healthy(second), logs=(first, second))
            claimed = "Discord shards 1 of 2 run here (claimed by lease)"
            await _until("the second's claim", lambda: claimed in second.log.read_text(), logs=(first, second))
            if not fixed:
                await _until("the first gives shard 1 up", lambda: "now 0 of 2" in first.log.read_text(),
                             logs=(first, second))
            await _until("one session a shard", lambda: dc.live_shards == [(0, 2), (1, 2)], logs=(first, second))
            first.process.kill()  # kill -9: its heartbeat stays, and goes stale
            await first.process.wait()
            _heartbeat_goes_stale(database_url, _owner_of(first))
            await _until("the second takes the first's shards over",
                         lambda: "hears no more events" in second.log.read_text(), timeout_s=60, logs=(second,))
            assert "now 0, 1 of 2" in second.log.read_text()
            await _until("the old client closed", lambda: dc.live_shards == [(0, 2), (1, 2)], logs=(second,))
            await _every_event_answered_once(dc, guilds, ada, (second,))


def _owner_of(running: Process) -> str:
    """The heartbeat owner of a process: hostname:pid:…"""
    return f":{running.process.pid}:"


def _heartbeat_goes_stale(database_url: str, owner_part: str) -> None:
    """As if STALE_AFTER_S had passed since the killed process's last beat (no test waits for it)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE process_heartbeats SET seen_at = now() - make_interval(secs => %s) WHERE owner LIKE %s",
            (STALE_AFTER_S + 1, f"%{owner_part}%"),
        ).rowcount
    assert updated == 1


async def _all_healthy(*started: Process) -> bool:
    return all([await healthy(p.port) for p in started])
