"""Stop buttons: who may stop a run, the stop request written in Postgres, and each process watching its own runs."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from core import wording
from core.channels import ChannelResolver
from core.requests import Actor, ConversationKey
from core.store.run_stops import STOP_CHANNEL, RunStopStore
from core.tools import ApprovalPolicy

T = TypeVar("T")
log = logging.getLogger(__name__)

# Without LISTEN (no dedicated connection could be opened) stop requests are polled this often, so a
# run in another process still stops within a second of the click.
POLL_S = 0.4
# With LISTEN a notification wakes the watcher at once; the poll stays as a net for a missed one.
LISTEN_POLL_S = 3.0
# How often a process says its runs are alive; a run not seen for run_stops.DEAD_AFTER_S (judged by the
# database's clock, the one that wrote seen_at: a process's own may be minutes off) died with its process.
SEEN_EVERY_S = 10.0

StopOutcome = Literal["stopping", "already_stopping", "ended", "not_found", "refused"]


@dataclass(frozen=True, kw_only=True)
class StopResult:
    """What a Stop click did; `message` is the private sentence for the clicker."""

    outcome: StopOutcome
    message: str


class StopSignal:
    """Set once when someone asks the run to stop; a step the run is waiting in is cancelled there and then.

    The signal interrupts the step itself (`step`), so a token costs no extra task: the run's own task is
    cancelled only while it waits inside a step, and the step reports the stop instead of raising."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.by = ""
        self.outcome = "cancelled"  # how the run ended, for its row; the run sets it
        self.finished = False  # the run reached its own end (answer, approval, failure): a stop is too late
        self._set = False
        self._stepping: asyncio.Task[Any] | None = None  # the task waiting inside `step`, if one is
        self._interrupted = False

    def set(self, by: str) -> None:
        if self._set or self.finished:
            return
        self.by = by
        self._set = True
        task = self._stepping
        if task is not None and task is not asyncio.current_task():
            # The task is suspended inside the step: the cancellation lands there.
            self._interrupted = True
            task.cancel()

    def is_set(self) -> bool:
        return self._set

    def finish(self) -> None:
        """The run has its ending (a final answer, an approval, a failure) and is storing it: a stop that comes
        now is too late, and one that came as the last step ended no longer counts."""
        self.finished = True

    async def step(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        """(True, its result) — or (False, None) when a stop came first, the step cancelled where it waited
        (a model stream closes, a tool call in progress is cut off)."""
        if self._set and not self.finished:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # never awaited: say so to the coroutine, not to the event loop's warnings
            return False, None
        self._stepping = asyncio.current_task()
        try:
            return True, await awaitable
        except asyncio.CancelledError:
            if not self._interrupted:
                raise  # cancelled from outside (shutdown)
            self._interrupted = False
            task = asyncio.current_task()
            if task is not None and task.uncancel() > 0:
                raise  # a shutdown cancelled the run as well: that one goes on
            return False, None
        finally:
            self._stepping = None


class RunStops:
    """Registers runs while they go, takes stop requests from clicks in any process, and cancels its own runs
    when one is requested: at once when the click came here, through LISTEN/NOTIFY (or a poll) otherwise."""

    def __init__(
        self, *, store: RunStopStore, policy: ApprovalPolicy, channels: ChannelResolver | None = None,
        listen_url: Callable[[], str | None] = lambda: None, poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self.policy = policy
        self._channels = channels
        self._listen_url = listen_url
        self._poll_s = poll_s
        self._local: dict[str, StopSignal] = {}
        self._watcher: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def running(self, run_id: str, conversation: ConversationKey, *, asked_by: str) -> AsyncIterator[StopSignal]:
        """The run is registered for its whole body; its row says how it ended (`signal.outcome`) on the way out."""
        signal = StopSignal(run_id)
        await self._store.started(run_id, conversation, asked_by=asked_by)
        self._local[run_id] = signal
        self._ensure_watcher()
        try:
            yield signal
        finally:
            self._local.pop(run_id, None)
            if not self._local and self._watcher is not None:
                self._watcher.cancel()
                self._watcher = None
            try:
                stopped = signal.is_set() and not signal.finished
                await asyncio.shield(self._store.ended(run_id, "stopped" if stopped else signal.outcome))
            except (psycopg.Error, PoolTimeout):
                # A row left open is taken for dead once it is no longer seen; a late click is told so.
                log.warning("could not record the end of run %s", run_id, exc_info=True)

    async def request(
        self, run_id: str, *, actor: Actor, mention: Callable[[str], str] = str, admins: bool = True,
        team: str | None = None,
    ) -> StopResult:
        """A Stop click: the asker, an approver (of the run's channel) or an admin may stop a run still going. A click
        naming its `team` (`discord:G1`) finds no run of another team, as an approval click finds no approval of one."""
        try:
            uuid.UUID(run_id)
        except ValueError:
            return StopResult(outcome="not_found", message=wording.stop_not_found())
        row = await self._store.get(run_id)
        if row is None or (team is not None and row.conversation.team != team):
            return StopResult(outcome="not_found", message=wording.stop_not_found())
        local = self._local.get(run_id)
        if row.ended_at is not None or row.dead or (local is not None and local.finished):
            return StopResult(outcome="ended", message=wording.stop_too_late())
        policy = await self._policy_of(row.conversation)
        if not policy.may_decide(actor=actor.id, requested_by=row.asked_by, actor_roles=actor.roles, actor_is_admin=actor.is_admin):
            return StopResult(
                outcome="refused",
                message=policy.describe(row.asked_by, mention=mention, admins=admins, sentence=wording.only_they_may_stop),
            )
        if row.stop_by is not None:
            return StopResult(outcome="already_stopping", message=wording.stop_already_requested(row.stop_by))
        if not await self._store.request_stop(run_id, by_id=actor.id, by=actor.display):
            current = await self._store.get(run_id)
            if current is None or current.ended_at is not None or current.dead:
                return StopResult(outcome="ended", message=wording.stop_too_late())
            return StopResult(outcome="already_stopping", message=wording.stop_already_requested(current.stop_by or ""))
        log.info("run %s: stop asked by %s", run_id, actor.display,
                 extra={"audit": "stop", "run_id": run_id, "actor": actor.id, "actor_name": actor.name})
        if local is not None:
            local.set(actor.display)
        return StopResult(outcome="stopping", message=wording.stop_requested())

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.wait({self._watcher})
            self._watcher = None

    # ----- internals ------------------------------------------------------------------------------

    async def _policy_of(self, conversation: ConversationKey) -> ApprovalPolicy:
        """Who may stop in the run's channel: the same people who may approve there."""
        if self._channels is None:
            return self.policy
        channel = await self._channels.resolve(conversation)
        return ApprovalPolicy(approvers=channel.approvers, approver_roles=channel.approver_roles)

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """While this process has runs: wake on a NOTIFY (or every poll), read the stop requests of its runs."""
        listener: psycopg.AsyncConnection | None = None
        last_seen = 0.0
        loop = asyncio.get_running_loop()
        try:
            listener = await self._listen()
            while self._local:
                listener = await self._wait(listener)
                runs = list(self._local)
                try:
                    for request in await self._store.stop_requests(runs):
                        signal = self._local.get(request.run_id)
                        if signal is not None:
                            signal.set(request.by)
                    if loop.time() - last_seen >= SEEN_EVERY_S:
                        await self._store.seen(runs)
                        last_seen = loop.time()
                except (psycopg.Error, PoolTimeout):
                    log.warning("could not read stop requests; trying again", exc_info=True)
                    await asyncio.sleep(self._poll_s)
        finally:
            if listener is not None:
                await asyncio.shield(_close_quietly(listener))

    async def _listen(self) -> psycopg.AsyncConnection | None:
        url = self._listen_url()
        if not url:
            return None
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5)
            await conn.execute(f"LISTEN {STOP_CHANNEL}")
            return conn
        except psycopg.Error:
            log.warning("cannot LISTEN for stop requests; polling every %.1f s instead", self._poll_s, exc_info=True)
            return None

    async def _wait(self, listener: psycopg.AsyncConnection | None) -> psycopg.AsyncConnection | None:
        """Until a notification or the next poll; a listener that broke is dropped (polling from then on)."""
        if listener is None:
            await asyncio.sleep(self._poll_s)
            return None
        try:
            async for _ in listener.notifies(timeout=LISTEN_POLL_S, stop_after=1):
                pass
            return listener
        except psycopg.Error:
            log.warning("the stop listener broke; polling instead", exc_info=True)
            await _close_quietly(listener)
            await asyncio.sleep(self._poll_s)
            return None


async def _close_quietly(conn: psycopg.AsyncConnection) -> None:
    try:
        await conn.close()
    except Exception:
        log.debug("closing the stop listener failed", exc_info=True)
