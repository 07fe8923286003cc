"""Slack's 👍/👎 on a final answer (a `context_actions` block of `feedback_buttons` on its last message), its clicks,
and the 👎 modal asking why."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording as shared_wording
from adapters.gate import Gate
from core.ports import FeedbackVotes

from .buttons import read_click
from .render import sentence
from .team_tokens import team_of

# The answer's messages carry feedback_blocks (controls.py); this module imports neither the surface nor
# inbound: `surfaces` is a surface.SlackSurfaces, `access` an inbound.SlackAccess.

logger = logging.getLogger(__name__)

FEEDBACK_ACTION = "relaybot_feedback"
WHY_VIEW = "relaybot_feedback_why"
WHY_BLOCK = "why"
WHY_INPUT = "text"
# Slack: a plain_text_input holds at most 3,000 characters; a reason needs far fewer.
WHY_MAX_CHARS = 2000
_VALUE = re.compile(r"^(up|down):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


def feedback_blocks(run_id: str) -> list[dict[str, Any]]:
    """Slack's own feedback buttons, in a `context_actions` block; each value names the vote and the run (the
    turn), all a click needs in whichever process it lands."""
    def button(vote: str, emoji: str, label: str) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": emoji}, "value": f"{vote}:{run_id}", "accessibility_label": label}

    return [{
        "type": "context_actions", "block_id": f"feedback-{run_id[:8]}",
        "elements": [{
            "type": "feedback_buttons", "action_id": FEEDBACK_ACTION,
            "positive_button": button("up", "👍", "This answer helped"),
            "negative_button": button("down", "👎", "This answer did not help"),
        }],
    }]


def parse_value(value: str) -> tuple[bool, str] | None:
    """(up, run id) from a button's value; None for anything else."""
    match = _VALUE.match(value)
    return (match.group(1) == "up", match.group(2)) if match else None


def why_modal(run_id: str, *, channel: str, thread_ts: str | None) -> dict[str, Any]:
    """The 👎 modal: one optional text field. The metadata says where to thank the person (a submission
    names no channel)."""
    return {
        "type": "modal", "callback_id": WHY_VIEW,
        "title": {"type": "plain_text", "text": shared_wording.FEEDBACK_MODAL_TITLE},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Skip"},
        "private_metadata": json.dumps({"run": run_id, "channel": channel, "thread": thread_ts or ""}),
        "blocks": [{
            "type": "input", "block_id": WHY_BLOCK, "optional": True,
            "label": {"type": "plain_text", "text": shared_wording.FEEDBACK_MODAL_LABEL},
            "element": {
                "type": "plain_text_input", "action_id": WHY_INPUT, "multiline": True, "max_length": WHY_MAX_CHARS,
                "placeholder": {"type": "plain_text", "text": shared_wording.FEEDBACK_MODAL_PLACEHOLDER},
            },
        }],
    }


class SlackFeedback:
    """👍/👎 clicks and the 👎 modal's submission: acked at once, then one call to the feedback store each."""

    def __init__(self, *, feedback: FeedbackVotes, surfaces: Any, gate: Gate, access: Any) -> None:
        self._feedback = feedback
        self._surfaces = surfaces
        self._gate = gate
        self._access = access

    async def on_click(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        with self._gate.track():
            click = read_click(body)
            user, user_id, channel = click.user, click.user_id, click.channel
            parsed = parse_value(click.value)
            if not user_id or not channel or parsed is None:
                logger.warning("ignoring a feedback click without its user, channel or vote")
                return
            up, run_id = parsed
            thread_ts = click.thread_ts
            team = click.team
            refusal = self._refusal(user, user_id, channel)
            if refusal:
                await self._tell(team, channel, user_id, thread_ts, refusal)
                return
            if not up:
                # First, while the click's trigger_id is fresh (Slack lets it open a view for 3 s).
                try:
                    await self._surfaces.web.now(
                        team, "views.open", trigger_id=str(body.get("trigger_id") or "") if isinstance(body, dict) else "",
                        view=why_modal(run_id, channel=channel, thread_ts=thread_ts),
                    )
                except Exception:
                    logger.warning("could not open the 👎 modal of run %s", run_id, exc_info=True)
            try:
                kept = await self._feedback.vote(
                    run_id, user_id=user_id, user_name=_name(user, user_id), platform="slack", up=up,
                    workspace=team or None,  # a vote naming another team's answer is not kept
                )
            except Exception:
                logger.exception("feedback click on run %s failed", run_id)
                await self._tell(team, channel, user_id, thread_ts, shared_wording.click_failed())
                return
            if not kept:
                await self._tell(team, channel, user_id, thread_ts, shared_wording.feedback_unknown_answer())
            elif up:
                # A 👎 is thanked once the modal is sent (or not at all when it is skipped: the vote stands).
                await self._tell(team, channel, user_id, thread_ts, shared_wording.feedback_thanks(up=True))

    async def on_submit(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """The 👎 modal's Send: acked first (the modal closes), then the reason stored on the person's vote."""
        await ack()
        with self._gate.track():
            view = body.get("view") or {}
            user = body.get("user") if isinstance(body.get("user"), dict) else {}
            user_id = str(user.get("id") or "")
            try:
                meta = json.loads(str(view.get("private_metadata") or "{}"))
                run_id, channel, thread_ts = str(meta["run"]), str(meta["channel"]), str(meta.get("thread") or "") or None
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring a feedback submission without its run")
                return
            team = team_of(body).team_id
            values = ((view.get("state") or {}).get("values") or {}).get(WHY_BLOCK) or {}
            text = str((values.get(WHY_INPUT) or {}).get("value") or "")[:WHY_MAX_CHARS]
            try:
                kept = await self._feedback.comment(
                    run_id, user_id=user_id, user_name=_name(user, user_id), platform="slack", text=text,
                    workspace=team or None,
                )
            except Exception:
                logger.exception("could not store the 👎 reason on run %s", run_id)
                await self._tell(team, channel, user_id, thread_ts, shared_wording.click_failed())
                return
            await self._tell(team, channel, user_id, thread_ts, shared_wording.feedback_comment_thanks() if kept
                             else shared_wording.feedback_unknown_answer())

    def _refusal(self, user: dict[str, Any], user_id: str, channel: str) -> str | None:
        """The same rule as for asking: the person's own workspace allowed, and the DM rule in DMs."""
        access = self._access.person(
            user_id, (str(user["team_id"]),) if user.get("team_id") else (), direct=channel.startswith("D")
        )
        if access == "direct_messages_off":
            return shared_wording.direct_messages_off()
        if access == "refused":
            return shared_wording.not_your_workspace_to_decide()
        return None

    async def _tell(self, team: str, channel: str, user_id: str, thread_ts: str | None, text: str) -> None:
        try:
            # The deadline lane, with the token of the team whose channel it is.
            await self._surfaces.web.now(
                team, "chat.postEphemeral", channel=channel, user=user_id, text=sentence(text),
                **({"thread_ts": thread_ts} if thread_ts else {}),
            )
        except Exception:
            logger.warning("could not tell %s: %s", user_id, text, exc_info=True)


def _name(user: dict[str, Any], user_id: str) -> str:
    return str(user.get("name") or user.get("username") or user_id)
