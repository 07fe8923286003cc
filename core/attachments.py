"""Files on a user's message: text read into the prompt, images as image parts, the rest named."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Sequence

from core.llm import ModelInfo
from core.requests import Attachment
from core.text_safety import storable

TEXT_ATTACHMENT_MAX_BYTES = 200_000
IMAGE_ATTACHMENT_MAX_BYTES = 5_000_000
TEXT_EXTENSIONS = frozenset(
    ".txt .md .markdown .rst .csv .tsv .json .yaml .yml .toml .ini .cfg .log .xml .html .htm .py .js .ts .go .rs "
    ".java .c .h .cpp .sql .sh".split()
)
TEXT_CONTENT_TYPES = ("text/", "application/json", "application/xml", "application/yaml", "application/x-yaml")
IMAGE_CONTENT_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, kw_only=True)
class PreparedAttachments:
    """Text to append to the question, extra content parts (images) for the user message, and the sentence the
    asker is shown first when a file was left out ("" when every file was read)."""

    text: str
    parts: list[dict[str, Any]]
    notice: str = ""


def too_large(cap: int) -> str:
    """Why a file over its cap is left out, naming the cap."""
    return f"too large: over {cap:,} bytes"


def left_out_notice(left_out: Sequence[tuple[str, str]]) -> str:
    """One sentence naming each file that was left out and why: the answer opens with it, so the asker never
    takes an answer for one that read the file."""
    if not left_out:
        return ""
    named = [f"{name} ({reason})" for name, reason in left_out]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"I left out {listed}; this answer does not use {'it' if len(named) == 1 else 'them'}."


def is_text_like(attachment: Attachment) -> bool:
    content_type = attachment.content_type.split(";")[0].strip().lower()
    return content_type.startswith(TEXT_CONTENT_TYPES) or PurePath(attachment.filename).suffix.lower() in TEXT_EXTENSIONS


def prepare_attachments(attachments: Sequence[Attachment], *, model: ModelInfo) -> PreparedAttachments:
    blocks: list[str] = []
    parts: list[dict[str, Any]] = []
    left_out: list[tuple[str, str]] = []
    for attachment in attachments:
        content_type = attachment.content_type.split(";")[0].strip().lower()
        reason = attachment.skipped or _why_unread(attachment, content_type, model=model)
        if reason:
            left_out.append((attachment.filename, reason))
            # The model is told too, so it does not answer as if it had read the file.
            blocks.append(f"(Attached file {attachment.filename} of type {content_type or 'unknown'} was left out: "
                          f"{reason}. The user has been told.)")
        elif is_text_like(attachment):
            text = storable(attachment.data.decode("utf-8", errors="replace"))  # a file may hold NUL bytes
            blocks.append(f"Attached file {attachment.filename}:\n```\n{text}\n```")
        else:
            encoded = base64.b64encode(attachment.data).decode("ascii")
            parts.append({"type": "image_url", "image_url": {"url": f"data:{content_type};base64,{encoded}"}})
            blocks.append(f"(Image {attachment.filename} is attached.)")
    return PreparedAttachments(text="\n\n".join(blocks), parts=parts, notice=left_out_notice(left_out))


def _why_unread(attachment: Attachment, content_type: str, *, model: ModelInfo) -> str:
    """Why a downloaded file cannot go to the model, or "" when it can (as text, or as an image part)."""
    if is_text_like(attachment):
        return too_large(TEXT_ATTACHMENT_MAX_BYTES) if len(attachment.data) > TEXT_ATTACHMENT_MAX_BYTES else ""
    if content_type not in IMAGE_CONTENT_TYPES:
        return "not a text file or image I can read"
    if not model.supports_vision:
        return "an image, and this model cannot see images"
    return too_large(IMAGE_ATTACHMENT_MAX_BYTES) if len(attachment.data) > IMAGE_ATTACHMENT_MAX_BYTES else ""
