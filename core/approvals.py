"""The approval state machine: a click decides, claims and resumes in one call that returns data."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

import psycopg
from psycopg_pool import PoolTimeout

from core import metrics, wording
from core.approval_views import (
    ApprovalView, CallView, DecisionView, ExpiredApproval, PendingApproval, ViewState, expired_sentence,
)
from core.channels import ChannelResolver
from core.events import Event, Failed
from core.requests import Actor, ConversationKey, team_key
from core.runs import Runs
from core.store.continuations import ContinuationRow, ContinuationStore, Decision
from core.tools import ApprovalPolicy

# The views are importable from here too: adapters and tests name them as core.approvals'.
__all__ = [
    "ApprovalService", "ApprovalView", "CallView", "Click", "ClickResult", "Decision", "DecisionView", "ExpiredApproval",
    "PendingApproval", "ViewState",
    "expired_sentence", "failed_click",
]

log = logging.getLogger(__name__)

ClickOutcome = Literal["refused", "recorded", "already_handled", "expired", "ready"]
RefusalReason = Literal["", "not_allowed", "already_decided", "not_found"]
# Events after which a resumed run needs no second pass: it answered, or paused again on new calls.
_COMPLETED_KINDS = frozenset({"done", "approval_required"})


def _as_is(user: str) -> str:
    return user


@dataclass(frozen=True, kw_only=True)
class Click:
    """One person's decision on a paused run, as a platform read it from a button.

    It decides one call (by id, or by position in the approval) or, with neither, every undecided call
    (`among` those ids when given: an "Approve all" decides only what its message showed). `mention` writes
    user ids in a refusal the platform's way; `admins` says whether the platform has an admin rule to name.
    """

    continuation_id: str
    approved: bool
    actor: Actor
    call_id: str | None = None
    call_index: int | None = None
    among: tuple[str, ...] | None = None
    comment: str = ""
    mention: Callable[[str], str] = _as_is
    admins: bool = True
    # The team the click came from (`slack:T1`: the workspace whose message holds the buttons), when the platform
    # says: an approval of another team is not found from there, whoever clicks (an admin of B is no admin of A).
    team: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClickResult:
    """What one click did. `events` is the resumed run to play, present exactly when this click `claimed` it."""

    outcome: ClickOutcome
    message: str  # the sentence for the clicker; "" when the redrawn message says it all
    view: ApprovalView | None = None
    claimed: bool = False
    events: AsyncIterator[Event] | None = None
    reason: RefusalReason = ""  # why a click was refused


class ApprovalService:
    """Owns decide / claim / resume / withdraw / expire / revert-stuck; every change is one conditional UPDATE."""

    def __init__(
        self, *, continuations: ContinuationStore, runs: Runs, policy: ApprovalPolicy, channels: ChannelResolver | None = None
    ) -> None:
        self._continuations = continuations
        self._runs = runs
        self.policy = policy
        # Approvers per channel (core/channels.py), read at every click; `policy` when there is none.
        self._channels = channels

    async def click(self, click: Click) -> ClickResult:
        """Record the click's decision, and resume once every call is decided (the winner's result carries the run)."""
        decided = await self.decide(click)
        if decided.outcome != "ready" or decided.view is None:
            return decided
        return await self._claim(uuid.UUID(decided.view.continuation_id), actor=click.actor)

    async def decide(self, click: Click) -> ClickResult:
        """Record a decision without resuming: "ready" means every call is decided and the run may be claimed."""
        result = await self._decide(click)
        _audit(click, result)
        return result

    async def _decide(self, click: Click) -> ClickResult:
        row = await self._get(click.continuation_id, team=click.team)
        call_id = click.call_id
        if row is not None and click.call_index is not None:
            index = click.call_index
            call_id = row.call_ids[index] if 0 <= index < len(row.call_ids) else None
            if call_id is None:
                row = None
        if row is None:
            return ClickResult(outcome="refused", message=wording.approval_not_found(), reason="not_found")
        refused = await self._policy_refusal(row, click.actor, click.mention, admins=click.admins)
        if refused is not None:
            return refused
        return await self._record(row, click, call_id=call_id)

    async def submit(
        self, continuation_id: str, decisions: Mapping[str, bool | Decision], *, actor: Actor
    ) -> ClickResult:
        """Several decisions at once (e.g. from an API call), then one claim; calls not named stay undecided."""
        clicks = [
            Click(continuation_id=continuation_id, approved=_approved(decision), actor=actor, call_id=call_id,
                  comment=decision.comment if isinstance(decision, Decision) else "")
            for call_id, decision in decisions.items()
        ]
        row = await self._get(continuation_id)
        if row is None:
            missing = ClickResult(outcome="refused", message=wording.approval_not_found(), reason="not_found")
            for click in clicks:
                _audit(click, missing)
            return missing
        refused = await self._policy_refusal(row, actor, _as_is, admins=True)
        if refused is not None:
            for click in clicks:
                _audit(click, refused)
            return refused
        for click, decision in zip(clicks, decisions.values()):
            # A client-executed tool's result (from the API) is kept with the decision until the run resumes.
            output = decision.result if isinstance(decision, Decision) else None
            result = await self._record(row, click, call_id=click.call_id, result=output)
            _audit(click, result)
            if result.outcome not in ("recorded", "ready") and result.reason != "already_decided":
                return result
        return await self._claim(row.id, actor=actor)

    async def view(self, continuation_id: str, *, team: str | None = None) -> ApprovalView | None:
        """The approval as stored now (to redraw its message with every decision so far); None for one of another
        team than `team`, when given."""
        row = await self._get(continuation_id, team=team)
        return ApprovalView.from_row(row) if row else None

    async def remember_message(self, continuation_id: str, ref: dict[str, Any]) -> None:
        """Note a platform message showing this approval, so expiry can edit it later."""
        key = _parse_uuid(continuation_id)
        if key is not None:
            await self._continuations.add_message_ref(key, ref)

    async def withdraw(self, continuation_id: str) -> bool:
        """Close a paused run whose approval request could not be shown; nothing of it will run."""
        key = _parse_uuid(continuation_id)
        return key is not None and await self._continuations.withdraw(key)

    async def pending_for(
        self, actor: Actor, *, platform: str, workspace: str, limit: int = 20, scan: int = 200
    ) -> list[PendingApproval]:
        """The open approvals of one workspace that `actor` may decide (by the same policy a click is checked
        with), newest first: the `scan` newest open rows of the platform are looked at, `limit` returned."""
        found: list[PendingApproval] = []
        for row in await self._continuations.pending(platform=platform, limit=scan, workspace=workspace):
            conversation = row.state.get("conversation") if isinstance(row.state, dict) else None
            if not isinstance(conversation, dict) or conversation.get("workspace") != workspace:
                continue
            policy = await self._policy_of(row)
            if policy.may_decide(actor=actor.id, requested_by=row.requested_by, actor_roles=actor.roles,
                                 actor_is_admin=actor.is_admin):
                found.append(PendingApproval(view=ApprovalView.from_row(row), message_refs=row.message_refs))
                if len(found) >= limit:
                    break
        return found

    async def expire_due(self, *, platforms: tuple[str, ...] | None = None) -> list[ExpiredApproval]:
        """Close approvals past their expiry (of `platforms` only, when given: a process expires what it can
        edit); each comes back for its platform to edit its messages."""
        rows = await self._continuations.expire_due(platforms=platforms)
        for row in rows:
            log.info(
                "approval %s expired: %s (asked by %s) will not run", row.id, ", ".join(c.tool for c in row.calls),
                row.requested_by,
                extra={"audit": "approval", "continuation_id": str(row.id), "actor": "", "decision": "expired",
                       "tools": [c.tool for c in row.calls], "outcome": "expired"},
            )
            metrics.record_approval(decision="expired")
        return [ExpiredApproval(platform=row.platform, view=ApprovalView.from_row(row), message_refs=row.message_refs) for row in rows]

    async def revert_stuck(self, *, older_than_s: float = 600.0) -> int:
        """Runs a crash left in `resuming` go back to pending; their started calls never run again."""
        return len(await self._continuations.revert_stuck(older_than_s=older_than_s))

    # ----- internals ------------------------------------------------------------------------------

    async def _get(self, continuation_id: str, *, team: str | None = None) -> ContinuationRow | None:
        key = _parse_uuid(continuation_id)
        row = await self._continuations.get(key) if key else None
        if row is not None and team is not None and team_of(row) != team:
            return None  # as if there were none: another team learns nothing of it, not even that it exists
        return row

    async def _policy_of(self, row: ContinuationRow) -> ApprovalPolicy:
        """Who may decide in the paused run's channel, as its settings say now."""
        conversation = row.state.get("conversation") if isinstance(row.state, dict) else None
        if self._channels is None or not isinstance(conversation, dict):
            return self.policy
        try:
            key = ConversationKey(**conversation)
        except TypeError:
            return self.policy
        channel = await self._channels.resolve(key)
        return ApprovalPolicy(approvers=channel.approvers, approver_roles=channel.approver_roles)

    async def _policy_refusal(
        self, row: ContinuationRow, actor: Actor, mention: Callable[[str], str], *, admins: bool
    ) -> ClickResult | None:
        # Checked on every click: posting the buttons decided nothing about who may press them.
        policy = await self._policy_of(row)
        if policy.may_decide(
            actor=actor.id, requested_by=row.requested_by, actor_roles=actor.roles, actor_is_admin=actor.is_admin
        ):
            return None
        return ClickResult(
            outcome="refused", message=policy.describe(row.requested_by, mention=mention, admins=admins),
            view=ApprovalView.from_row(row), reason="not_allowed",
        )

    async def _record(
        self, row: ContinuationRow, click: Click, *, call_id: str | None, result: str | None = None
    ) -> ClickResult:
        """The click's decision on `call_id` (its call, resolved from a position), or on every undecided call."""
        closed = _closed(row)
        if closed is not None:
            return closed
        approved = click.approved
        among = click.among if call_id is None else None
        decision = Decision(approved=approved, actor=click.actor.display, comment=click.comment, result=result)
        updated = await self._continuations.record_decision(row.id, call_id=call_id, decision=decision, among=among)
        if updated is not None:
            if updated.undecided:
                return ClickResult(
                    outcome="recorded", message=wording.decision_recorded(len(updated.undecided)),
                    view=ApprovalView.from_row(updated),
                )
            return ClickResult(outcome="ready", message="", view=ApprovalView.from_row(updated))
        current = await self._continuations.get(row.id)
        if current is None:
            return ClickResult(outcome="refused", message=wording.approval_not_found(), reason="not_found")
        view = ApprovalView.from_row(current)
        targets = (call_id,) if call_id is not None else among if among is not None else current.call_ids
        if targets and all(target in current.decisions for target in targets):
            # Someone decided first. The same decision again (a double click, or a click on a run a
            # crash reverted) may resume; a contrary one is refused, saying who decided.
            contrary = [current.decisions[t] for t in targets if current.decisions[t].approved != approved]
            if not contrary and not current.undecided and current.status == "pending":
                return ClickResult(outcome="ready", message="", view=view)
            if contrary or call_id is not None:
                decided_by = (contrary or [current.decisions[targets[0]]])[0].actor
                return ClickResult(
                    outcome="refused", message=wording.call_already_decided(decided_by), view=view, reason="already_decided"
                )
        return _closed(current) or ClickResult(outcome="refused", message=wording.approval_not_found(), reason="not_found")

    async def _claim(self, key: uuid.UUID, *, actor: Actor) -> ClickResult:
        """pending → resuming for exactly one caller; the winner gets the run's events."""
        row = await self._continuations.claim(key, actor=actor.display)
        if row is None:
            current = await self._continuations.get(key)
            if current is None:
                return ClickResult(outcome="refused", message=wording.approval_not_found(), reason="not_found")
            view = ApprovalView.from_row(current)
            closed = _closed(current)
            if closed is None and current.undecided:
                return ClickResult(outcome="recorded", message=wording.decision_recorded(len(current.undecided)), view=view)
            return closed or ClickResult(outcome="already_handled", message=wording.approval_already_handled(None), view=view)
        view = ApprovalView.from_row(row)
        return ClickResult(outcome="ready", message="", view=view, claimed=True, events=self._resumed(row))

    async def _resumed(self, row: ContinuationRow) -> AsyncIterator[Event]:
        """The claimed run's events; afterwards the row is closed, or goes back to pending if nothing of it ran."""
        completed = False
        try:
            async with aclosing(self._runs.resume(row)) as events:
                async for event in events:
                    completed = completed or event.kind in _COMPLETED_KINDS
                    yield event
        finally:
            # A run that ended before any approved call started (cancelled while waiting for the
            # conversation, a database blip, a model failure after rejections) goes back to pending so
            # a click can resume it; once a call has started, a failed run cannot be resumed twice.
            try:
                if completed:
                    await self._continuations.finish(row.id, status="done")
                elif not await self._continuations.release(row.id, started_calls=len(row.started_calls)):
                    await self._continuations.finish(row.id, status="failed")
            except (psycopg.Error, PoolTimeout):
                # The run already told the user how it ended; the stuck-run job tidies the row later.
                log.exception("could not record how resumed run %s ended", row.id)


def team_of(row: ContinuationRow) -> str:
    """The team a paused run belongs to (`platform:workspace` of its conversation); '' when its state names none."""
    conversation = row.state.get("conversation") if isinstance(row.state, dict) else None
    if not isinstance(conversation, dict):
        return ""
    return team_key(str(conversation.get('platform', row.platform)), str(conversation.get('workspace', '')))


def _approved(decision: bool | Decision) -> bool:
    return decision.approved if isinstance(decision, Decision) else bool(decision)


def _audit(click: Click, result: ClickResult) -> None:
    """One line per decision a person asked for: who, approve or reject, which calls, and what came of it."""
    continuation_id, actor, call_id, among = click.continuation_id, click.actor, click.call_id, click.among
    calls = result.view.calls if result.view is not None else ()
    if call_id is None and click.call_index is not None and 0 <= click.call_index < len(calls):
        call_id = calls[click.call_index].call_id
    targets = [call_id] if call_id is not None else list(among) if among is not None else [c.call_id for c in calls]
    tools = [call.tool for call in calls if call.call_id in targets]
    took_effect = result.outcome in ("recorded", "ready")
    decision = "approved" if click.approved else "rejected"
    log.info(
        "approval %s: %s %s %s, outcome %s%s", continuation_id, actor.display, decision,
        ", ".join(tools) or ("call " + call_id if call_id else "every call"), result.outcome,
        f" ({result.reason})" if result.reason else "",
        extra={"audit": "approval", "continuation_id": continuation_id, "actor": actor.id, "actor_name": actor.name,
               "decision": decision, "calls": targets, "tools": tools, "outcome": result.outcome,
               "reason": result.reason},
    )
    metrics.record_approval(decision=decision if took_effect else "refused")


def _closed(row: ContinuationRow) -> ClickResult | None:
    """Expired or already handled: no decision can change this row any more."""
    if row.status == "expired" or (
        row.status == "pending" and row.expires_at is not None and row.expires_at <= datetime.now(timezone.utc)
    ):
        view = ApprovalView.from_row(row)
        if view.state == "open":
            view = view.expired()
        return ClickResult(outcome="expired", message=expired_sentence(view), view=view)
    if row.status != "pending":
        return ClickResult(
            outcome="already_handled", message=wording.approval_already_handled(row.claimed_by), view=ApprovalView.from_row(row)
        )
    return None


def _parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def failed_click(result: ClickResult) -> Failed:
    """A click that set no run going, as the Failed event a non-interactive caller shows."""
    return Failed(message=result.message or wording.approval_not_found(), retryable=False)
