"""Repairs the answers a dead process left streaming: each keeps the text it showed, its last message the
interrupted note."""

from __future__ import annotations

import logging

from adapters import wording
from adapters.answer_protocols import PostFinder, ShownMessages
from adapters.live_records import LiveRecords, post_intent_of
from adapters.streaming.splitter import close_open_fence
from adapters.streaming.transport import is_permanent
from core.ports import LiveMessage

log = logging.getLogger(__name__)

CURSOR_CHAR = "▌"


class LeftoverRepair:
    """One platform's repair rounds, as one runner makes them (at start and every round)."""

    def __init__(self, records: LiveRecords, *, platform: str) -> None:
        self._records = records
        self._platform = platform

    async def repair_leftovers(self, shown: ShownMessages) -> int:
        """Every answer a dead process left streaming keeps the text it showed, plus the interrupted note on its last
        message. A record goes only once its repair succeeded or failed for good; a 429 or an outage hands it back
        for the next round."""
        await self._records.write_unwritten()
        answers: dict[str, list[LiveMessage]] = {}
        for position, record in enumerate(await self._records.log.take_all(self._platform)):
            # A record of no known answer (written before records named theirs) is an answer of its own.
            answers.setdefault(getattr(record, "answer_id", "") or f"#{position}", []).append(record)
        repaired = 0
        for records in answers.values():
            repaired += await self._repair_answer(records, shown)
        if repaired:
            log.info("repaired %d unfinished %s answers", repaired, self._platform)
        return repaired

    async def _repair_answer(self, records: list[LiveMessage], shown: ShownMessages) -> int:
        """One answer's records, in the order written (its parts' order): a failure for now hands all of them back (a
        part whose successor was not looked up is not the last); returns how many messages were finished."""
        note = shown.render(wording.interrupted())
        try:
            ordered = await self._finish_messages(records, shown, note)
        except Exception as error:
            if not is_permanent(error):
                log.warning("could not repair message %s in %s yet (%s); trying again next round",
                            records[-1].message_id, records[-1].channel, error)
                for record in records:
                    await self._records.log.release(record)
                return 0
            log.exception("an answer in %s cannot be repaired; giving it up", records[-1].channel)
            ordered = []
        for record in records:
            await self._records.unrecord(record)
        return len(ordered)

    async def _finish_messages(self, records: list[LiveMessage], shown: ShownMessages, note: str) -> list[LiveMessage]:
        """The answer's messages keep the text they show, and the last one found gets the note; an earlier part shows
        its own text, which a note would cut in the middle of the answer. Returns the messages found."""
        finder = shown if isinstance(shown, PostFinder) else None
        messages: dict[str, LiveMessage] = {}  # each once: a message's own record and its post's intent
        for record in records:
            found = await _posted_message(record, finder)
            if found is not None:
                messages.setdefault(found.message_id, found)
        ordered = list(messages.values())
        for position, message in enumerate(ordered):
            try:
                text = await shown.read_shown(message) or ""
                if position < len(ordered) - 1 and (sealed := _sealed_text(text)) is not None:
                    if sealed != text:
                        await shown.replace_shown(message, sealed)
                # Already repaired (its record outlived the repair, then its repairer): one note, never two.
                elif not text.rstrip().endswith(note.rstrip()):
                    await shown.replace_shown(message, repaired_text(text, note, max_chars=shown.max_chars))
            except Exception as error:
                if not is_permanent(error):
                    raise
                log.exception("message %s in %s cannot be repaired; giving it up", message.message_id,
                              message.channel)
        return ordered


async def _posted_message(record: LiveMessage, finder: PostFinder | None) -> LiveMessage | None:
    """The message a live record stands for: itself; for a post's intent, the message found (None: never made, or
    the platform gives no way to look)."""
    intent = post_intent_of(record.message_id)
    if intent is None:
        return record
    if finder is None or not intent.key:
        return None
    message_id = await finder.find_post(record, intent.key, since=intent.at)
    if message_id is None:
        return None
    return LiveMessage(platform=record.platform, workspace=record.workspace, channel=record.channel,
                       message_id=message_id, thread=record.thread)


def _sealed_text(shown: str) -> str | None:
    """What an earlier part of an answer left streaming becomes: its text without cursor (None: it shows none)."""
    text = shown.replace(" " + CURSOR_CHAR, "").replace(CURSOR_CHAR, "").rstrip()
    if text in ("", "_thinking…_"):
        return None
    return close_open_fence(text) if text != shown.rstrip() else shown


def repaired_text(shown: str, note: str, *, max_chars: int) -> str:
    """What an answer left streaming becomes: its text so far, without cursor or placeholder, plus `note`."""
    text = shown.replace(" " + CURSOR_CHAR, "").replace(CURSOR_CHAR, "").rstrip()
    if text in ("", "_thinking…_"):
        return note
    text = close_open_fence(text)
    room = max_chars - len(note) - 2
    if len(text) > room:
        text = close_open_fence(text[: room - len("\n```") - 1])
    return f"{text}\n\n{note}"
