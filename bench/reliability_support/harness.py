"""One scenario on one platform: fresh emulators and database, the bot processes, waiting for answers, the figures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

import psycopg

from tests.emulators.discord import DiscordEmulator, GlobalLimitConfig, RateLimitConfig
from tests.emulators.openai_server import OpenAIEmulator
from tests.emulators.slack import SlackEmulator

from .discord_side import DiscordQuestion, DiscordSide
from .postgres import LoopbackPostgres
from .processes import STOP_LIMIT_S, BotProcess
from .script import Script
from .slack_side import SlackQuestion, SlackSide
from .tally import Figures, Outcome, Reading, read_answer

Side = Union[SlackSide, DiscordSide]
Question = Union[SlackQuestion, DiscordQuestion]
POLL_S = 0.5
# After every question looks settled, late messages (a duplicate, a repair) get this long to show up.
QUIET_S = 3.0
CONNECT_LIMIT_S = 30.0
# Waiting stops when nothing has changed for this long (what is missing then stays missing).
STALL_S = 20.0
# Where a crashed process's answers need repairing: its heartbeat timeout (30 s) plus a repair round (10 s).
REPAIR_STALL_S = 45.0
LLM_API_KEY = "sk-reliability"


class Stage:
    """`async with Stage(...) as stage:` — everything one scenario run needs, torn down afterwards."""

    def __init__(self, *, scenario: str, platform: str, pg: LoopbackPostgres, log_root: Path,
                 socket_mode: bool = True, discord_channels: int = 10,
                 slack_options: dict[str, Any] | None = None, discord_options: dict[str, Any] | None = None) -> None:
        self.figures = Figures(scenario=scenario, platform=platform)
        self.pg = pg
        self.log_dir = log_root / f"{scenario}-{platform}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.script = Script()
        self.llm = OpenAIEmulator(api_key=LLM_API_KEY)
        self._socket_mode = socket_mode
        self._discord_channels = discord_channels
        self._slack_options = slack_options or {}
        self._discord_options = discord_options or {}
        self.side: Side | None = None
        self._emulator: SlackEmulator | DiscordEmulator | None = None
        self.processes: list[BotProcess] = []
        self.database_url = ""
        self._started = 0.0
        # Text shown twice anywhere in an answer counts as duplicated (see tally.intact); set by a scenario.
        self.strict = False

    async def __aenter__(self) -> Stage:
        self._started = time.monotonic()
        self.database_url = await asyncio.to_thread(self.pg.create_database)
        await self.llm.start()
        self.llm.script_fn(self.script)
        if self.figures.platform == "slack":
            slack = SlackEmulator(time_scale=1.0, **self._slack_options)
            await slack.start()
            self._emulator, self.side = slack, SlackSide(slack, socket_mode=self._socket_mode)
        else:
            options = {"rate_limit": RateLimitConfig(), "global_limit": GlobalLimitConfig(), **self._discord_options}
            discord = DiscordEmulator(time_scale=1.0, **options)
            await discord.start()
            self._emulator, self.side = discord, DiscordSide(discord, channels=self._discord_channels)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            for process in self.processes:
                if process.running:
                    code = await process.terminate()
                    self.figures.check(f"{process.name} stopped cleanly on SIGTERM"
                                       + ("" if code == 0 else f" (exit {code}{f', killed after {STOP_LIMIT_S:g} s' if code == -9 else ''})"),
                                       code == 0)
            self.figures.log_tracebacks = sum(process.tracebacks() for process in self.processes)
            if self.side is not None:
                self.figures.tracebacks = self.side.tracebacks()
                if self.side.unacked:
                    self.figures.note(f"{self.side.unacked} events never acked by any process")
            self._write_calls()
        finally:
            if isinstance(self._emulator, SlackEmulator):
                await self._emulator.close()
            elif isinstance(self._emulator, DiscordEmulator):
                await self._emulator.stop()
            await self.llm.stop()
            self.figures.seconds = time.monotonic() - self._started

    def _write_calls(self) -> None:
        """The platform calls the emulator answered, for diagnosis (calls.txt beside the process logs)."""
        with (self.log_dir / "calls.txt").open("w", encoding="utf-8") as out:
            if isinstance(self._emulator, SlackEmulator):
                for call in self._emulator.calls:
                    out.write(f"{call.at_s - self._started:8.3f} {call.method} {call.status} {call.error or ''} "
                              f"{call.params.get('channel', '')}\n")
            elif isinstance(self._emulator, DiscordEmulator):
                for record in self._emulator.request_log:
                    out.write(f"{record.at - self._started:8.3f} {record.method} {record.route} {record.status} {record.path}\n")

    # --- processes ---

    def env(self, **extra: str) -> dict[str, str]:
        assert self.side is not None
        return {
            "DATABASE_URL": self.database_url,
            "LLM_BASE_URL": self.llm.base_url,
            "LLM_API_KEY": LLM_API_KEY,
            "EMBEDDING_PROVIDER": "none",
            **self.side.env(),
            **extra,
        }

    def process(self, name: str, *, of: int = 1, **extra: str) -> BotProcess:
        """One of `of` processes sharing the workspace: on Slack each takes its share of the workspace's
        budget (SLACK_RATE_SHARE), as the README tells operators to set it."""
        if of > 1 and self.figures.platform == "slack":
            extra = {"SLACK_RATE_SHARE": f"{1 / of:.3f}", **extra}
        process = BotProcess(name, env=self.env(**extra), log_dir=self.log_dir)
        self.processes.append(process)
        return process

    async def start(self, process: BotProcess) -> None:
        """Starts it and waits until every running process holds its platform connection."""
        await process.start()
        await self.wait_connected()

    async def wait_connected(self) -> bool:
        assert self.side is not None
        want = sum(1 for process in self.processes if process.running)
        if isinstance(self.side, SlackSide) and not self.side.socket_mode:
            return True
        deadline = time.monotonic() + CONNECT_LIMIT_S
        while time.monotonic() < deadline:
            if self.side.connected() >= want:
                return True
            await asyncio.sleep(0.1)
        self.figures.note(f"only {self.side.connected()} of {want} processes connected")
        return False

    # --- answers ---

    def reading(self, question: Question, *, expected: str | None | bool = True) -> Reading:
        """`expected` True: the script's answer for the question; a string: that text; None: any ending."""
        assert self.side is not None
        want = self.script.expected(question.marker) if expected is True else (expected or None)
        texts = self.side.answer_texts(question)  # type: ignore[arg-type]
        return read_answer(question.marker, want, texts, strict=self.strict)

    async def settle(self, questions: Sequence[Question], *, limit_s: float, expected: str | None | bool = True,
                     stall_s: float = STALL_S) -> bool:
        """Waits until every question has an ending — or nothing has changed for `stall_s` (what is missing
        then stays missing), or `limit_s` — then a quiet moment for late messages. True when all ended."""
        assert self.side is not None
        started = time.monotonic()
        deadline = started + limit_s
        last_change, last_seen = started, None
        settled = False
        while time.monotonic() < deadline:
            readings = [self.reading(q, expected=expected) for q in questions]
            if all(reading.outcome is not Outcome.LOST for reading in readings):
                settled = True
                break
            seen = hash(tuple(reading.texts for reading in readings))
            if seen != last_seen:
                last_change, last_seen = time.monotonic(), seen
            elif time.monotonic() - last_change > stall_s:
                self.figures.note(f"gave up waiting: nothing changed for {stall_s:g} s")
                break
            await asyncio.sleep(POLL_S)
        if time.monotonic() >= deadline:
            self.figures.note(f"gave up waiting after {limit_s:g} s")
        self.figures.note(f"settled {time.monotonic() - started:.0f} s after the last question")
        await asyncio.sleep(QUIET_S)
        return settled

    def tally(self, questions: Sequence[Question], *, expected: str | None | bool = True) -> None:
        """Adds each question's reading to the figures; the ones not answered in full go to readings.txt."""
        with (self.log_dir / "readings.txt").open("a", encoding="utf-8") as out:
            for question in questions:
                reading = self.reading(question, expected=expected)
                self.figures.add(reading)
                if reading.outcome is not Outcome.ANSWERED or reading.duplicated:
                    out.write(f"--- {question.marker} {reading.outcome.value} duplicated={reading.duplicated} {question}\n")
                    for text in reading.texts:
                        out.write(f"    | {text[:300]!r}{' …' if len(text) > 300 else ''} ({len(text)} chars)\n")

    # --- database ---

    async def count_rows(self, table: str) -> int | None:
        """Rows in one of the bot's tables now; None while the database cannot be reached."""

        def count() -> int:
            with psycopg.connect(self.database_url, connect_timeout=2) as conn:
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return int(row[0]) if row else 0

        try:
            return await asyncio.to_thread(count)
        except psycopg.Error:
            return None

    async def reminder_runs(self) -> dict[str, int]:
        """Reminder rows per question marker: how many times each approved create_reminder call ran."""

        def count() -> dict[str, int]:
            with psycopg.connect(self.database_url) as conn:
                rows = conn.execute("SELECT text, count(*) FROM reminders GROUP BY text").fetchall()
            return {str(text).split()[0]: int(n) for text, n in rows}

        return await asyncio.to_thread(count)
