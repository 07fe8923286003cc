"""The Postgres ports an adapter is given, as bot/runtime.py builds them."""

from __future__ import annotations

import functools

from adapters.base import AdapterPorts
from core.config import Settings
from core.learning.ports import ChannelLearning
from core.learning.service import ChannelLearningService
from core.store.app_state import AppStateStore
from core.store.conversations import ConversationStore
from core.store.feedback import FeedbackStore
from core.store.db import Database
from core.store.heartbeats import process_identity
from core.store.installations import InstallStore
from core.store.live_messages import LiveMessages
from core.store.pending_finals import PendingFinals
from core.store.processed_events import ProcessedEvents
from core.store.team_data import forget_team


def ports_for(db: Database, *, learning: ChannelLearning | None = None) -> AdapterPorts:
    """One call, one bot process: its live records and kept finals carry one new owner. `learning` by default the
    runtime's service over the same database (keyword search only, the LEARN_* defaults)."""
    owner = process_identity()
    return AdapterPorts(
        live=LiveMessages(db, owner=owner), dedup=ProcessedEvents(db), conversations=ConversationStore(db),
        outbox=PendingFinals(db, owner=owner), state=AppStateStore(db), feedback=FeedbackStore(db),
        installs=InstallStore(db), forget_team=functools.partial(forget_team, db),
        learning=learning or ChannelLearningService(db, embedder=None, settings=Settings.model_construct()),
    )
