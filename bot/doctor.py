"""`relaybot doctor`: one line per part — settings, database, model endpoint, embeddings, learned channels, platforms, and each stored install."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Awaitable, Callable

from adapters.platform import Platform
from bot.platforms import PLATFORMS
from core.config import Settings
from core.llm import LLMError
from core.redact import redact_text, redact_url
from core.store.db import Database, DatabaseError
from core.store.installations import InstallStore
from core.store.migrations import MigrationError, apply_migrations

Check = Callable[[Settings], Awaitable[tuple[bool, str]]]
# Learned channels in error named on the doctor's line at most (`relaybot sources` lists every one).
ERRORS_NAMED = 3


async def check_database(settings: Settings) -> tuple[bool, str]:
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        # Applied here rather than by open(), so the line can say how many were new: the one summary of a
        # first doctor (each migration's own line is logged at INFO, below doctor's WARNING floor).
        await db.open(migrate=False)
        applied_now = await apply_migrations(db.url or "")
        async with db.connection() as conn:
            cursor = await conn.execute("SELECT count(*) FROM schema_migrations")
            row = await cursor.fetchone()
            cursor = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            vector = await cursor.fetchone()
        note = pgvector_note(str(vector[0]) if vector else "")
        just_now = f" ({len(applied_now)} just now)" if applied_now else ""
        return True, f"ok — {db.description}, {row[0] if row else 0} migrations applied{just_now}{note}"
    except (DatabaseError, MigrationError) as error:
        return False, f"FAILED — {error}"
    finally:
        await db.close()


def pgvector_note(version: str) -> str:
    """A warning for pgvector before 0.8: without iterative index scans, a search scoped to a channel's few
    sources filters after the HNSW scan and may find fewer passages than asked for."""
    parts = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if not parts or parts >= (0, 8):
        return ""
    return (
        f"; warning: pgvector {version} has no iterative index scans, so a channel that sees few sources may "
        "get fewer passages — upgrade to 0.8 or later"
    )


async def check_llm(settings: Settings) -> tuple[bool, str]:
    from bot.runtime import build_llm

    llm = build_llm(settings)
    where = redact_url(settings.llm_base_url)
    try:
        status = await llm.check()
        return True, f"ok — {settings.llm_model} at {where}: {status}"
    except LLMError as error:
        return False, f"FAILED — {where}: {error.message}"
    finally:
        await llm.aclose()


async def check_embeddings(settings: Settings) -> tuple[bool, str]:
    from bot.retrieval import describe_embeddings

    return True, describe_embeddings(settings)


async def check_learning(settings: Settings) -> tuple[bool, str]:
    """The channels learned from, counted by state; a channel in error is named with its reason (a warning: the
    running bot tries it again, and everything else answers as before)."""
    from bot.channel_sources_cli import learned_channels, learning_state

    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        channels = await learned_channels(settings, db, None)
    except (DatabaseError, MigrationError) as error:
        return False, f"FAILED — the learned channels cannot be read ({error})"
    finally:
        await db.close()
    if not channels:
        return True, "none chosen (`relaybot sources add-channel`)"
    states = {state: sum(1 for c in channels if c.state == state) for state in ("live", "backfilling", "error")}
    counted = ", ".join(f"{count} {state}" for state, count in states.items() if count)
    failing = [f"{c.place.key} (#{c.name}): {learning_state(c)}" for c in channels if c.state == "error"]
    warning = f"; warning: {'; '.join(failing[:ERRORS_NAMED])}" if failing else ""
    return True, f"ok — {len(channels)} channel{'s' if len(channels) != 1 else ''}: {counted}{warning}"


def platform_check(platform: Platform) -> Check:
    """A platform's doctor line (its entry in the table says how to get it) as a check."""

    async def check(settings: Settings) -> tuple[bool, str]:
        return platform_line(await platform.doctor(settings))

    return check


def platform_line(line: str) -> tuple[bool, str]:
    """A platform adapter's doctor line ("ok — …", "not configured …", "FAILED — …") and whether it is healthy.

    Anything that is not plainly ok or not configured counts as a failure, so a line in a new form
    can never pass a broken platform.
    """
    line = " ".join(line.split())
    return line.startswith(("ok — ", "not configured")), line


async def install_lines(settings: Settings, platforms: Sequence[Platform]) -> list[tuple[str, bool, str]]:
    """One (name, healthy, line) per stored install of each platform that serves several (its install_checks),
    the installs read from the database; none where no platform stores any."""
    checks = [(platform.name, check) for platform in platforms if platform.install_checks is not None
              and platform.configured(settings) and (check := platform.install_checks(settings)) is not None]
    if not checks:
        return []
    lines: list[tuple[str, bool, str]] = []
    db = Database(url=settings.database_url, data_dir=settings.data_dir)
    try:
        await db.open()
        for name, check in checks:
            try:
                results = await check(InstallStore(db))
            except (DatabaseError, MigrationError):
                raise
            except Exception as error:  # one line, never a traceback
                lines.append((f"{name} installs", False, f"FAILED — {type(error).__name__}: {' '.join(str(error).split())}"))
                continue
            if not results:
                lines.append((f"{name} installs", True, "none stored yet"))
            lines.extend((f"{name} {result.label}", result.ok, result.line) for result in results)
    except (DatabaseError, MigrationError) as error:
        lines.append(("installs", False, f"FAILED — the stored installs cannot be read ({error})"))
    finally:
        await db.close()
    return lines


CHECKS: list[tuple[str, Check]] = [
    ("database", check_database),
    ("llm", check_llm),
    ("embeddings", check_embeddings),
    ("learning", check_learning),
]


async def run_checks(settings: Settings, *, platforms: Sequence[Platform] = PLATFORMS) -> int:
    """Print one line per check, then one per platform; 0 when every part is healthy, 1 otherwise."""
    secrets = settings.secret_values()

    def show(line: str) -> None:
        # Every line goes out redacted: URLs lose their credentials and no configured secret is repeated.
        print(redact_text(line, secrets=secrets), flush=True)

    show(f"settings: model {settings.llm_model}, agent type {settings.agent_type}, data dir {settings.data_dir}")
    healthy = True
    for name, check in [*CHECKS, *((platform.name, platform_check(platform)) for platform in platforms)]:
        try:
            ok, line = await check(settings)
        except Exception as error:  # a doctor reports every failure as a line, never a traceback
            ok, line = False, f"FAILED — {type(error).__name__}: {' '.join(str(error).split())}"
        healthy = healthy and ok
        show(f"{name}: {line}")
    for name, ok, line in await install_lines(settings, platforms):
        healthy = healthy and ok
        show(f"{name}: {line}")
    return 0 if healthy else 1
