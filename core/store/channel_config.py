"""Per-channel settings and source grants in Postgres, every change audited (who, what, before → after, when)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from core.api_access import is_api_key_audience
from core.channels import FIELD_NAMES, ChannelSettings, ChannelSettingsError
from core.learning.model import CHANNEL_KIND
from core.store.db import Database
from core.text_safety import storable, storable_json

SOURCE_SCOPE_PREFIX = "source:"


@dataclass(frozen=True, kw_only=True)
class ConfiguredScope:
    """A channel or workspace with settings of its own, as `channels list` shows it."""

    scope: str
    settings: ChannelSettings
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One audited change."""

    scope: str
    field: str
    before: Any
    after: Any
    changed_by: str
    changed_at: datetime


@dataclass(frozen=True, kw_only=True)
class SourceAccess:
    """Who may read a source: everyone (open), or only where it is granted."""

    name: str
    restricted: bool
    granted_to: tuple[str, ...]
    owner: str = ""  # the team it belongs to (`slack:T1`), '' for the deployment's (core/retrieval/retriever.py)


class UnknownSource(LookupError):
    """No source has that name."""


class SourceOfAnotherTeam(UnknownSource):
    """A grant of a team's source to a place outside that team: seen from there, the source does not exist."""

    def __init__(self, name: str, owner: str, audience: str) -> None:
        super().__init__(f'the source "{name}" belongs to team {owner}; only its own channels and DMs can be granted it,'
                         f" not {audience}")


class ChannelConfigStore:
    """Reads are one small query per question (core.channels.ChannelResolver); writes are one transaction
    that changes the row and records the audit entries together."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def settings_for(self, scopes: Sequence[str]) -> dict[str, ChannelSettings]:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT scope, settings FROM channel_config WHERE scope = ANY(%s)", (list(scopes),)
            )
            rows = await cursor.fetchall()
        return {scope: _lenient(data) for scope, data in rows}

    async def get(self, scope: str) -> ChannelSettings:
        return (await self.settings_for([scope])).get(scope, ChannelSettings())

    async def list(self) -> list[ConfiguredScope]:
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT scope, settings, updated_at, updated_by FROM channel_config "
                "WHERE settings <> '{}'::jsonb ORDER BY scope"
            )
            rows = await cursor.fetchall()
        return [ConfiguredScope(scope=r[0], settings=_lenient(r[1]), updated_at=r[2], updated_by=r[3]) for r in rows]

    async def update(
        self, scope: str, *, set_fields: Mapping[str, Any] | None = None, unset: Sequence[str] = (), actor: str
    ) -> tuple[ChannelSettings, list[AuditEntry]]:
        """Set some fields and clear others (validated first: ChannelSettingsError); returns the new settings
        and what changed. A change that changes nothing records nothing."""
        set_fields = dict(set_fields or {})
        unknown = [name for name in [*set_fields, *unset] if name not in FIELD_NAMES]
        if unknown:
            raise ChannelSettingsError(f"unknown channel setting {unknown[0]!r}; known: {', '.join(FIELD_NAMES)}")
        ChannelSettings.from_json(set_fields)  # the values' shapes, before anything is written
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT settings FROM channel_config WHERE scope = %s FOR UPDATE", (scope,)
            )
            row = await cursor.fetchone()
            before = dict(row[0]) if row else {}
            # A setting's value is outside text (a Discord modal, the CLI): made storable as it is written.
            after = {**before, **storable_json(ChannelSettings.from_json(set_fields).to_json())}
            for name in unset:
                after.pop(name, None)
            changes = [name for name in FIELD_NAMES if before.get(name) != after.get(name)]
            if not changes:
                return _lenient(after), []
            await conn.execute(
                "INSERT INTO channel_config (scope, settings, updated_by) VALUES (%s, %s, %s) "
                "ON CONFLICT (scope) DO UPDATE SET settings = EXCLUDED.settings, version = channel_config.version + 1,"
                " updated_at = now(), updated_by = EXCLUDED.updated_by",
                (scope, Jsonb(after), storable(actor)),
            )
            entries = [await _audit(conn, scope, name, before.get(name), after.get(name), actor) for name in changes]
        return _lenient(after), entries

    async def history(self, scope: str | None = None, *, limit: int = 50) -> list[AuditEntry]:
        """The newest changes first: of one scope (a channel, a workspace, `source:NAME`), or of all."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT scope, field, before, after, changed_by, changed_at FROM config_audit "
                "WHERE %(scope)s::text IS NULL OR scope = %(scope)s ORDER BY id DESC LIMIT %(limit)s",
                {"scope": scope, "limit": limit},
            )
            rows = await cursor.fetchall()
        return [AuditEntry(scope=r[0], field=r[1], before=r[2], after=r[3], changed_by=r[4], changed_at=r[5]) for r in rows]

    # ----- who may read a source ----------------------------------------------------------------

    async def set_restricted(self, source: str, restricted: bool, *, actor: str) -> bool:
        """Restrict a source to the places granted it, or open it to all; False when nothing changed."""
        async with self._db.connection() as conn:
            current = await _source(conn, source, lock=True)
            if current[1] == restricted:
                return False
            await conn.execute("UPDATE sources SET restricted = %s, updated_at = now() WHERE id = %s", (restricted, current[0]))
            await _audit(conn, SOURCE_SCOPE_PREFIX + source, "restricted", current[1], restricted, actor)
        return True

    async def grant(self, source: str, audience: str, *, actor: str) -> bool:
        """Let `audience` (a channel scope, or a workspace's DMs) read a restricted source; False if it could."""
        async with self._db.connection() as conn:
            source_id, _ = await _source(conn, source, lock=True)
            cursor = await conn.execute("SELECT owner, kind FROM sources WHERE id = %s", (source_id,))
            owner, kind = await cursor.fetchone() or ("", "")
            # A team's learned channel may be granted to an API key (relaybot keys create --sources, the operator's
            # choice): the visibility rule then shows it to that key's answers only.
            learned_for_key = kind == CHANNEL_KIND and is_api_key_audience(audience)
            if owner and not audience.startswith(f"{owner}:") and not learned_for_key:
                # A search outside the team never sees its sources anyway; refusing says so instead of a grant that does nothing.
                raise SourceOfAnotherTeam(source, owner, audience)
            cursor = await conn.execute(
                "INSERT INTO source_grants (source_id, audience, granted_by) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (source_id, audience, actor),
            )
            if await cursor.fetchone() is None:
                return False
            await _audit(conn, audience, f"source {source}", "not granted", "granted", actor)
            await _audit(conn, SOURCE_SCOPE_PREFIX + source, f"grant {audience}", "not granted", "granted", actor)
        return True

    async def revoke(self, source: str, audience: str, *, actor: str) -> bool:
        async with self._db.connection() as conn:
            source_id, _ = await _source(conn, source, lock=True)
            cursor = await conn.execute(
                "DELETE FROM source_grants WHERE source_id = %s AND audience = %s RETURNING 1", (source_id, audience)
            )
            if await cursor.fetchone() is None:
                return False
            await _audit(conn, audience, f"source {source}", "granted", "not granted", actor)
            await _audit(conn, SOURCE_SCOPE_PREFIX + source, f"grant {audience}", "granted", "not granted", actor)
        return True

    async def access(self) -> list[SourceAccess]:
        """Every source with who may read it, by name."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT s.name, s.restricted, coalesce(array_agg(g.audience ORDER BY g.audience)"
                " FILTER (WHERE g.audience IS NOT NULL), '{}'), s.owner "
                "FROM sources s LEFT JOIN source_grants g ON g.source_id = s.id GROUP BY s.id ORDER BY s.name"
            )
            rows = await cursor.fetchall()
        return [SourceAccess(name=r[0], restricted=bool(r[1]), granted_to=tuple(r[2]), owner=r[3]) for r in rows]

    async def granted_to(self, audience: str) -> list[str]:
        """The restricted sources granted to one channel or DM audience."""
        async with self._db.connection() as conn:
            cursor = await conn.execute(
                "SELECT s.name FROM source_grants g JOIN sources s ON s.id = g.source_id "
                "WHERE g.audience = %s ORDER BY s.name",
                (audience,),
            )
            return [row[0] for row in await cursor.fetchall()]


def _lenient(data: Mapping[str, Any]) -> ChannelSettings:
    """Stored settings, skipping a field this version does not know (a newer process may have written it)."""
    known = {name: value for name, value in dict(data).items() if name in FIELD_NAMES}
    return ChannelSettings.from_json(known)


async def _source(conn: AsyncConnection, name: str, *, lock: bool) -> tuple[int, bool]:
    cursor = await conn.execute(
        "SELECT id, restricted FROM sources WHERE name = %s" + (" FOR UPDATE" if lock else ""), (name,)
    )
    row = await cursor.fetchone()
    if row is None:
        raise UnknownSource(name)
    return int(row[0]), bool(row[1])


async def record_change(db: Database, *, scope: str, field: str, before: Any, after: Any, actor: str) -> AuditEntry:
    """One change made elsewhere (learning from a channel turned on, changed or off) in the same history."""
    async with db.connection() as conn:
        return await _audit(conn, scope, field, before, after, actor)


async def _audit(conn: AsyncConnection, scope: str, field: str, before: Any, after: Any, actor: str) -> AuditEntry:
    cursor = await conn.execute(
        "INSERT INTO config_audit (scope, field, before, after, changed_by) VALUES (%s, %s, %s, %s, %s) "
        "RETURNING changed_at",
        (scope, field, None if before is None else Jsonb(before), None if after is None else Jsonb(after),
         storable(actor)),
    )
    row = await cursor.fetchone()
    assert row is not None
    return AuditEntry(scope=scope, field=field, before=before, after=after, changed_by=actor, changed_at=row[0])
