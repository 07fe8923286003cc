"""Slack's `/relaybot`: for workspace admins and owners (or CHANNEL_ADMINS), a modal with the channel's settings, saved with audit."""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncRespond

from adapters import wording
from adapters.gate import Gate
from core.channel_admin import (
    AGENT_CHOICES,
    FIELDS_BY_NAME,
    ChannelAdmin,
    ChannelView,
    actor_id,
    change_lines,
    diff,
    parse_value,
)
from core.channels import RESPOND_TO, ChannelSettingsError
from core.learning.model import ChannelPlace, LearnedChannel, LearningRefused
from core.learning.ports import ChannelLearning
from core.requests import Actor, ConversationKey

from .learning_modal import LEARN_BLOCK, learning_blocks, read_learning, save_learning
from .render import sentence
from .surface import PLATFORM
from .transport import SlackWeb

logger = logging.getLogger(__name__)

COMMAND = "/relaybot"
CALLBACK_ID = "relaybot_channel_settings"
ACTION = "value"
INHERIT = "inherit"
FLAG_OPTION = "yes"
# Slack's limits for a modal: a title of 24 characters, placeholders of 150, options of 75 (text) and
# 150 (value), at most 100 options in a select, private_metadata of 3000 characters.
TITLE = "relaybot settings"
PLACEHOLDER_MAX_CHARS = 150
OPTION_TEXT_MAX_CHARS = 75
SELECT_OPTIONS_MAX = 100
PROMPT_MAX_CHARS = 3000
TEXT_MAX_CHARS = 3000
WHO_MAY = "workspace admins and owners (and the people CHANNEL_ADMINS names)"
# Slack has no roles: approver_roles is the CLI's (and Discord's) to set.
FORM_FIELDS = ("agent_type", "model", "system_prompt", "approvers", "tools", "followups_need_mention", "respond_to",
               "sources", "tool_policy", "user_requests_per_day", "user_tokens_per_day")
RESPOND_TO_TEXT = {"mentions": "Only when mentioned", "threads": "Also follow-ups in its threads",
                   "all": "Every new message here (answered in its thread)"}


class SlackAdmin:
    """Bolt's listeners for `/relaybot` and its modal. Who may: users.info's `is_admin` / `is_owner` of the
    channel's own workspace, or CHANNEL_ADMINS; asked again when the modal is submitted. With `learning`, the
    modal also says whether the channel is learned from, and how far back (adapters/slack/learning_modal.py)."""

    def __init__(self, *, admin: ChannelAdmin, web: SlackWeb, gate: Gate, learning: ChannelLearning | None = None) -> None:
        self._admin = admin
        self._web = web
        self._gate = gate
        self._learning = learning

    async def on_command(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        # Acked first: Slack shows an error when a command is not acknowledged within 3 s.
        await ack()
        with self._gate.track():
            user, channel = str(body.get("user_id") or ""), str(body.get("channel_id") or "")
            team = str(body.get("team_id") or "")
            if not user or not channel or not team:
                logger.warning("ignoring a /relaybot without user, channel or team")
                return
            if channel.startswith("D"):
                await _tell(respond, wording.settings_in_a_channel())
                return
            try:
                if not self._admin.may_change(await self._actor(team, user)):
                    logger.info("refused /relaybot to %s in %s: not an admin", user, channel)
                    await _tell(respond, wording.settings_only_admins(WHO_MAY))
                    return
                view = await self._admin.view(_key(team, channel))
                learned = await self._learning.get(_place(team, channel)) if self._learning is not None else None
                built = modal(view, team=team, channel=channel, learning=self._learning is not None, learned=learned)
                # The deadline lane: the trigger_id is good for 3 s.
                await self._web.now(team, "views.open", trigger_id=str(body.get("trigger_id") or ""), view=built)
            except Exception:
                logger.exception("could not open the settings of %s", channel)
                await _tell(respond, wording.settings_failed())

    async def on_submit(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """The modal's Save: checked, asked again whether the person may, saved in one audited transaction, then
        acked (so the modal shows a problem in place and closes only on success) and confirmed in the channel."""
        with self._gate.track():
            view = body.get("view") or {}
            user = str((body.get("user") or {}).get("id") or "")
            try:
                meta = json.loads(str(view.get("private_metadata") or "{}"))
                team, channel = str(meta["team"]), str(meta["channel"])
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring a settings submission without its channel")
                await ack()
                return
            first_block = _first_input(view)
            values = (view.get("state") or {}).get("values") or {}
            try:
                submitted = read_form(values)
            except _FieldError as error:
                await ack(response_action="errors", errors={error.field: error.reason})
                return
            try:
                if not self._admin.may_change(await self._actor(team, user)):
                    await ack(response_action="errors",
                              errors={first_block: wording.settings_only_admins(WHO_MAY)})
                    return
                key = _key(team, channel)
                # Learning first: a channel that cannot be learned from says why in the modal, with nothing saved.
                wish = read_learning(values) if self._learning is not None else None
                learned = await save_learning(self._learning, _place(team, channel), wish,
                                              by=actor_id(PLATFORM, team, user)) if wish and self._learning else None
                current = await self._admin.view(key)
                to_set, to_clear = diff(current.own, _keep_inherited_flag(current, submitted))
                entries = await self._admin.change(key, set_fields=to_set, unset=to_clear,
                                                   actor=actor_id(PLATFORM, team, user))
            except LearningRefused as refused:
                await ack(response_action="errors", errors={LEARN_BLOCK: refused.sentence})
                return
            except ChannelSettingsError as error:
                await ack(response_action="errors", errors={first_block: wording.settings_invalid(str(error))})
                return
            except Exception:
                logger.exception("could not save the settings of %s", channel)
                await ack(response_action="errors", errors={first_block: wording.settings_failed()})
                return
            await ack()
            lines = change_lines(entries) + ([learned] if learned else [])
            logger.info("%s changed the settings of %s: %s", user, channel, "; ".join(lines) or "nothing")
            try:
                await self._web.now(team, "chat.postEphemeral", channel=channel, user=user,
                                    text=sentence(wording.settings_saved(lines)))
            except Exception:  # e.g. not_in_channel: the change is saved and audited all the same
                logger.warning("could not confirm the settings change in %s", channel, exc_info=True)

    async def _actor(self, team: str, user: str) -> Actor:
        """users.info says whether the person is an admin or owner — of this workspace: an admin of another
        organisation in a shared channel is not one here."""
        # On the deadline lane too: a view to open or a submission to ack waits on it.
        found = await self._web.now(team, "users.info", user=user)
        profile = found.get("user") or {}
        is_admin = profile.get("team_id") == team and any(
            bool(profile.get(flag)) for flag in ("is_admin", "is_owner", "is_primary_owner")
        )
        return Actor(id=user, is_admin=is_admin)


# ----- the modal -----------------------------------------------------------------------------------


def modal(
    view: ChannelView, *, team: str, channel: str, learning: bool = False, learned: LearnedChannel | None = None,
) -> dict[str, Any]:
    """The settings modal: each field shows the channel's own value; an empty one falls back a level, and its
    placeholder says to what. `learning`: "Learn from this channel" too, showing `learned` (None: not learned from)."""
    config, own = view.config, view.own
    blocks: list[dict[str, Any]] = [{
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f"Settings of <#{channel}> only. An empty field uses the "
                      "workspace's setting or the default, shown in grey. Every change is recorded."}],
    }]
    agent_options = [_option("Not set here" + (f" ({config.agent_type})" if own.agent_type is None else ""), INHERIT)]
    agent_options += [_option(name, name) for name in AGENT_CHOICES]
    select: dict[str, Any] = {"type": "static_select", "action_id": ACTION, "options": agent_options}
    select["initial_option"] = next((o for o in agent_options if o["value"] == own.agent_type), agent_options[0])
    blocks.append(_input("agent_type", select))
    blocks.append(_input("model", _text(own.model, inherited=config.model), optional=True))
    blocks.append(_input("system_prompt", _text(own.system_prompt, inherited=config.system_prompt or "no paragraph",
                                                multiline=True, max_chars=PROMPT_MAX_CHARS), optional=True))
    blocks.append(_input("approvers", _text(_listed(own.approvers),
                                            inherited=", ".join(sorted(config.approvers)) or "only the asker"),
                         optional=True))
    blocks.append(_input("tools", _text(_listed(own.tools), inherited=", ".join(config.tools or ()) or "no tools"
                                        if config.tools is not None else "every tool"), optional=True))
    flag = {"type": "checkboxes", "action_id": ACTION,
            "options": [_option("Follow-ups in a thread need a mention", FLAG_OPTION)]}
    if config.followups_need_mention:
        flag["initial_options"] = [flag["options"][0]]
    blocks.append(_input("followups_need_mention", flag, optional=True))
    blocks.append(_input("respond_to", _respond_to_select(view)))
    if 0 < len(view.source_names) <= SELECT_OPTIONS_MAX:
        sources = {"type": "multi_static_select", "action_id": ACTION,
                   "options": [_option(name, name) for name in view.source_names],
                   "placeholder": _plain("every source it may see")}
        chosen = [o for o in sources["options"] if own.sources is not None and o["value"] in own.sources]
        if chosen:
            sources["initial_options"] = chosen
        blocks.append(_input("sources", sources, optional=True))
    elif view.source_names:
        blocks.append(_input("sources", _text(_listed(own.sources), inherited="every source it may see"), optional=True))
    policy = json.dumps(dict(own.tool_policy), ensure_ascii=False) if own.tool_policy is not None else None
    blocks.append(_input("tool_policy", _text(policy, inherited=FIELDS_BY_NAME["tool_policy"].hint, multiline=True),
                         optional=True))
    blocks += _person_limit_inputs(view)
    if learning:
        blocks += learning_blocks(learned)
    return {
        "type": "modal",
        "callback_id": CALLBACK_ID,
        "title": _plain(TITLE),
        "submit": _plain("Save"),
        "close": _plain("Cancel"),
        "private_metadata": json.dumps({"team": team, "channel": channel}),
        "blocks": blocks,
    }


def _respond_to_select(view: ChannelView) -> dict[str, Any]:
    """What the channel answers without a mention; a channel whose older followups_need_mention says it shows that
    value (saving it writes respond_to in its place)."""
    config, own = view.config, view.own
    options = [_option(f"Not set here ({RESPOND_TO_TEXT[config.respond_to].lower()})", INHERIT)]
    options += [_option(RESPOND_TO_TEXT[name], name) for name in RESPOND_TO]
    chosen = own.respond_to or (config.respond_to if own.followups_need_mention is not None else INHERIT)
    return {"type": "static_select", "action_id": ACTION, "options": options,
            "initial_option": next(o for o in options if o["value"] == chosen)}


def _person_limit_inputs(view: ChannelView) -> list[dict[str, Any]]:
    """A person's questions and tokens per day here: the channel's own number, else the one it runs with greyed."""
    config, own = view.config, view.own
    return [
        _input(name, _text(None if own_limit is None else str(own_limit),
                           inherited="no limit" if limit is None else str(limit)), optional=True)
        for name, own_limit, limit in (
            ("user_requests_per_day", own.user_requests_per_day, config.person_limits.requests_per_day),
            ("user_tokens_per_day", own.user_tokens_per_day, config.person_limits.tokens_per_day),
        )
    ]


class _FieldError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


def read_form(values: dict[str, Any]) -> dict[str, Any]:
    """The submitted fields (None: left empty), read as the CLI reads them; _FieldError names the block."""
    out: dict[str, Any] = {}
    for name in FORM_FIELDS:
        state = (values.get(name) or {}).get(ACTION)
        if state is None:
            continue  # a field the modal did not show (no sources yet)
        kind = state.get("type")
        try:
            if kind == "static_select":
                chosen = (state.get("selected_option") or {}).get("value")
                out[name] = None if chosen in (None, INHERIT) else parse_value(name, str(chosen))
            elif kind == "checkboxes":
                out[name] = any(o.get("value") == FLAG_OPTION for o in state.get("selected_options") or [])
            elif kind == "multi_static_select":
                out[name] = [str(o.get("value")) for o in state.get("selected_options") or []] or None
            else:
                text = str(state.get("value") or "").strip()
                out[name] = parse_value(name, text) if text else None
        except ChannelSettingsError as error:
            raise _FieldError(name, str(error)) from None
    return out


def _keep_inherited_flag(view: ChannelView, submitted: dict[str, Any]) -> dict[str, Any]:
    """A checkbox cannot say "not set here": left as shown (the value the channel runs with), it changes nothing."""
    flag = submitted.get("followups_need_mention")
    if flag is not None and view.own.followups_need_mention is None and flag == view.config.followups_need_mention:
        return {name: value for name, value in submitted.items() if name != "followups_need_mention"}
    return submitted


def _key(team: str, channel: str) -> ConversationKey:
    return ConversationKey(platform=PLATFORM, workspace=team, channel=channel)


def _place(team: str, channel: str) -> ChannelPlace:
    return ChannelPlace(platform=PLATFORM, workspace=team, channel=channel)


def _first_input(view: dict[str, Any]) -> str:
    return next((str(b.get("block_id")) for b in view.get("blocks") or [] if b.get("type") == "input"), "agent_type")


def _input(name: str, element: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
    if element.get("type") == "plain_text_input" and element.pop("too_long", False):
        # A value longer than Slack lets a field hold (set with the CLI) is not shown, so a Save cannot cut it.
        return {"type": "section", "block_id": name,
                "text": {"type": "mrkdwn", "text": f"*{FIELDS_BY_NAME[name].label}*: too long to edit here; "
                         "use `relaybot channels set`."}}
    return {"type": "input", "block_id": name, "label": _plain(FIELDS_BY_NAME[name].label), "element": element,
            "optional": optional}


def _text(value: str | None, *, inherited: str, multiline: bool = False, max_chars: int = TEXT_MAX_CHARS) -> dict[str, Any]:
    element: dict[str, Any] = {"type": "plain_text_input", "action_id": ACTION, "multiline": multiline,
                               "max_length": max_chars, "placeholder": _plain(_cut(inherited, PLACEHOLDER_MAX_CHARS))}
    if value and len(value) > max_chars:
        element["too_long"] = True
    elif value:
        element["initial_value"] = value
    return element


def _listed(values: tuple[str, ...] | None) -> str | None:
    return None if values is None else ", ".join(values)


def _option(text: str, value: str) -> dict[str, Any]:
    return {"text": _plain(_cut(text, OPTION_TEXT_MAX_CHARS)), "value": value}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _tell(respond: AsyncRespond, text: str) -> None:
    """A reply only the person who typed the command sees (through the command's response_url)."""
    try:
        await respond(text=sentence(text), response_type="ephemeral")
    except Exception:
        logger.exception("could not reply to a /relaybot")
