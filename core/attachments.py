"""Files on a user's message: text read into the prompt, images as image parts, the rest named."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Sequence

from core.llm import ModelInfo
from core.requests import Attachment

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
    """Text to append to the question, and extra content parts (images) for the user message."""

    text: str
    parts: list[dict[str, Any]]


def is_text_like(attachment: Attachment) -> bool:
    content_type = attachment.content_type.split(";")[0].strip().lower()
    return content_type.startswith(TEXT_CONTENT_TYPES) or PurePath(attachment.filename).suffix.lower() in TEXT_EXTENSIONS


def prepare_attachments(attachments: Sequence[Attachment], *, model: ModelInfo) -> PreparedAttachments:
    blocks: list[str] = []
    parts: list[dict[str, Any]] = []
    for attachment in attachments:
        content_type = attachment.content_type.split(";")[0].strip().lower()
        if attachment.skipped:
            blocks.append(f"(Attached file {attachment.filename} of type {content_type or 'unknown'} is {attachment.skipped}.)")
        elif is_text_like(attachment) and len(attachment.data) <= TEXT_ATTACHMENT_MAX_BYTES:
            text = attachment.data.decode("utf-8", errors="replace")
            blocks.append(f"Attached file {attachment.filename}:\n```\n{text}\n```")
        elif content_type in IMAGE_CONTENT_TYPES and model.supports_vision and len(attachment.data) <= IMAGE_ATTACHMENT_MAX_BYTES:
            encoded = base64.b64encode(attachment.data).decode("ascii")
            parts.append({"type": "image_url", "image_url": {"url": f"data:{content_type};base64,{encoded}"}})
            blocks.append(f"(Image {attachment.filename} is attached.)")
        else:
            reason = "too large to read" if is_text_like(attachment) else "not a text file I can read"
            blocks.append(f"(Attached file {attachment.filename} of type {content_type or 'unknown'} is {reason}.)")
    return PreparedAttachments(text="\n\n".join(blocks), parts=parts)
