"""bench/slack_stream.py's bot in a process of its own: engine, SlackAdapter, HTTP server; read and stopped over stdin.

The bench runs the Slack and OpenAI emulators; this process is the bot they talk to, as real Slack and the bot are
different machines (sharing one event loop, the bot's load delayed the emulator's own readings). Control is JSON
lines: the bench writes a request on stdin, this process answers on stdout; logs go to stderr (the bench's log
file). Its first line is {"port": N} once the bot takes events on http://127.0.0.1:N/slack/events.

Requests: {"op": "read", "team": T} → the adapter's answers in flight, the engine's active runs, the native
streaming counts and the workspace posting budget of T; {"op": "stop"} → stops the bot cleanly and answers with a
last reading. End of input stops it too (the bench went away).

Run by the bench: python -m bench.slack_stream_bot --database-url URL --openai-url URL --slack-api-url URL
--time-scale S [--told-cap N] [--native], with SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET in the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from adapters.http.server import HttpServer
from adapters.slack import SlackAdapter
from bot.runtime import settle_after_start, warm_up_process
from core.store.db import Database
from tests.support.engine import make_engine
from tests.support.ports import ports_for

from bench.slack_stream_support import BotReading, Limit, NativeTally

TOKEN_ENV = "SLACK_BOT_TOKEN"
SECRET_ENV = "SLACK_SIGNING_SECRET"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--openai-url", required=True)
    parser.add_argument("--slack-api-url", required=True)
    parser.add_argument("--time-scale", type=float, required=True)
    parser.add_argument("--told-cap", type=int, default=None, help="SLACK_WORKSPACE_POSTS_PER_MINUTE (unset if absent)")
    parser.add_argument("--native", action="store_true", help="SLACK_NATIVE_STREAMING=auto (else off)")
    return parser.parse_args(argv)


class Bot:
    """What bench/slack_stream.py's run() built in its own process before: the same engine, adapter and server."""

    def __init__(self, db: Database, options: argparse.Namespace) -> None:
        self.engine = make_engine(
            db, options.openai_url, slack_bot_token=os.environ[TOKEN_ENV], slack_signing_secret=os.environ[SECRET_ENV],
            slack_api_url=options.slack_api_url, slack_native_streaming="auto" if options.native else "off",
            slack_workspace_posts_per_minute=options.told_cap, feedback_buttons=True,
        )
        self.http = HttpServer(host="127.0.0.1", port=0)
        self.adapter = SlackAdapter(settings=self.engine.settings, engine=self.engine, ports=ports_for(db), http=self.http,
                                    time_scale=options.time_scale)

    async def start(self) -> None:
        await self.http.start()
        await self.adapter.start()

    async def stop(self) -> None:
        await self.adapter.stop_accepting()
        await self.adapter.close()
        await self.http.stop()

    def reading(self, team: str | None) -> BotReading:
        counts = self.adapter.native.counts
        budget = self.adapter.surfaces.budgets.workspace_posts(team) if team else None
        return BotReading(
            inflight_answers=self.adapter.inflight_answers, active_runs=self.engine.active_runs,
            native=NativeTally(native=counts.native, fell_back=counts.fell_back, post_update=counts.post_update,
                               reasons=dict(counts.reasons)),
            workspace_posts=Limit(burst=budget.capacity, per_slack_s=budget.refill_per_s) if budget else None,
        )


async def control_pipes() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """stdin and stdout as asyncio streams: the loop never waits on the bench reading or writing. Anything else
    printed goes to stderr (the log), so the control channel carries only answers."""
    control_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, control_out)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def answer(writer: asyncio.StreamWriter, line: str) -> None:
    writer.write(line.encode() + b"\n")
    await writer.drain()


async def serve(options: argparse.Namespace) -> None:
    reader, writer = await control_pipes()
    # The URL is given: nothing embedded starts, the folder is never used.
    db = Database(url=options.database_url, data_dir=Path(tempfile.gettempdir()))
    await db.open()
    try:
        bot = Bot(db, options)
        # As `relaybot run` starts (bot/runtime.serve): without the freeze and the quiet collector, full collections
        # in the burst walked the ~160k objects start built and every answer's state.
        await warm_up_process()
        await bot.start()
        collector = settle_after_start(lambda: bot.engine.active_runs > 0)
        stopped = False
        try:
            await answer(writer, json.dumps({"port": bot.http.port}))
            while line := await reader.readline():
                request = json.loads(line)
                if request.get("op") == "read":
                    await answer(writer, bot.reading(request.get("team")).to_json())
                elif request.get("op") == "stop":
                    await bot.stop()
                    stopped = True
                    await answer(writer, bot.reading(None).to_json())
                    break
                else:
                    await answer(writer, json.dumps({"error": f"unknown request {request!r}"}))
        finally:
            if not stopped:
                await bot.stop()
            await collector.stop()
    finally:
        await db.close()


def main() -> None:
    options = arguments()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(options))


if __name__ == "__main__":
    main()
