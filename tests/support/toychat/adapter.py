"""The toy chat's adapter: long-polls events, answers mentions through the shared AnswerRunner, and settles
Approve/Reject presses with one engine call — a platform supplies only its transport and rendering."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from adapters.answers import AnswerPlace, AnswerRunner, Pacing
from adapters.base import AdapterPorts
from adapters.streaming import MonotonicClock, RateBudget, StreamLimits
from core.approvals import ApprovalView, Click
from core.citations import Citation
from core.engine import Engine
from core.requests import Actor, ConversationKey, PriorMessage, Request

from .platform import NAME, ToyChatSettings

log = logging.getLogger(__name__)

WORKSPACE = "toy"
RETRY_POLL_S = 0.2


class ToyChatHttp:
    """The one door to the toy chat server."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        async with self.session.post(f"{self.url}{path}", json=body) as response:
            response.raise_for_status()
            return dict(await response.json())


class ToyChatSurface:
    """adapters.answers.Surface for one answer in a thread of the toy chat."""

    def __init__(self, *, http: ToyChatHttp, channel: str, thread: str, pacing: Pacing) -> None:
        self._http = http
        self.place = AnswerPlace(platform=NAME, workspace=WORKSPACE, channel=channel, thread=thread)
        self.pacing = pacing

    async def post(self, text: str, *, key: str | None = None, buttons: list[dict[str, str]] | None = None) -> str:
        body = {"channel": self.place.channel, "thread": self.place.thread, "text": text, "buttons": buttons or []}
        return str((await self._http.call("/messages", body))["id"])

    async def edit(self, message_id: str, text: str, *, buttons: list[dict[str, str]] | None = None) -> None:
        await self._http.call(f"/messages/{message_id}", {"text": text, "buttons": buttons or []})

    async def show_working(self) -> None:
        """The placeholder is the toy chat's first sign."""

    async def show_approval(self, view: ApprovalView) -> dict[str, Any]:
        return {"message_id": await self.post(approval_text(view), buttons=approval_buttons(view))}

    async def show_sources(self, citations: tuple[Citation, ...], answer_ids: list[str]) -> None:
        await self.post("\n".join(f"[{c.number}] {c.item.title}" for c in citations))

    async def show_notice(self, text: str) -> None:
        await self.post(text)


def approval_text(view: ApprovalView) -> str:
    lines = [f"{view.requested_by} asks to run:"]
    for call in view.calls:
        decision = view.decisions.get(call.call_id)
        said = "" if decision is None else f" — {'approved' if decision.approved else 'rejected'} by {decision.actor}"
        lines.append(f"{call.tool} {call.arguments}{said}")
    return "\n".join(lines)


def approval_buttons(view: ApprovalView) -> list[dict[str, str]]:
    if not view.undecided or view.state != "open":
        return []
    return [{"label": "Approve", "value": f"approve:{view.continuation_id}"},
            {"label": "Reject", "value": f"reject:{view.continuation_id}"}]


class ToyChatReply:
    """adapters.answers.ClickReply: the pressed approval message redrawn; a whisper to the presser."""

    def __init__(self, surface: ToyChatSurface, http: ToyChatHttp, *, message_id: str, user: str) -> None:
        self._surface = surface
        self._http = http
        self._message_id = message_id
        self._user = user

    async def redraw(self, view: ApprovalView) -> None:
        await self._surface.edit(self._message_id, approval_text(view), buttons=approval_buttons(view))

    async def tell(self, text: str) -> None:
        await self._http.call("/whispers", {"user": self._user, "text": text})


class ToyChatReader:
    """core.tools.context.ConversationReader: the toy chat keeps no history to read."""

    async def read(self, conversation: ConversationKey, *, scope: str, limit: int) -> list[PriorMessage]:
        return []


class ToyChatNotifier:
    """core.notifier.Notifier: an expired approval loses its buttons; a reminder is posted in its thread."""

    def __init__(self, http: ToyChatHttp) -> None:
        self._http = http

    async def approval_expired(self, *, view: ApprovalView, message_refs: list[dict[str, Any]]) -> None:
        for ref in message_refs:
            await self._http.call(f"/messages/{ref['message_id']}", {"text": approval_text(view) + "\n(expired)"})

    async def deliver_reminder(self, *, conversation: ConversationKey, user: str, text: str, key: str,
                               attempted_at: Any, check_claim: Any) -> None:
        await check_claim()
        await self._http.call("/messages", {"channel": conversation.channel, "thread": conversation.thread,
                                            "text": f"{user}: {text}"})


class ToyChatAdapter:
    """adapters.base.PlatformAdapter for the toy chat."""

    platform = NAME

    def __init__(self, *, settings: ToyChatSettings, engine: Engine, ports: AdapterPorts) -> None:
        assert settings.url
        self._engine = engine
        self._http = ToyChatHttp(settings.url)
        self.runner = AnswerRunner(platform=NAME, approvals=engine.approvals, live=ports.live)
        self.notifier = ToyChatNotifier(self._http)
        self.reader = ToyChatReader()
        clock = MonotonicClock()
        budget = RateBudget(capacity=50, refill_per_s=50, clock=clock)
        # Short edit intervals: the toy chat has no rate limit, and a test watches the answer being written.
        limits = StreamLimits(max_chars=2000, min_edit_interval_s=0.05, max_edit_interval_s=0.2, placeholder_after_s=0)
        self._pacing = Pacing(limits=limits, edit_budget=budget, post_budget=budget, clock=clock)
        self._accepting = True
        self._poll: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._http.session = aiohttp.ClientSession()
        self._poll = asyncio.create_task(self._poll_events(), name="toychat-poll")

    async def _poll_events(self) -> None:
        assert self._http.session is not None
        cursor = 0
        while True:
            try:
                async with self._http.session.get(f"{self._http.url}/events", params={"after": cursor}) as response:
                    events = await response.json()
            except aiohttp.ClientError:
                await asyncio.sleep(RETRY_POLL_S)
                continue
            for event in events:
                cursor = event["seq"]
                if self._accepting:
                    task = asyncio.create_task(self._on_event(event))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _on_event(self, event: dict[str, Any]) -> None:
        match event["type"]:
            case "mention":
                surface = self._surface(event["channel"], event["id"])
                request = Request(
                    question=event["text"], user=Actor(id=event["user"]),
                    conversation=ConversationKey(platform=NAME, workspace=WORKSPACE, channel=event["channel"],
                                                 thread=event["id"]),
                )
                self.runner.submit(self._engine.ask(request), surface)
            case "click":
                verb, _, continuation_id = event["value"].partition(":")
                surface = self._surface(event["channel"], event["thread"])
                reply = ToyChatReply(surface, self._http, message_id=event["message_id"], user=event["user"])
                click = Click(continuation_id=continuation_id, approved=verb == "approve", actor=Actor(id=event["user"]))
                result = await self._engine.approvals.click(click)
                await self.runner.settle_click(result, reply, surface, message_key=event["message_id"])

    def _surface(self, channel: str, thread: str) -> ToyChatSurface:
        return ToyChatSurface(http=self._http, channel=channel, thread=thread, pacing=self._pacing)

    async def maintain(self) -> None:
        """Nothing is left to repair: the toy chat keeps no answer across a restart."""

    async def stop_accepting(self) -> None:
        self._accepting = False

    @property
    def queued_answers(self) -> int:
        return self.runner.queued

    async def interrupt_inflight(self) -> None:
        await self.runner.interrupt_all()

    async def close(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(t for t in [self._poll, *self._tasks] if t is not None), return_exceptions=True)
        if self._http.session is not None:
            await self._http.session.close()

    async def readiness(self) -> str | None:
        return None
