"""`relaybot doctor`: one line per part — settings, database, model endpoint, embeddings, platforms."""

from __future__ import annotations

from typing import Awaitable, Callable

from core.config import Settings
from core.llm import LLMError
from core.store.db import Database, DatabaseError
from core.store.migrations import MigrationError

Check = Callable[[Settings], Awaitable[tuple[bool, str]]]


async def check_database(settings: Settings) -> tuple[bool, str]:
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        async with db.connection() as conn:
            cursor = await conn.execute("SELECT count(*) FROM schema_migrations")
            row = await cursor.fetchone()
        return True, f"ok — {db.description}, {row[0] if row else 0} migrations applied"
    except (DatabaseError, MigrationError) as error:
        return False, f"FAILED — {error}"
    finally:
        await db.close()


async def check_llm(settings: Settings) -> tuple[bool, str]:
    from bot.runtime import build_llm

    llm = build_llm(settings)
    try:
        status = await llm.check()
        return True, f"ok — {settings.llm_model} at {settings.llm_base_url}: {status}"
    except LLMError as error:
        return False, f"FAILED — {settings.llm_base_url}: {error.message}"
    finally:
        await llm.aclose()


async def check_embeddings(settings: Settings) -> tuple[bool, str]:
    from bot.retrieval import describe_embeddings

    return True, describe_embeddings(settings)


async def check_slack(settings: Settings) -> tuple[bool, str]:
    if not settings.slack_bot_token:
        return True, "not configured (set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET or SLACK_APP_TOKEN)"
    from adapters.slack.adapter import check_slack as slack_auth_test

    line = await slack_auth_test(settings)
    return not line.startswith("FAILED"), line


async def check_discord(settings: Settings) -> tuple[bool, str]:
    if not settings.discord_token:
        return True, "not configured (set DISCORD_TOKEN)"
    from adapters.discord.adapter import check_discord as discord_me

    line = await discord_me(settings)
    return not line.startswith("FAILED"), line


CHECKS: list[tuple[str, Check]] = [
    ("database", check_database),
    ("llm", check_llm),
    ("embeddings", check_embeddings),
    ("slack", check_slack),
    ("discord", check_discord),
]


async def run_checks(settings: Settings) -> int:
    print(f"settings: model {settings.llm_model}, agent type {settings.agent_type}, data dir {settings.data_dir}")
    healthy = True
    for name, check in CHECKS:
        try:
            ok, line = await check(settings)
        except Exception as error:  # a doctor reports every failure as a line, never a traceback
            ok, line = False, f"FAILED — {type(error).__name__}: {error}"
        healthy = healthy and ok
        print(f"{name}: {line}")
    return 0 if healthy else 1
