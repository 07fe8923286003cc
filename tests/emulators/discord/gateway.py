"""The emulator's gateway: HELLO, IDENTIFY → READY + GUILD_CREATE, heartbeats, RESUME, dispatches, shards, guild joins and removals."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from tests.emulators.discord.models import JSONDict
from tests.emulators.discord.payloads import guild_create_payload, member_payload, user_payload
from tests.emulators.discord.state import World

_log = logging.getLogger(__name__)

OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_RESUME = 6
OP_REQUEST_GUILD_MEMBERS = 8
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11
CLOSE_AUTHENTICATION_FAILED = 4004
CLOSE_INVALID_SHARD = 4010
CLOSE_DISALLOWED_INTENTS = 4014
REPLAY_BUFFER_EVENTS = 1_000
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15

# Given a session, the payload to send it, or None when the session must not get this event.
PayloadForSession = Callable[["GatewaySession"], JSONDict | None]


def shard_of(guild_id: int | None, shard_count: int) -> int:
    """Discord's rule: a guild's events go to shard (guild_id >> 22) % shard_count; DMs (no guild) to shard 0."""
    return 0 if guild_id is None else (guild_id >> 22) % shard_count


def snowflake_on_shard(snowflake: int, shard: tuple[int, int]) -> int:
    """The first snowflake from `snowflake` on (a few milliseconds after it) that routes to shard [id, count]."""
    shard_id, shard_count = shard
    while shard_of(snowflake, shard_count) != shard_id:
        snowflake += 1 << 22
    return snowflake


def _guild_of(payload: JSONDict) -> int | None:
    """The guild an event belongs to, read from its payload as Discord routes it (none: a DM, or no guild)."""
    raw = payload.get("guild_id") if isinstance(payload, dict) else None
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None  # a malformed payload a test sends on purpose goes where a DM would


@dataclass(kw_only=True)
class GatewaySession:
    """One identified bot session; it survives a dropped socket so it can be RESUMEd."""

    session_id: str
    intents: int
    ws: web.WebSocketResponse | None
    seq: int = 0
    sent: list[JSONDict] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # [shard_id, shard_count] from IDENTIFY; a session that names none is the only shard of one.
    shard: tuple[int, int] = (0, 1)

    def has_intent(self, intent: int) -> bool:
        return bool(self.intents & intent)

    def serves(self, guild_id: int | None) -> bool:
        """Whether this session's shard gets the events of `guild_id` (None: DMs, which go to shard 0)."""
        return shard_of(guild_id, self.shard[1]) == self.shard[0]

    async def send_dispatch(self, event: str, data: JSONDict) -> None:
        async with self.lock:
            self.seq += 1
            frame = {"op": OP_DISPATCH, "t": event, "s": self.seq, "d": data}
            self.sent.append(frame)
            del self.sent[:-REPLAY_BUFFER_EVENTS]
            if self.ws is not None and not self.ws.closed:
                await self.ws.send_str(json.dumps(frame))


class GatewayHub:
    """Serves the websocket and fans dispatches out to every live session."""

    def __init__(self, world: World, *, heartbeat_interval_ms: int, gateway_url: Callable[[], str]) -> None:
        self._world = world
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._gateway_url = gateway_url
        self.sessions: dict[str, GatewaySession] = {}
        self._sockets: set[web.WebSocketResponse] = set()
        self._dropped: set[web.WebSocketResponse] = set()

    @property
    def live_session_count(self) -> int:
        return sum(1 for s in self.sessions.values() if s.ws is not None and not s.ws.closed)

    @property
    def live_shards(self) -> list[tuple[int, int]]:
        """The [shard_id, shard_count] of every session with an open socket, sorted (a shard twice if two run it)."""
        return sorted(s.shard for s in self.sessions.values() if s.ws is not None and not s.ws.closed)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.add(ws)
        session: GatewaySession | None = None
        try:
            await ws.send_str(json.dumps({"op": OP_HELLO, "d": {"heartbeat_interval": self._heartbeat_interval_ms}}))
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                session = await self._on_frame(ws, json.loads(frame.data), session)
        finally:
            self._sockets.discard(ws)
            dropped_by_us = ws in self._dropped
            self._dropped.discard(ws)
            # A client's clean close (1000/1001) ends the session; a dropped socket stays resumable.
            if session is not None and not dropped_by_us and ws.close_code in (1000, 1001):
                self.sessions.pop(session.session_id, None)
        return ws

    async def _on_frame(
        self, ws: web.WebSocketResponse, message: JSONDict, session: GatewaySession | None
    ) -> GatewaySession | None:
        op, data = message.get("op"), message.get("d")
        if op == OP_HEARTBEAT:
            await ws.send_str(json.dumps({"op": OP_HEARTBEAT_ACK}))
        elif op == OP_IDENTIFY:
            return await self._identify(ws, data or {})
        elif op == OP_RESUME:
            return await self._resume(ws, data or {})
        elif op == OP_REQUEST_GUILD_MEMBERS and session is not None:
            await self._send_member_chunk(session, data or {})
        return session

    async def _identify(self, ws: web.WebSocketResponse, data: JSONDict) -> GatewaySession | None:
        if data.get("token") not in (self._world.bot_token, f"Bot {self._world.bot_token}"):
            await ws.close(code=CLOSE_AUTHENTICATION_FAILED, message=b"Authentication failed.")
            return None
        if int(data.get("intents", 0)) & INTENT_MESSAGE_CONTENT and not self._world.message_content_portal:
            # Discord: a privileged intent the Developer Portal has not turned on.
            await ws.close(code=CLOSE_DISALLOWED_INTENTS, message=b"Disallowed intent(s).")
            return None
        shard = _shard_in(data.get("shard"))
        if shard is None:
            await ws.close(code=CLOSE_INVALID_SHARD, message=b"Invalid shard.")
            return None
        session = GatewaySession(
            session_id=secrets.token_hex(16), intents=int(data.get("intents", 0)), ws=ws, shard=shard
        )
        self.sessions[session.session_id] = session
        world = self._world
        guild_ids = [guild_id for guild_id in world.bot_guild_ids() if session.serves(guild_id)]
        await session.send_dispatch(
            "READY",
            {
                "v": 10,
                "user": user_payload(world, world.bot_user_id),
                "guilds": [{"id": str(guild_id), "unavailable": True} for guild_id in guild_ids],
                "session_id": session.session_id,
                "shard": list(shard),
                "resume_gateway_url": self._gateway_url(),
                "session_type": "normal",
                "application": {"id": str(world.application_id), "flags": 0},
                "private_channels": [],
                "relationships": [],
                "user_settings": {},
                "geo_ordered_rtc_regions": [],
            },
        )
        for guild_id in guild_ids:
            await session.send_dispatch("GUILD_CREATE", guild_create_payload(world, guild_id))
        return session

    async def _resume(self, ws: web.WebSocketResponse, data: JSONDict) -> GatewaySession | None:
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or data.get("token") != self._world.bot_token:
            await ws.send_str(json.dumps({"op": OP_INVALID_SESSION, "d": False}))
            return None
        client_seq = int(data.get("seq") or 0)
        async with session.lock:
            session.ws = ws
            for frame in session.sent:
                if frame["s"] > client_seq:
                    await ws.send_str(json.dumps(frame))
        await session.send_dispatch("RESUMED", {})
        return session

    async def _send_member_chunk(self, session: GatewaySession, data: JSONDict) -> None:
        guild_id = int(data.get("guild_id") or 0)
        if guild_id not in self._world.guilds:
            return
        members = [member_payload(self._world, guild_id, uid) for uid in self._world.guild_members(guild_id)]
        chunk: JSONDict = {"guild_id": str(guild_id), "members": members, "chunk_index": 0, "chunk_count": 1}
        if data.get("nonce"):
            chunk["nonce"] = data["nonce"]
        await session.send_dispatch("GUILD_MEMBERS_CHUNK", chunk)

    async def dispatch(self, event: str, payload_for: PayloadForSession) -> None:
        """To every session whose shard the event's guild routes to (DMs and their interactions: shard 0)."""
        for session in list(self.sessions.values()):
            payload = payload_for(session)
            if payload is not None and session.serves(_guild_of(payload)):
                await session.send_dispatch(event, payload)

    async def guild_joined(self, guild_id: int) -> None:
        """The bot was added to a guild while connected: GUILD_CREATE with no `unavailable` field, which is how a
        client tells a join from a guild of its READY becoming available."""
        payload = {key: value for key, value in guild_create_payload(self._world, guild_id).items() if key != "unavailable"}
        await self._to_guilds_shard(guild_id, "GUILD_CREATE", payload)

    async def guild_removed(self, guild_id: int, *, outage: bool = False) -> None:
        """The bot was removed from a guild (kicked, banned, the guild deleted) or left it: GUILD_DELETE with no
        `unavailable` field; with `outage`, `unavailable: true`: the guild is only out of reach for a while."""
        payload: JSONDict = {"id": str(guild_id), "unavailable": True} if outage else {"id": str(guild_id)}
        await self._to_guilds_shard(guild_id, "GUILD_DELETE", payload)

    async def _to_guilds_shard(self, guild_id: int, event: str, payload: JSONDict) -> None:
        # A guild's own events carry `id`, not `guild_id`: routed here by the guild's shard, not by dispatch().
        for session in list(self.sessions.values()):
            if session.serves(guild_id):
                await session.send_dispatch(event, payload)

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001, message=b"emulator stopping")
        self.sessions.clear()

    async def drop_connections(self) -> None:
        """Close every socket abnormally (as a network fault would); sessions stay resumable."""
        for ws in list(self._sockets):
            self._dropped.add(ws)
            await ws.close(code=4000, message=b"emulator dropped the connection")


def _shard_in(raw: object) -> tuple[int, int] | None:
    """IDENTIFY's `shard` as (id, count); absent means (0, 1); None when Discord would refuse it (4010)."""
    if raw is None:
        return (0, 1)
    if not isinstance(raw, (list, tuple)) or len(raw) != 2 or not all(isinstance(n, int) for n in raw):
        return None
    shard_id, shard_count = raw
    return (shard_id, shard_count) if 0 <= shard_id < shard_count else None
