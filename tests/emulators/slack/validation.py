"""Slack's message size rules: returns the error Slack would give, or None when the message fits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

POST_TEXT_MAX_CHARS = 40_000
UPDATE_TEXT_MAX_CHARS = 4_000
BLOCKS_TOTAL_TEXT_MAX_CHARS = 13_000
SECTION_TEXT_MAX_CHARS = 3_000
SECTION_FIELD_MAX_CHARS = 2_000
MARKDOWN_BLOCKS_MAX_CHARS = 12_000  # cumulative over all markdown blocks of one message
MARKDOWN_TEXT_MAX_CHARS = 12_000  # chat.postMessage / chat.update `markdown_text`
HEADER_TEXT_MAX_CHARS = 150
BLOCKS_MAX_COUNT = 50
CONTEXT_ACTIONS_MAX_ELEMENTS = 5
ACTIONS_MAX_ELEMENTS = 25
CONTEXT_ACTIONS_ELEMENTS = frozenset({"feedback_buttons", "icon_button"})
FEEDBACK_BUTTON_TEXT_MAX_CHARS = 75
FEEDBACK_BUTTON_VALUE_MAX_CHARS = 2000
ACCESSIBILITY_LABEL_MAX_CHARS = 75


@dataclass(frozen=True, kw_only=True)
class Rejection:
    error: str
    details: list[str]


def parse_blocks(raw: Any) -> list[dict[str, Any]] | None | Rejection:
    """Blocks arrive as a list (JSON body) or a JSON string (form/query): normalise to a list."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return Rejection(error="invalid_blocks_format", details=["blocks is not valid JSON"])
    if not isinstance(raw, list) or not all(isinstance(b, dict) and "type" in b for b in raw):
        return Rejection(error="invalid_blocks_format", details=["blocks must be a list of typed objects"])
    return raw


def _text_of(obj: Any) -> str:
    """A composition text object is {"type": ..., "text": str}; markdown blocks carry a bare str."""
    if isinstance(obj, dict):
        value = obj.get("text")
        return value if isinstance(value, str) else ""
    return obj if isinstance(obj, str) else ""


def _all_text_chars(node: Any) -> int:
    if isinstance(node, dict):
        total = 0
        for key, value in node.items():
            if key == "text" and isinstance(value, str):
                total += len(value)
            else:
                total += _all_text_chars(value)
        return total
    if isinstance(node, list):
        return sum(_all_text_chars(item) for item in node)
    return 0


def check_blocks(blocks: list[dict[str, Any]]) -> Rejection | None:
    problems: list[str] = []
    if len(blocks) > BLOCKS_MAX_COUNT:
        problems.append(f"no more than {BLOCKS_MAX_COUNT} items allowed [json-pointer:/blocks]")
    markdown_chars = 0
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "section":
            if len(_text_of(block.get("text"))) > SECTION_TEXT_MAX_CHARS:
                problems.append(
                    f"must be less than {SECTION_TEXT_MAX_CHARS + 1} characters "
                    f"[json-pointer:/blocks/{index}/text/text]"
                )
            for f_index, item in enumerate(block.get("fields") or []):
                if len(_text_of(item)) > SECTION_FIELD_MAX_CHARS:
                    problems.append(
                        f"must be less than {SECTION_FIELD_MAX_CHARS + 1} characters "
                        f"[json-pointer:/blocks/{index}/fields/{f_index}/text]"
                    )
        elif kind == "header":
            if len(_text_of(block.get("text"))) > HEADER_TEXT_MAX_CHARS:
                problems.append(
                    f"must be less than {HEADER_TEXT_MAX_CHARS + 1} characters "
                    f"[json-pointer:/blocks/{index}/text/text]"
                )
        elif kind == "markdown":
            if not isinstance(block.get("text"), str) or not block["text"]:
                problems.append(f"must provide a non-empty string [json-pointer:/blocks/{index}/text]")
            markdown_chars += len(_text_of(block.get("text")))
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 0 < len(elements) <= ACTIONS_MAX_ELEMENTS:
                problems.append(f"must have 1 to {ACTIONS_MAX_ELEMENTS} elements [json-pointer:/blocks/{index}/elements]")
        elif kind == "context_actions":
            problems.extend(_context_actions_problems(block, f"/blocks/{index}"))
    if markdown_chars > MARKDOWN_BLOCKS_MAX_CHARS:
        problems.append(f"markdown blocks exceed {MARKDOWN_BLOCKS_MAX_CHARS} characters in total")
    if problems:
        return Rejection(error="invalid_blocks", details=problems)
    if _all_text_chars(blocks) > BLOCKS_TOTAL_TEXT_MAX_CHARS:
        return Rejection(error="msg_blocks_too_long", details=[])
    return None


def _context_actions_problems(block: dict[str, Any], where: str) -> list[str]:
    """Slack's context_actions block: 1 to 5 feedback_buttons or icon_button elements; a feedback_buttons element
    has a positive and a negative button, each plain_text (≤ 75), a value (≤ 2,000), an optional label (≤ 75)."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 0 < len(elements) <= CONTEXT_ACTIONS_MAX_ELEMENTS:
        return [f"must have 1 to {CONTEXT_ACTIONS_MAX_ELEMENTS} elements [json-pointer:{where}/elements]"]
    problems: list[str] = []
    for number, element in enumerate(elements):
        at = f"{where}/elements/{number}"
        if not isinstance(element, dict) or element.get("type") not in CONTEXT_ACTIONS_ELEMENTS:
            problems.append(f"must be one of {sorted(CONTEXT_ACTIONS_ELEMENTS)} [json-pointer:{at}/type]")
            continue
        if element["type"] != "feedback_buttons":
            continue
        for side in ("positive_button", "negative_button"):
            button = element.get(side)
            if not isinstance(button, dict):
                problems.append(f"is required [json-pointer:{at}/{side}]")
                continue
            text = button.get("text")
            if not isinstance(text, dict) or text.get("type") != "plain_text" or not 0 < len(_text_of(text)) <= FEEDBACK_BUTTON_TEXT_MAX_CHARS:
                problems.append(f"must be plain_text of 1 to {FEEDBACK_BUTTON_TEXT_MAX_CHARS} characters [json-pointer:{at}/{side}/text]")
            value = button.get("value")
            if not isinstance(value, str) or not 0 < len(value) <= FEEDBACK_BUTTON_VALUE_MAX_CHARS:
                problems.append(f"must be 1 to {FEEDBACK_BUTTON_VALUE_MAX_CHARS} characters [json-pointer:{at}/{side}/value]")
            label = button.get("accessibility_label")
            if label is not None and (not isinstance(label, str) or len(label) > ACCESSIBILITY_LABEL_MAX_CHARS):
                problems.append(f"must be at most {ACCESSIBILITY_LABEL_MAX_CHARS} characters [json-pointer:{at}/{side}/accessibility_label]")
    return problems


def markdown_text(params: dict[str, Any]) -> str | None | Rejection:
    """`markdown_text` when given: Slack refuses it beside `text` or `blocks` (markdown_text_conflict) and
    beyond 12,000 characters; None when absent."""
    raw = params.get("markdown_text")
    if raw is None or raw == "":
        return None
    if params.get("text") or params.get("blocks"):
        return Rejection(error="markdown_text_conflict", details=[])
    text = str(raw)
    if len(text) > MARKDOWN_TEXT_MAX_CHARS:
        return Rejection(error="msg_too_long", details=[])
    return text


def check_message(
    *, text: str, blocks: list[dict[str, Any]] | None, is_update: bool
) -> Rejection | None:
    """Checks text then blocks, as chat.postMessage / chat.update do."""
    max_text = UPDATE_TEXT_MAX_CHARS if is_update else POST_TEXT_MAX_CHARS
    if len(text) > max_text:
        return Rejection(error="msg_too_long", details=[])
    if blocks is not None:
        return check_blocks(blocks)
    return None
