"""Delivers the finals kept in the outbox that nobody else is delivering (their process stopped or died, or was told
"later"), each part once."""

from __future__ import annotations

import logging

from adapters.answer_protocols import AnswerPlace, FinalDelivery, PartFinder
from adapters.live_records import LiveRecords
from adapters.streaming.transport import PermanentSendError, is_permanent
from core import metrics
from core.ports import FinalOutbox, FinalPart, PendingFinal

log = logging.getLogger(__name__)

# Kept finals older than this (OUTBOX_MAX_AGE_S) are dropped with an ERROR line: the only way one is given up.
OUTBOX_MAX_AGE_S = 86400.0
# Kept finals one pass claims at a time (each delivered before the next are claimed).
FINALS_PER_CLAIM = 2


class KeptFinals:
    """One platform's passes over the outbox, as one runner makes them."""

    def __init__(self, outbox: FinalOutbox, records: LiveRecords, *, platform: str, max_age_s: float) -> None:
        self._outbox = outbox
        self._records = records
        self._platform = platform
        self._max_age_s = max_age_s
        # Finals this process claimed and could not hand back (the database failed mid-pass).
        self._unreleased: set[str] = set()

    async def deliver_pending(self, delivery: FinalDelivery, *, finder: PartFinder | None = None) -> int:
        """Delivers the finals nobody else is delivering; returns how many arrived. A part whose post was attempted
        without its outcome seen is looked up first (`finder`), no other. Any failure but a documented permanent one
        hands the final back, to be retried with backoff (capped at 5 minutes); only a permanent error, or
        OUTBOX_MAX_AGE_S, drops it."""
        outbox = self._outbox
        for expired in await outbox.expire(self._platform, max_age_s=self._max_age_s):
            metrics.OUTBOX_EXPIRED.labels(self._platform).inc()
            log.error("final %s to %s not delivered in %g s; dropping it", expired.answer_id, expired.channel,
                      self._max_age_s)
        for answer_id in sorted(self._unreleased):
            await outbox.release(answer_id)  # the database is back: nothing left to wait for
            self._unreleased.discard(answer_id)
        arrived = 0
        # Claimed a few at a time: a process never sits on finals it will not reach for a while, which every
        # other live process may not take (a pass behind 60 slow deliveries held the 61st for minutes).
        seen: set[str] = set()
        while taken := await outbox.take(self._platform, limit=FINALS_PER_CLAIM):
            # A final handed back this pass waits for the next one (its backoff keeps the store from giving it
            # again; this keeps any outbox from making the pass go round forever).
            for final in (again := [f for f in taken if f.answer_id in seen]):
                await outbox.release(final.answer_id)
            taken = [f for f in taken if f.answer_id not in seen]
            if not taken and again:
                break
            seen.update(f.answer_id for f in taken)
            for position, final in enumerate(taken):
                try:
                    arrived += await self._deliver_one(final, delivery, finder)
                except BaseException:
                    # A database failure (or a cancel) mid-pass leaves these claimed by a live process, and take()
                    # never hands a live process its own claims: give them back on the next pass.
                    self._unreleased.update(f.answer_id for f in taken[position:])
                    raise
        return arrived

    async def _deliver_one(self, final: PendingFinal, delivery: FinalDelivery, finder: PartFinder | None) -> int:
        """One kept final: 1 when it arrived; 0 when it was handed back, handed over or dropped as undeliverable."""
        outbox = self._outbox
        try:
            parts = await self._deliver_parts(final, delivery, finder)
        except _HandedOver:
            log.info("final %s was taken over by another process", final.answer_id)
            return 0
        except Exception as error:
            if isinstance(error, PermanentSendError) and error.team_wide:
                # Its team has no usable token (not installed yet — a deployment moving to "Add to Slack" before
                # `relaybot teams import` — or revoked): the final waits for it, within OUTBOX_MAX_AGE_S. An
                # uninstall drops the team's finals itself (core/store/team_data.py).
                log.warning("final %s waits: its workspace %s refuses every call now (%s)", final.answer_id,
                            final.workspace, error)
                await outbox.release(final.answer_id, backoff=True)
                return 0
            if is_permanent(error):
                log.exception("final %s cannot be delivered to %s; dropping it", final.answer_id, final.channel)
                await outbox.delivered(final.answer_id)
                return 0
            log.warning("final %s not delivered yet (%s); handed back, retried after a backoff",
                        final.answer_id, error or type(error).__name__)
            await outbox.release(final.answer_id, backoff=True)
            return 0
        await outbox.delivered(final.answer_id)
        await self._records.forget(AnswerPlace(platform=final.platform, workspace=final.workspace,
                                               channel=final.channel), [p.message_id for p in parts if p.message_id])
        return 1

    async def _deliver_parts(
        self, final: PendingFinal, delivery: FinalDelivery, finder: PartFinder | None
    ) -> list[FinalPart]:
        """Each part's final text on the platform, the outbox row kept up to date after each; the parts delivered."""
        outbox = self._outbox
        parts = list(final.parts)
        attempted = await outbox.attempts(final.answer_id) if finder is not None else {}
        for index, part in enumerate(parts):
            if part.message_id is not None:
                await delivery.edit_part(final, part.message_id, part.text)
                continue
            message_id = None
            if finder is not None and index in attempted:
                message_id = await finder.find_part(final, index, since=attempted[index])
                if message_id is not None:
                    # It may show a text of the stream before it (a cursor): the final text replaces it.
                    await delivery.edit_part(final, message_id, part.text)
            if message_id is None:
                if not await outbox.attempting(final.answer_id, index):
                    raise _HandedOver(final.answer_id)
                message_id = await delivery.post_part(final, index, part.text)
            parts[index] = FinalPart(text=part.text, message_id=message_id)
            await outbox.keep(_replace_parts(final, parts))
        return parts


class _HandedOver(Exception):
    """The final is no longer this process's to deliver."""


def _replace_parts(final: PendingFinal, parts: list[FinalPart]) -> PendingFinal:
    return PendingFinal(
        answer_id=final.answer_id, platform=final.platform, workspace=final.workspace, channel=final.channel,
        thread=final.thread, parts=tuple(parts),
    )
