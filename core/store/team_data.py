"""A team's rows across the tables: its pending work dropped when it leaves, and every row of it deleted on purge."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from psycopg import AsyncConnection

from core.requests import team_key
from core.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Forgotten:
    """What forget_team did, table by table: rows changed (pending work dropped) or deleted (purge)."""

    team: str  # `slack:T1`, `discord:G1`
    purged: bool
    dropped: dict[str, int] = field(default_factory=dict)  # pending work: kept finals, reminders, live records…
    deleted: dict[str, int] = field(default_factory=dict)  # every row of the team, with purge
    syncs_stopped: tuple[str, ...] = ()  # the team's sources whose scheduled sync was turned off


def _under(team: str) -> str:
    """A LIKE pattern for the scopes under a team (`slack:T1:C1`, `slack:T1:dms`), its characters taken literally."""
    return team.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"


async def forget_team(db: Database, platform: str, workspace: str, *, purge: bool = False) -> Forgotten:
    """A team left (Slack's app_uninstalled / tokens_revoked, Discord's on_guild_remove) or is purged.

    Always: its pending work stops — kept finals and live records of its answers are dropped, its pending reminders
    and approvals are closed (failed / expired: kept as history), and its sources' scheduled syncs are turned off —
    with one log line. Its data (conversations, settings, sources, usage, feedback) is kept, so a reinstall finds it.
    With purge (UNINSTALL_DATA=purge, `relaybot teams purge`), every row of the team is deleted as well, in the same
    transaction. Rows of other teams are never touched: every statement names this platform and workspace.
    """
    if not platform or not workspace:
        # An org-wide install's key has no workspace: its teams are forgotten one by one, never '' for all of them.
        raise ValueError(f"forget_team needs a platform and a workspace id, not {platform!r}:{workspace!r}")
    team = team_key(platform, workspace)
    dropped: dict[str, int] = {}
    deleted: dict[str, int] = {}
    async with db.connection() as conn:
        dropped["pending_finals"] = await _count(conn, "DELETE FROM pending_finals WHERE platform = %s AND workspace = %s",
                                                 (platform, workspace))
        dropped["live_messages"] = await _count(conn, "DELETE FROM live_messages WHERE platform = %s AND workspace = %s",
                                                (platform, workspace))
        dropped["reminders"] = await _count(
            conn, "UPDATE reminders SET status = 'failed', fired_by = NULL WHERE platform = %s AND workspace = %s"
            " AND status IN ('pending', 'fired')", (platform, workspace))
        dropped["continuations"] = await _count(
            conn, "UPDATE continuations SET status = 'expired', finished_at = now() WHERE status = 'pending'"
            " AND platform = %s AND state -> 'conversation' ->> 'workspace' = %s", (platform, workspace))
        cursor = await conn.execute(
            "UPDATE sources SET sync_interval_s = NULL, updated_at = now() WHERE owner = %s"
            " AND sync_interval_s IS NOT NULL RETURNING name, sync_interval_s", (team,))
        stopped = sorted(row[0] for row in await cursor.fetchall())
        if purge:
            deleted = await _purge(conn, platform, workspace, team)
    outcome = Forgotten(team=team, purged=purge, dropped=dropped, deleted=deleted, syncs_stopped=tuple(stopped))
    log.warning(
        "team %s left: dropped %s kept final(s), %s live record(s), %s reminder(s), %s approval(s); syncs stopped: %s; %s",
        team, dropped["pending_finals"], dropped["live_messages"], dropped["reminders"], dropped["continuations"],
        ", ".join(stopped) or "none",
        f"purged {sum(deleted.values())} row(s) of its data" if purge else "its data is kept (UNINSTALL_DATA=keep)",
        extra={"audit": "team", "team": team, "dropped": dropped, "deleted": deleted, "purged": purge},
    )
    return outcome


async def _purge(conn: AsyncConnection, platform: str, workspace: str, team: str) -> dict[str, int]:
    """Delete every row of the team. Order matters only where no foreign key cascades (leases, feedback by turn)."""
    scopes = (team, _under(team))
    where = (platform, workspace)
    deleted: dict[str, int] = {}
    conversations = "SELECT id FROM conversations WHERE platform = %s AND workspace = %s"
    deleted["conversation_leases"] = await _count(
        conn, f"DELETE FROM conversation_leases WHERE conversation_id IN ({conversations})", where)
    deleted["feedback"] = await _count(
        conn, "DELETE FROM feedback f WHERE (f.platform = %s AND f.workspace = %s) OR f.turn_id IN"
        f" (SELECT m.turn_id FROM messages m WHERE m.conversation_id IN ({conversations}))", (*where, *where))
    # A continuation goes with its conversation (ON DELETE CASCADE); one whose conversation is gone goes by its state.
    deleted["continuations"] = await _count(
        conn, "DELETE FROM continuations WHERE platform = %s AND state -> 'conversation' ->> 'workspace' = %s", where)
    deleted["conversations"] = await _count(conn, "DELETE FROM conversations WHERE platform = %s AND workspace = %s",
                                            where)  # its messages cascade
    for table in ("reminders", "token_usage", "run_stops", "pending_finals", "live_messages"):
        deleted[table] = await _count(conn, f"DELETE FROM {table} WHERE platform = %s AND workspace = %s", where)
    cursor = await conn.execute("SELECT name FROM sources WHERE owner = %s", (team,))
    source_scopes = [f"source:{row[0]}" for row in await cursor.fetchall()]
    deleted["config_audit"] = await _count(
        conn, "DELETE FROM config_audit WHERE scope = %s OR scope LIKE %s OR scope = ANY(%s)", (*scopes, source_scopes))
    deleted["channel_config"] = await _count(conn, "DELETE FROM channel_config WHERE scope = %s OR scope LIKE %s", scopes)
    deleted["source_grants"] = await _count(conn, "DELETE FROM source_grants WHERE audience LIKE %s", (scopes[1],))
    deleted["sources"] = await _count(conn, "DELETE FROM sources WHERE owner = %s", (team,))  # documents… cascade
    deleted["learned_limits"] = await _count(
        conn, "DELETE FROM learned_limits WHERE scope = %s OR scope LIKE %s", scopes)
    return deleted


async def _count(conn: AsyncConnection, statement: str, params: tuple[object, ...]) -> int:
    cursor = await conn.execute(statement, params)  # type: ignore[arg-type]  # composed from constants only
    return max(cursor.rowcount, 0)
