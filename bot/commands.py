"""The CLI's commands: run, migrate, doctor, chat."""

from __future__ import annotations

import argparse
import logging
import sys

from core.config import Settings
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError, apply_migrations

log = logging.getLogger(__name__)


async def run(settings: Settings, args: argparse.Namespace) -> int:
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
    from adapters.console.chat import ConsoleChat
    from bot.runtime import Runtime

    runtime = Runtime(settings)
    try:
        engine = await runtime.open_engine()
        runtime.scheduler.start()
        await ConsoleChat(engine, agent_type=args.agent).run()
    finally:
        await runtime.stop()
    return 0
