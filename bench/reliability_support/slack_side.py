"""The Slack side of a scenario: the emulator, its questions (over Socket Mode or HTTP), and what the bot showed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.emulators.slack import SlackEmulator, app_mention_event
from tests.emulators.slack.server import EVENT_RETRY_DELAYS_S

from .tally import leaks_traceback

USER = "U0000ASKER"
# Slack redelivers an event nobody acked (Socket Mode: within a few seconds), at most three times.
SLACK_RETRIES = 3
ACK_WAIT_S = 5.0


@dataclass(kw_only=True)
class SlackQuestion:
    marker: str
    channel: str
    ts: str
    envelope: dict[str, Any]


class SlackSide:
    """One Slack workspace for one scenario run; `socket_mode` False delivers over HTTP to a process's port."""

    name = "slack"

    def __init__(self, emulator: SlackEmulator, *, socket_mode: bool = True) -> None:
        self.slack = emulator
        self.socket_mode = socket_mode
        self.unacked = 0  # events no connection acked even after Slack's retries

    def env(self) -> dict[str, str]:
        env = {
            "SLACK_BOT_TOKEN": self.slack.bot_token,
            "SLACK_SIGNING_SECRET": self.slack.signing_secret,
            "SLACK_API_URL": self.slack.api_url,
        }
        if self.socket_mode:
            env["SLACK_APP_TOKEN"] = self.slack.app_token
        return env

    def connected(self) -> int:
        return self.slack.socket_connection_count if self.socket_mode else 0

    def channel(self, index: int) -> str:
        return f"C{index:07d}R"

    async def ask(self, marker: str, *, channel_index: int = 0, text: str | None = None,
                  url: str | None = None, deliver: bool = True) -> SlackQuestion:
        """The question posted and (unless `deliver` is False) its event delivered, retried while not acked."""
        channel = self.channel(channel_index)
        full = f"<@{self.slack.bot_user_id}> {text or f'What is the status of {marker}?'}"
        ts = self.slack.add_user_message(channel, full, USER)
        event = app_mention_event(text=full, user=USER, channel=channel, ts=ts, team_id=self.slack.team_id)
        question = SlackQuestion(marker=marker, channel=channel, ts=ts, envelope=self.slack.event_envelope(event))
        if deliver:
            await self.deliver(question.envelope, url=url)
        return question

    async def deliver_on_slacks_schedule(self, question: SlackQuestion) -> int | None:
        """Socket Mode: the event pushed again after each push nobody acked within ACK_WAIT_S, at Slack's own
        delays (at once, after a minute, after five); the attempt that was acked (0 = the first), or None."""
        acks = await self.slack.push_socket_event_until_acked(question.envelope, timeout_s=ACK_WAIT_S,
                                                              retry_delays_s=EVENT_RETRY_DELAYS_S)
        if acks[-1] is None:
            self.unacked += 1
            return None
        return len(acks) - 1

    async def deliver(self, envelope: dict[str, Any], *, url: str | None = None, retry: int = 0) -> bool:
        """Pushes an event_callback as Slack does: again while nobody acks it, up to Slack's retries."""
        if url is not None:
            extra = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else None
            delivery = await self.slack.deliver_envelope(url, envelope, extra_headers=extra)
            return delivery.status == 200
        for attempt in range(retry, retry + SLACK_RETRIES + 1):
            ack = await self.slack.push_socket_event(envelope, timeout_s=ACK_WAIT_S, retry_attempt=attempt,
                                                     retry_reason="timeout" if attempt else "")
            if ack is not None:
                return True
        self.unacked += 1
        return False

    async def redeliver(self, question: SlackQuestion, *, url: str | None = None) -> bool:
        """The same event again (same event_id), as Slack's retry after a slow ack."""
        return await self.deliver(question.envelope, url=url, retry=1)

    def replies(self, question: SlackQuestion) -> list[Any]:
        return [m for m in self.slack.thread(question.channel, question.ts)
                if m.bot_id == self.slack.bot_id and m.ts != question.ts]

    def answer_texts(self, question: SlackQuestion) -> list[str]:
        # An answer's message is Markdown alone, a markdown block beside its own Stop or 👍/👎, or a native stream's
        # text with 👍/👎 under it (issue 22); not an approval, nor a native stream's Stop message of its own.
        return [m.text for m in self.replies(question) if not m.blocks or _is_answer(m)]

    def approval_messages(self, question: SlackQuestion) -> list[Any]:
        # Not the Stop button's message, nor the 👍/👎 one: those carry other actions.
        return [m for m in self.replies(question) if any(b["action_id"].startswith(APPROVAL_ACTIONS) for b in _buttons(m))]

    def approval_count(self, question: SlackQuestion) -> int:
        """Approval messages, decided ones included (a decision takes their buttons away)."""
        return sum(1 for m in self.replies(question) if m.blocks and not _is_control(m))

    async def approve(self, question: SlackQuestion, *, url: str | None = None) -> bool:
        """Clicks "Approve" on the question's approval message as its asker."""
        messages = self.approval_messages(question)
        if not messages:
            return False
        message = messages[0]
        button = next(b for b in _buttons(message) if b["action_id"] == "relaybot_approve")
        payload = self.slack.block_actions(question.channel, message.ts, user=USER, action_id=button["action_id"],
                                           value=button["value"])
        if url is not None:
            return (await self.slack.deliver_interaction(url, payload)).status == 200
        ack = await self.slack.push_socket_event(payload, type="interactive", timeout_s=ACK_WAIT_S)
        return ack is not None

    def shown_texts(self) -> list[str]:
        """Everything the bot put in front of people: messages (text and blocks), ephemerals, response_url posts."""
        shown: list[str] = []
        for channel in self.slack.channel_ids:
            for message in self.slack.messages(channel):
                if message.bot_id == self.slack.bot_id:
                    shown.append(message.text)
                    shown.append(json.dumps(message.blocks or [], ensure_ascii=False))
                    shown.extend(edit.text for edit in message.edits)
        shown.extend(e.text + json.dumps(e.blocks or [], ensure_ascii=False) for e in self.slack.ephemerals)
        shown.extend(json.dumps(post, ensure_ascii=False) for post in self.slack.response_url_posts)
        return shown

    def tracebacks(self) -> int:
        return sum(1 for text in self.shown_texts() if leaks_traceback(text))


APPROVAL_ACTIONS = ("relaybot_approve", "relaybot_reject")


def _is_control(message: Any) -> bool:
    """An answer's Stop message or its 👍/👎 message (blocks, but not an approval)."""
    blocks = message.blocks or []
    return any(block.get("type") == "context_actions" for block in blocks) or any(
        b.get("action_id") == "relaybot_stop" for b in _buttons(message)
    )


def _is_answer(message: Any) -> bool:
    if any(block.get("type") == "markdown" for block in message.blocks):
        return True
    actions = {b.get("action_id") for b in _buttons(message)}
    return not actions & {*APPROVAL_ACTIONS, "relaybot_stop"}


def _buttons(message: Any) -> list[dict[str, Any]]:
    return [el for block in message.blocks or [] if block.get("type") == "actions" for el in block.get("elements", [])]

