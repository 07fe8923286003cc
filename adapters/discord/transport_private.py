"""A private answer's transport: an ephemeral interaction response edited as it streams, ephemeral followups after
it, and the asker's DMs once the interaction no longer takes edits (its token's 15 minutes, a dismissed message)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord

from .transport import NO_PINGS, ChannelTransport, MessageButtons
from .transport_http import guarded

log = logging.getLogger(__name__)

# An interaction's webhook after its token's 15 minutes (401 Invalid Webhook Token), or an ephemeral message the
# asker dismissed (404 Unknown Message): only the DMs can take the rest of the answer.
GONE_STATUSES = frozenset({401, 404})


def interaction_gone(error: BaseException) -> bool:
    """Whether an interaction call failed because the interaction no longer takes edits or followups."""
    return isinstance(error, discord.HTTPException) and error.status in GONE_STATUSES


async def open_dm(user: discord.abc.User) -> discord.DMChannel:
    """The DM channel with a user (Discord makes it once and returns the same one after)."""
    return await guarded(user.create_dm())


class PrivateTransport:
    """Implements surface.ButtonedTransport for one private answer.

    The first message is the deferred ephemeral response (unless `preface` filled it), the others ephemeral
    followups; only the asker sees them. Once the interaction refuses a call (interaction_gone), the transport
    moves for good: `moved_sentence` is posted in the asker's DMs, the message being written is posted there
    again whole (an edit of it edits that copy), and every later message, source list and note goes there too.
    Earlier ephemeral messages keep what they showed; the Stop button stays behind on them."""

    def __init__(self, interaction: discord.Interaction, *, dm: discord.abc.Messageable, moved_sentence: str) -> None:
        self._interaction = interaction
        self._dm_channel = dm
        self._moved_sentence = moved_sentence
        self._key = f"private-{interaction.id}"
        self._original_id: str | None = None
        self._original_taken = False
        self._dm: ChannelTransport | None = None
        self._moving = asyncio.Lock()
        # An ephemeral message → its copy in the DMs, once the move has carried it there.
        self._carried: dict[str, str] = {}
        self.buttons = MessageButtons()  # on the ephemeral messages (a copy in the DMs goes without until shown)

    @property
    def moved(self) -> bool:
        return self._dm is not None

    async def preface(self, text: str) -> None:
        """The deferred response shows `text` (a sentence before the answer); the answer follows in followups."""
        await guarded(self._interaction.edit_original_response(content=text, allowed_mentions=NO_PINGS))
        self._original_taken = True

    async def post(self, text: str, *, key: str | None = None) -> str:
        if self._dm is None:
            try:
                return await self._post_ephemeral(text)
            except discord.HTTPException as exc:
                if not interaction_gone(exc):
                    raise
                await self._move(exc)
        assert self._dm is not None
        return await self._dm.post(text, key=key)

    async def edit(self, message_id: str, text: str | None) -> None:
        """`text` None: only the Stop button is dropped (the message keeps its text)."""
        if message_id in self._carried:
            if text is not None:
                await self._dm.edit(self._carried[message_id], text)  # type: ignore[union-attr]
            return
        if self._dm is None:
            try:
                await self._edit_ephemeral(message_id, text)
                return
            except discord.HTTPException as exc:
                if not interaction_gone(exc):
                    raise
                await self._move(exc)
        if text is None:
            # Nothing can reach that message any more: its button stays, and a click on it is told the run ended.
            self.buttons.shown(message_id, None)
            return
        assert self._dm is not None
        self._carried[message_id] = await self._dm.post(text, key=f"{self._key}:carry:{message_id}")
        self.buttons.shown(message_id, None)

    async def show_view(self, message_id: str, view: discord.ui.View | None) -> None:
        """Puts `view` (👍/👎) on one of the answer's messages; where no call reaches it, it goes without."""
        if message_id in self._carried:
            await self._dm.show_view(self._carried[message_id], view)  # type: ignore[union-attr]
            return
        if self._dm is not None:
            return
        try:
            await guarded(self._edit_call(message_id, view=view, allowed_mentions=NO_PINGS))
        except discord.HTTPException as exc:
            if not interaction_gone(exc):
                raise
            log.info("a private answer's message %s no longer takes edits; it goes without 👍/👎", message_id)
        self.buttons.shown(message_id, view)

    async def note(self, text: str | None = None, *, embed: discord.Embed | None = None, nonce: str) -> None:
        """A message beside the answer that only the asker sees (its sources, a notice): an ephemeral followup,
        or in the DMs once moved, where `nonce` (the same for every attempt) keeps a re-send from posting twice."""
        fields: dict[str, Any] = {"allowed_mentions": NO_PINGS}
        if text is not None:
            fields["content"] = text
        if embed is not None:
            fields["embed"] = embed
        if self._dm is None:
            try:
                await guarded(self._interaction.followup.send(ephemeral=True, wait=True, **fields))
                return
            except discord.HTTPException as exc:
                if not interaction_gone(exc):
                    raise
                await self._move(exc)
        await guarded(self._dm_channel.send(nonce=nonce, **fields))

    async def _post_ephemeral(self, text: str) -> str:
        view = self.buttons.for_post()
        extra: dict[str, Any] = {"view": view} if view is not None else {}
        if not self._original_taken:
            message = await guarded(self._interaction.edit_original_response(
                content=text, allowed_mentions=NO_PINGS, **extra,
            ))
            self._original_taken = True
            self._original_id = str(message.id)
        else:
            message = await guarded(self._interaction.followup.send(
                text, ephemeral=True, wait=True, allowed_mentions=NO_PINGS, **extra,
            ))
        self.buttons.posted(str(message.id), view)
        return str(message.id)

    async def _edit_ephemeral(self, message_id: str, text: str | None) -> None:
        buttons = self.buttons.for_edit(message_id, text)
        fields: dict[str, Any] = {} if text is None else {"content": text}
        await guarded(self._edit_call(message_id, allowed_mentions=NO_PINGS, **fields, **buttons))
        self.buttons.edited(message_id, buttons)

    def _edit_call(self, message_id: str, **fields: Any) -> Any:
        if message_id == self._original_id:
            return self._interaction.edit_original_response(**fields)
        return self._interaction.followup.edit_message(int(message_id), **fields)

    async def _move(self, error: discord.HTTPException) -> None:
        """From now on the answer goes to the asker's DMs, after the sentence saying why (posted once)."""
        async with self._moving:
            if self._dm is not None:
                return
            log.info("a private answer's interaction refused a call (%s, code %s); it continues in the asker's DMs",
                     error.status, error.code)
            dm = ChannelTransport(self._dm_channel)
            await dm.post(self._moved_sentence, key=f"{self._key}:moved")
            self._dm = dm
