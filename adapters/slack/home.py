"""Slack's App Home tab: how to use the bot, and the approvals waiting for this user, whose buttons decide them as in their thread."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Container
from typing import Any

from slack_bolt.async_app import AsyncAck

from adapters import wording
from adapters.gate import Gate
from core.approvals import ApprovalService, PendingApproval
from core.requests import Actor

from .buttons import approval_blocks, page_of, parse_button
from .clicks import SlackClicks
from .inbound import SlackAccess
from .render import sentence
from .surface import PLATFORM, SlackSurfaces

logger = logging.getLogger(__name__)

# Buttons in the Home tab: the approval message's own action ids with `home_` after `relaybot_`.
HOME_ACTION = re.compile(r"^relaybot_home_((?:approve|reject)(?:_all)?|arguments)$")
HOME_MAX_APPROVALS = 5
HOME_MAX_BLOCKS = 100
INTRO_BLOCKS = 4
# A click from the Home tab is shown in the approval's thread; the tab is drawn again once the click is
# decided, or after this long (real seconds) while a resumed run still plays.
REPUBLISH_AFTER_S = 2.0
# Conversations whose membership one drawing of the tab reads at most; the rest count as not readable.
MAX_CONVERSATIONS_CHECKED = 20
MAX_MEMBER_PAGES = 10
MEMBER_PAGE_SIZE = 200


class SlackHome:
    """Publishes the Home tab on `app_home_opened` and after each click made in it."""

    def __init__(
        self, *, approvals: ApprovalService, surfaces: SlackSurfaces, clicks: SlackClicks, gate: Gate, access: SlackAccess
    ) -> None:
        self._approvals = approvals
        self._surfaces = surfaces
        self._clicks = clicks
        self._gate = gate
        self._access = access

    async def on_home_opened(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        with self._gate.track():
            user = str(event.get("user") or "")
            if user:
                await self.publish(user, str(body.get("team_id") or ""))

    async def publish(self, user: str, team: str) -> None:
        """Draws the tab for `user`: how to ask, then the approvals they may decide, with their buttons."""
        pending: list[PendingApproval] = []
        if self._access.person(user, (), direct=True) == "allowed":
            try:
                pending = await self._approvals.pending_for(Actor(id=user), platform=PLATFORM, workspace=team)
            except Exception:
                logger.exception("could not list the approvals of %s", user)
        readable = await self._readable(user, team, pending)
        blocks, refs = home_blocks(pending, readable=readable)
        view = {"type": "home", "blocks": blocks, "private_metadata": json.dumps(refs, separators=(",", ":"))}
        try:
            web = self._surfaces.web
            await web.call(team, "views.publish", budget=web.budgets.other(team, "views.publish"), user_id=user, view=view)
        except Exception:
            logger.exception("could not publish the Home tab of %s", user)

    async def _readable(self, user: str, team: str, pending: list[PendingApproval]) -> set[str]:
        """The channels of `pending` the viewer can read: public channels, and others they are a member of.
        A global approver decides calls from anywhere, but their arguments are the conversation's words."""
        channels = list(dict.fromkeys(where["c"] for where in map(_where, pending) if where is not None))
        readable: set[str] = set()
        for channel in channels[:MAX_CONVERSATIONS_CHECKED]:
            try:
                if await self._can_read(user, team, channel):
                    readable.add(channel)
            except Exception:
                # Unknown counts as unreadable: the approval is named, its arguments not shown.
                logger.warning("could not read who may see %s; its approvals are named only", channel, exc_info=True)
        return readable

    async def _can_read(self, user: str, team: str, channel: str) -> bool:
        web, budgets = self._surfaces.web, self._surfaces.budgets
        info = await web.call(team, "conversations.info", budget=budgets.read(team, "conversations.info"), channel=channel)
        conversation = info.get("channel") or {}
        if conversation.get("is_im"):
            return str(conversation.get("user") or "") == user
        if conversation.get("is_channel") and not conversation.get("is_private") and not conversation.get("is_mpim"):
            return True
        cursor = ""
        budget = budgets.read(team, "conversations.members")
        for _ in range(MAX_MEMBER_PAGES):
            page = {"channel": channel, "limit": MEMBER_PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
            response = await web.call(team, "conversations.members", budget=budget, **page)
            if user in (response.get("members") or ()):
                return True
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return False
        return False

    async def on_click(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """A button of the Home tab: decided exactly as the same button in the approval's thread (the clicks
        handler sees the click as made there), then the tab is drawn again."""
        await ack()
        with self._gate.track():
            as_in_thread = await self._in_thread(body)
            user = str((body.get("user") or {}).get("id") or "")
            team = str((body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or "")
            if as_in_thread is None:
                logger.warning("ignoring a Home tab click that names no approval shown there")
                if user:
                    await self.publish(user, team)
                return
            handler = self._clicks.on_arguments if as_in_thread["actions"][0]["action_id"] == "relaybot_arguments" \
                else self._clicks.on_click
            click = asyncio.ensure_future(handler(_already_acked, as_in_thread))
            # The resumed run plays inside the click; the tab shows the decision without waiting for it.
            await asyncio.wait({click}, timeout=REPUBLISH_AFTER_S)
            if user:
                await self.publish(user, team)
            if not click.done():
                await click
                if user:
                    await self.publish(user, team)

    async def _in_thread(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The click as a block_actions payload on the approval message that shows the same call."""
        actions = body.get("actions")
        action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
        match = HOME_ACTION.match(str(action.get("action_id") or ""))
        pressed = parse_button(f"relaybot_{match.group(1)}" if match else "", str(action.get("value") or ""))
        if match is None or pressed is None:
            return None
        try:
            refs = json.loads(str((body.get("view") or {}).get("private_metadata") or "{}"))
        except json.JSONDecodeError:
            return None
        ref = refs.get(pressed.continuation_id) if isinstance(refs, dict) else None
        if not isinstance(ref, dict) or not ref.get("c"):
            return None
        first = pressed.first
        if pressed.call_id is not None:
            team = str((body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or "")
            view = await self._approvals.view(pressed.continuation_id, team=f"{PLATFORM}:{team}")
            first = page_of(view, pressed.call_id) if view is not None else 0
        pages = ref.get("p") or {}
        message_ts = str(pages.get(str(first)) or pages.get("0") or "")
        container = {"type": "message", "channel_id": ref["c"], "message_ts": message_ts, "is_ephemeral": False}
        if ref.get("t"):
            container["thread_ts"] = ref["t"]
        return {**body, "actions": [{**action, "action_id": f"relaybot_{match.group(1)}"}], "container": container,
                "channel": {"id": ref["c"]}}


async def _already_acked(*args: Any, **kwargs: Any) -> None:
    return None


def home_blocks(
    pending: list[PendingApproval], *, readable: Container[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The tab's blocks, and for each approval shown where its messages are (the view's private metadata).
    Approvals in a channel not in `readable` are named by their channel only: no calls, no buttons."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": wording.home_title()}},
        {"type": "section", "text": {"type": "mrkdwn", "text": sentence(wording.home_how_to())}},
        {"type": "divider"},
    ]
    refs: dict[str, Any] = {}
    located = [(item, _where(item)) for item in pending]
    located = [(item, where) for item, where in located if where is not None]
    elsewhere: dict[str, int] = {}
    for _, where in located:
        if where["c"] not in readable:
            elsewhere[where["c"]] = elsewhere.get(where["c"], 0) + 1
    located = [(item, where) for item, where in located if where["c"] in readable]
    if not located and not elsewhere:
        blocks.append(_context(sentence(wording.home_no_approvals())))
        return blocks, refs
    heading = wording.home_approvals_heading(len(located) + sum(elsewhere.values()))
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": sentence(heading)}})
    shown = 0
    for number, (item, where) in enumerate(located[:HOME_MAX_APPROVALS]):
        drawn = [_for_home(block, number) for block in approval_blocks(item.view, first=0)]
        drawn.append(_context(sentence(wording.home_approval_where(f"<#{where['c']}>"))))
        drawn.append({"type": "divider"})
        if len(blocks) + len(drawn) > HOME_MAX_BLOCKS - 1:
            break
        blocks += drawn
        refs[item.view.continuation_id] = where
        shown += 1
    if shown < len(located):
        blocks.append(_context(sentence(wording.home_more_approvals(len(located) - shown))))
    _name_elsewhere(blocks, elsewhere)
    return blocks, refs


def _name_elsewhere(blocks: list[dict[str, Any]], elsewhere: dict[str, int]) -> None:
    for channel, count in elsewhere.items():
        if len(blocks) >= HOME_MAX_BLOCKS:
            return
        blocks.append(_context(sentence(wording.home_approvals_elsewhere(count, f"<#{channel}>"))))


def _where(item: PendingApproval) -> dict[str, Any] | None:
    """Channel, thread and each message's ts by its first call, from the approval's first Slack message reference."""
    for ref in item.message_refs:
        if ref.get("platform") == PLATFORM and ref.get("channel") and ref.get("ts"):
            pages = {"0": str(ref["ts"])}
            for part in ref.get("parts") or []:
                if isinstance(part, dict) and part.get("ts"):
                    pages[str(part.get("first", 0))] = str(part["ts"])
            return {"c": str(ref["channel"]), "t": str(ref.get("thread_ts") or ""), "p": pages}
    return None


def _for_home(block: dict[str, Any], number: int) -> dict[str, Any]:
    """An approval message block as a Home tab block: its buttons' action ids marked `home`, block ids unique."""
    block = dict(block)
    if block.get("block_id"):
        block["block_id"] = f"home{number}_{block['block_id']}"
    if block.get("type") == "actions":
        block["elements"] = [_home_button(element) for element in block.get("elements", [])]
    if isinstance(block.get("accessory"), dict) and block["accessory"].get("type") == "button":
        block["accessory"] = _home_button(block["accessory"])
    return block


def _home_button(element: dict[str, Any]) -> dict[str, Any]:
    action_id = str(element.get("action_id") or "")
    if action_id.startswith("relaybot_"):
        return {**element, "action_id": "relaybot_home_" + action_id.removeprefix("relaybot_")}
    return element


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}

