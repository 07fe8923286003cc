"""The CLI's commands: run, migrate, doctor, chat."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping

from core.config import Settings
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError, apply_migrations

log = logging.getLogger(__name__)

EXIT_USAGE = 2
# Environment variables that only hosts with a throw-away disk set, and what to call such a host.
EPHEMERAL_DISK_HOSTS = (
    ("DYNO", "a Heroku-style dyno"),
    ("K_SERVICE", "a Cloud Run service"),
)


def ephemeral_disk_host(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The variable and the host it reveals when this process runs where the disk is thrown away, else None."""
    return next(((name, host) for name, host in EPHEMERAL_DISK_HOSTS if environ.get(name)), None)


def ephemeral_database_refusal(variable: str, host: str) -> str:
    """Why `relaybot run` will not start the embedded database on a throw-away disk, in one sentence."""
    return (
        f"{variable} is set, so this is {host} whose disk is wiped at every restart, and without DATABASE_URL the "
        "embedded database (approvals, reminders, conversation history) would be wiped with it; set DATABASE_URL "
        "to a Postgres with pgvector, or ALLOW_EPHEMERAL_DATABASE=true to start anyway."
    )


async def run(settings: Settings, args: argparse.Namespace) -> int:
    host = ephemeral_disk_host(os.environ)
    if host is not None and settings.database_url is None and not settings.allow_ephemeral_database:
        print(f"relaybot: {ephemeral_database_refusal(*host)}", file=sys.stderr)
        return EXIT_USAGE
    from bot.runtime import serve

    return await serve(settings)


async def migrate(settings: Settings, args: argparse.Namespace) -> int:
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open(migrate=False)
        applied = await apply_migrations(db.url or "")
    except (DatabaseError, MigrationError) as error:
        print(f"relaybot: {error}", file=sys.stderr)
        return 1
    finally:
        await db.close()
    print(f"{db.description}: applied {len(applied)} migration(s){': ' + ', '.join(applied) if applied else ''}.")
    return 0


async def doctor(settings: Settings, args: argparse.Namespace) -> int:
    from bot.doctor import run_checks

    return await run_checks(settings)


async def chat(settings: Settings, args: argparse.Namespace) -> int:
    """The terminal chat; 0 when it ends (/quit, Ctrl-D, or Ctrl-C while no answer runs)."""
    from adapters.console.chat import ConsoleChat
    from adapters.console.terminal import ctrl_c_calls
    from bot.runtime import Runtime

    runtime = Runtime(settings)
    try:
        engine = await runtime.open_engine()
        runtime.scheduler.start()
        # configure() sent the log to this file when stdout is a terminal, so no log line lands in an answer.
        console = ConsoleChat(engine, agent_type=args.agent, log_file=getattr(args, "log_file", None))
        with ctrl_c_calls(console.interrupt):
            await console.run()
    finally:
        await runtime.stop()
    return 0
