"""The Postgres ports an adapter is given, as bot/runtime.py builds them."""

from __future__ import annotations

from adapters.base import AdapterPorts
from core.store.conversations import ConversationStore
from core.store.db import Database
from core.store.live_messages import LiveMessages
from core.store.processed_events import ProcessedEvents


def ports_for(db: Database) -> AdapterPorts:
    return AdapterPorts(live=LiveMessages(db), dedup=ProcessedEvents(db), conversations=ConversationStore(db))
