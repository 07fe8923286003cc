"""Slack modals: trigger ids from slash commands, views.open checked as Slack checks it, and view_submission payloads."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .state import JsonDict, Team
from .store import SlackStore

# Slack: a trigger_id can open one view, within 3 seconds of the interaction that carried it.
TRIGGER_LIFETIME_S = 3.0
MODAL_BLOCKS_MAX = 100
TITLE_MAX_CHARS = 24
BUTTON_TEXT_MAX_CHARS = 24
CALLBACK_ID_MAX_CHARS = 255
PRIVATE_METADATA_MAX_CHARS = 3000
LABEL_MAX_CHARS = 2000
PLACEHOLDER_MAX_CHARS = 150
OPTION_TEXT_MAX_CHARS = 75
OPTION_VALUE_MAX_CHARS = 150
OPTIONS_MAX = 100
PLAIN_TEXT_INPUT_MAX = 3000
BLOCK_TYPES = frozenset({"input", "section", "context", "divider", "header", "actions"})
INPUT_ELEMENTS = frozenset({"plain_text_input", "static_select", "multi_static_select", "checkboxes", "radio_buttons"})


def _error(code: str, *messages: str) -> JsonDict:
    body: JsonDict = {"ok": False, "error": code}
    if messages:
        body["response_metadata"] = {"messages": list(messages)}
    return body


@dataclass(kw_only=True)
class Trigger:
    user_id: str
    team_id: str
    issued_at_s: float
    used: bool = False


@dataclass(kw_only=True)
class OpenedView:
    """A modal views.open accepted: what the user sees until they submit or close it."""

    view_id: str
    user_id: str
    team_id: str
    view: JsonDict
    at_s: float = field(default_factory=time.monotonic)


class Modals:
    """views.open over trigger ids the emulator issued; `submission` builds what Slack sends on Save."""

    def __init__(self, store: SlackStore) -> None:
        self._store = store
        self._triggers: dict[str, Trigger] = {}
        self.opened: list[OpenedView] = []

    def handlers(self) -> dict[str, Any]:
        return {"views.open": self.views_open}

    def issue(self, trigger_id: str, *, user_id: str, team_id: str) -> None:
        self._triggers[trigger_id] = Trigger(user_id=user_id, team_id=team_id, issued_at_s=time.monotonic())

    async def views_open(self, team: Team, params: JsonDict) -> JsonDict:
        trigger = self._triggers.get(str(params.get("trigger_id") or ""))
        if trigger is None or trigger.team_id != team.team_id:
            return _error("invalid_trigger_id")
        if trigger.used or time.monotonic() - trigger.issued_at_s > TRIGGER_LIFETIME_S:
            return _error("expired_trigger_id")
        raw = params.get("view")
        view = json.loads(raw) if isinstance(raw, str) else raw
        problem = check_modal(view)
        if problem is not None:
            return _error("invalid_arguments", problem)
        trigger.used = True
        opened = OpenedView(view_id="V" + uuid.uuid4().hex[:10].upper(), user_id=trigger.user_id,
                            team_id=team.team_id, view=view)
        self.opened.append(opened)
        return {"ok": True, "view": self._as_api(opened)}

    def _as_api(self, opened: OpenedView) -> JsonDict:
        return {"id": opened.view_id, "team_id": opened.team_id, "app_id": None, "bot_id": None,
                "hash": uuid.uuid4().hex[:16], "state": {"values": {}}, "root_view_id": opened.view_id,
                "previous_view_id": None, "private_metadata": "", "callback_id": "", "external_id": "",
                **opened.view}

    def submission(self, view_id: str, values: dict[str, Any], *, api_app_id: str, domain: str) -> JsonDict:
        """The view_submission Slack sends when the user presses Save. `values` maps a block_id to what was
        entered: text (None: left empty), an option value, a list of option values, or a bool for a checkbox
        of one option; blocks not named keep their initial values."""
        opened = next(v for v in self.opened if v.view_id == view_id)
        state: dict[str, Any] = {}
        for block in opened.view.get("blocks") or []:
            if block.get("type") != "input":
                continue
            element = block["element"]
            block_id = block["block_id"]
            given = values.get(block_id, _initial(element))
            state[block_id] = {element["action_id"]: _state(element, given)}
        view = {**self._as_api(opened), "state": {"values": state}}
        return {
            "type": "view_submission",
            "team": {"id": opened.team_id, "domain": domain},
            "user": {"id": opened.user_id, "username": opened.user_id.lower(), "name": opened.user_id.lower(),
                     "team_id": self._store.users[opened.user_id].team_id if opened.user_id in self._store.users
                     else opened.team_id},
            "api_app_id": api_app_id,
            "token": "emulator-verification-token",
            "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}",
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }


def _initial(element: JsonDict) -> Any:
    kind = element["type"]
    if kind == "plain_text_input":
        return element.get("initial_value")
    if kind in ("static_select", "radio_buttons"):
        return (element.get("initial_option") or {}).get("value")
    if kind == "checkboxes":
        return [o["value"] for o in element.get("initial_options") or []]
    return [o["value"] for o in element.get("initial_options") or []]


def _state(element: JsonDict, given: Any) -> JsonDict:
    kind = element["type"]
    options = {o["value"]: o for o in element.get("options") or []}
    if kind == "plain_text_input":
        return {"type": kind, "value": given if given not in ("", None) else None}
    if kind in ("static_select", "radio_buttons"):
        if given is not None and given not in options:
            raise ValueError(f"{given!r} is not an option of {element['action_id']}")
        return {"type": kind, "selected_option": options[given] if given is not None else None}
    if kind == "checkboxes" and isinstance(given, bool):
        given = list(options)[:1] if given else []
    chosen = list(given or [])
    missing = [value for value in chosen if value not in options]
    if missing:
        raise ValueError(f"{missing} are not options of {element['action_id']}")
    return {"type": kind, "selected_options": [options[value] for value in chosen]}


def _text_problem(obj: Any, where: str, limit: int) -> str | None:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn") or not isinstance(obj.get("text"), str):
        return f"{where} must be a text object"
    if not obj["text"] or len(obj["text"]) > limit:
        return f"{where} must be 1 to {limit} characters"
    return None


def check_modal(view: Any) -> str | None:
    """What Slack would refuse in a modal, as its error message; None when it is accepted."""
    if not isinstance(view, dict) or view.get("type") != "modal":
        return "view.type must be modal"
    problem = _text_problem(view.get("title"), "title", TITLE_MAX_CHARS)
    if problem:
        return problem
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= MODAL_BLOCKS_MAX:
        return f"a modal has 1 to {MODAL_BLOCKS_MAX} blocks"
    if len(str(view.get("private_metadata") or "")) > PRIVATE_METADATA_MAX_CHARS:
        return "private_metadata is too long"
    if len(str(view.get("callback_id") or "")) > CALLBACK_ID_MAX_CHARS:
        return "callback_id is too long"
    has_inputs = any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
    if has_inputs and _text_problem(view.get("submit"), "submit", BUTTON_TEXT_MAX_CHARS):
        return "a modal with input blocks needs a submit button"
    seen: set[str] = set()
    for number, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            return f"blocks[{number}] has an unknown type"
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in seen:
                return f"blocks[{number}].block_id {block_id!r} is repeated"
            seen.add(block_id)
        if block["type"] == "input":
            problem = _text_problem(block.get("label"), f"blocks[{number}].label", LABEL_MAX_CHARS) or _element_problem(
                block.get("element"), f"blocks[{number}].element")
            if problem:
                return problem
    return None


def _element_problem(element: Any, where: str) -> str | None:
    if not isinstance(element, dict) or element.get("type") not in INPUT_ELEMENTS:
        return f"{where} is not an input element"
    if not element.get("action_id"):
        return f"{where} needs an action_id"
    if "placeholder" in element:
        problem = _text_problem(element["placeholder"], f"{where}.placeholder", PLACEHOLDER_MAX_CHARS)
        if problem:
            return problem
    if element["type"] == "plain_text_input":
        limit = int(element.get("max_length") or PLAIN_TEXT_INPUT_MAX)
        if limit > PLAIN_TEXT_INPUT_MAX:
            return f"{where}.max_length is at most {PLAIN_TEXT_INPUT_MAX}"
        if len(str(element.get("initial_value") or "")) > limit:
            return f"{where}.initial_value is longer than max_length"
        return None
    options = element.get("options")
    if not isinstance(options, list) or not 0 < len(options) <= OPTIONS_MAX:
        return f"{where} has 1 to {OPTIONS_MAX} options"
    values = []
    for option in options:
        if not isinstance(option, dict) or _text_problem(option.get("text"), f"{where} option", OPTION_TEXT_MAX_CHARS):
            return f"{where} has an option without valid text"
        value = option.get("value")
        if not isinstance(value, str) or not 0 < len(value) <= OPTION_VALUE_MAX_CHARS:
            return f"{where} has an option whose value is not 1 to {OPTION_VALUE_MAX_CHARS} characters"
        values.append(value)
    initial = [element["initial_option"]] if "initial_option" in element else list(element.get("initial_options") or [])
    if any(not isinstance(o, dict) or o not in options for o in initial):
        return f"{where} has an initial option that is not one of its options"
    return None
