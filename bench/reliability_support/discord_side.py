"""The Discord side of a scenario: the emulator (one guild, its channels, an asker), questions and what the bot showed."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests.emulators.discord import DiscordEmulator, StoredMessage

from .tally import leaks_traceback

# adapters/discord/buttons.py: an approve button's custom_id is "rb:a:<continuation>:<call>".
APPROVE_PREFIX = "rb:a:"


@dataclass(kw_only=True)
class DiscordQuestion:
    marker: str
    channel_id: int
    message_id: int


class DiscordSide:
    """Set up the guild and channels before any process connects (the gateway sends them at IDENTIFY)."""

    name = "discord"

    def __init__(self, emulator: DiscordEmulator, *, channels: int = 10) -> None:
        self.dc = emulator
        self.guild_id = emulator.add_guild("reliability")
        self.channel_ids = [emulator.add_channel(self.guild_id, f"room-{i}") for i in range(channels)]
        self.asker = emulator.add_user("asker")
        self.unacked = 0

    def env(self) -> dict[str, str]:
        return {
            "DISCORD_TOKEN": self.dc.token,
            "DISCORD_API_BASE": self.dc.api_base,
            "DISCORD_GATEWAY_URL": self.dc.gateway_url,
        }

    def connected(self) -> int:
        return self.dc.live_session_count

    async def ask(self, marker: str, *, channel_index: int = 0, text: str | None = None) -> DiscordQuestion:
        channel_id = self.channel_ids[channel_index % len(self.channel_ids)]
        message_id = await self.dc.send_user_message(
            channel_id, self.asker, text or f"What is the status of {marker}?", mentions_bot=True
        )
        return DiscordQuestion(marker=marker, channel_id=channel_id, message_id=message_id)

    async def redeliver(self, question: DiscordQuestion) -> bool:
        """The same MESSAGE_CREATE dispatched again to every session (a replayed event)."""
        await self.dc.dispatch_message("MESSAGE_CREATE", self.dc.message(question.message_id))
        return True

    def replies(self, question: DiscordQuestion) -> list[StoredMessage]:
        """The bot's messages answering the question: in the thread opened on it, or replies in the channel."""
        found: list[StoredMessage] = []
        thread = self.dc.thread_of(question.message_id)
        if thread is not None:
            found += [m for m in self.dc.messages(thread.id) if m.author_id == self.dc.bot_user_id]
        found += [
            m for m in self.dc.messages(question.channel_id)
            if m.author_id == self.dc.bot_user_id and (m.message_reference or {}).get("message_id") == str(question.message_id)
        ]
        return sorted(found, key=lambda m: m.id)

    def answer_texts(self, question: DiscordQuestion) -> list[str]:
        # An answer's message may carry its Stop or 👍/👎 buttons; an approval message carries Approve/Reject.
        return [m.content for m in self.replies(question) if not _is_approval(m) and not m.embeds]

    def approval_messages(self, question: DiscordQuestion) -> list[StoredMessage]:
        return [m for m in self.replies(question) if _is_approval(m)]

    def approval_count(self, question: DiscordQuestion) -> int:
        return len(self.approval_messages(question))

    async def approve(self, question: DiscordQuestion) -> bool:
        messages = self.approval_messages(question)
        if not messages:
            return False
        ids = [b["custom_id"] for row in messages[0].components for b in row.get("components", []) if b.get("custom_id")]
        approve = next((custom_id for custom_id in ids if custom_id.startswith(APPROVE_PREFIX)), None)
        if approve is None:
            return False
        await self.dc.click_button(messages[0].id, approve, self.asker)
        return True

    def shown_texts(self) -> list[str]:
        shown: list[str] = []
        for message in self.dc.world.messages.values():
            if message.author_id != self.dc.bot_user_id:
                continue
            shown.extend(message.history)
            shown.append(json.dumps([list(v.embeds) for v in message.versions], ensure_ascii=False))
        for interaction in self.dc.world.interactions.values():
            shown.extend(json.dumps(r.payload, ensure_ascii=False) for r in interaction.responses)
        return shown

    def tracebacks(self) -> int:
        return sum(1 for text in self.shown_texts() if leaks_traceback(text))


def _is_approval(message: StoredMessage) -> bool:
    """Whether the message carries Approve/Reject buttons (custom ids `rb:a:…` / `rb:r:…`)."""
    return any(
        str(button.get("custom_id", "")).startswith(("rb:a:", "rb:r:"))
        for row in message.components for button in row.get("components", [])
    )
