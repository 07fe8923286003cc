"""Files on a user's message: text and documents read into the prompt, images as image parts, the rest named."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Sequence

from core.cpu_work import in_worker
from core.document_reader import DocumentText, Unread, document_kind, read_document
from core.llm import ModelInfo
from core.requests import Attachment
from core.text_safety import storable
from core.tokens import get_token_counter

TEXT_ATTACHMENT_MAX_BYTES = 200_000
IMAGE_ATTACHMENT_MAX_BYTES = 5_000_000
# PDF, Word, PowerPoint, Excel and HTML files: downloaded up to this, read into at most this many tokens each.
DOCUMENT_ATTACHMENT_MAX_BYTES = 10_000_000
DOCUMENT_ATTACHMENT_MAX_TOKENS = 20_000
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


async def prepare_attachments(attachments: Sequence[Attachment], *, model: ModelInfo) -> PreparedAttachments:
    """What the model is given of each file, documents read in a capped child process (core.document_reader)."""
    documents = await asyncio.gather(*(_document_text(attachment) for attachment in attachments))
    blocks: list[str] = []
    parts: list[dict[str, Any]] = []
    left_out: list[tuple[str, str]] = []
    cut: list[str] = []
    for attachment, document in zip(attachments, documents):
        content_type = attachment.content_type.split(";")[0].strip().lower()
        if isinstance(document, DocumentText):
            if document.cut:
                cut.append(attachment.filename)
            blocks.append(f"Attached file {attachment.filename}:\n```\n{storable(document.text)}\n```")
            continue
        reason = attachment.skipped or (document.reason if isinstance(document, Unread) else "") or _why_unread(
            attachment, content_type, model=model)
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
    notice = " ".join(sentence for sentence in (left_out_notice(left_out), cut_notice(cut)) if sentence)
    return PreparedAttachments(text="\n\n".join(blocks), parts=parts, notice=notice)


def cut_notice(cut: Sequence[str]) -> str:
    """One sentence naming each document read only in part."""
    if not cut:
        return ""
    listed = cut[0] if len(cut) == 1 else ", ".join(cut[:-1]) + " and " + cut[-1]
    return (f"I read only the first {DOCUMENT_ATTACHMENT_MAX_TOKENS:,} tokens of {listed}; "
            f"this answer does not use the rest.")


async def _document_text(attachment: Attachment) -> DocumentText | Unread | None:
    """A document's text within DOCUMENT_ATTACHMENT_MAX_TOKENS, why it was not read, or None: not a document."""
    kind = document_kind(attachment.filename, attachment.content_type)
    if kind is None or attachment.skipped:
        return None
    if len(attachment.data) > DOCUMENT_ATTACHMENT_MAX_BYTES:
        return Unread(too_large(DOCUMENT_ATTACHMENT_MAX_BYTES))
    read = await read_document(attachment.data, kind=kind, filename=attachment.filename)
    if isinstance(read, Unread):
        return read
    head = await in_worker(get_token_counter().head, read.text, DOCUMENT_ATTACHMENT_MAX_TOKENS)
    return DocumentText(head, cut=read.cut or len(head) < len(read.text))


def _why_unread(attachment: Attachment, content_type: str, *, model: ModelInfo) -> str:
    """Why a downloaded file cannot go to the model, or "" when it can (as text, or as an image part)."""
    if is_text_like(attachment):
        return too_large(TEXT_ATTACHMENT_MAX_BYTES) if len(attachment.data) > TEXT_ATTACHMENT_MAX_BYTES else ""
    if content_type not in IMAGE_CONTENT_TYPES:
        return "not a text file, document or image I can read"
    if not model.supports_vision:
        return "an image, and this model cannot see images"
    return too_large(IMAGE_ATTACHMENT_MAX_BYTES) if len(attachment.data) > IMAGE_ATTACHMENT_MAX_BYTES else ""
