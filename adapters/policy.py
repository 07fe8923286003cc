"""Rules every platform applies the same way: which files are read, how much of a thread is context."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.attachments import (
    DOCUMENT_ATTACHMENT_MAX_BYTES, IMAGE_ATTACHMENT_MAX_BYTES, IMAGE_CONTENT_TYPES, TEXT_ATTACHMENT_MAX_BYTES, is_text_like,
    too_large,
)
from core.document_reader import document_kind
from core.requests import Attachment

log = logging.getLogger(__name__)

# Earlier thread messages read when the bot is first mentioned mid-thread; the engine trims them to
# its history budget, so this only bounds the platform reads (Discord pages 100 at a time).
THREAD_CONTEXT_MAX_MESSAGES = 200
# Files read from one message; the rest are only named.
MAX_FILES_PER_MESSAGE = 5


def download_cap(filename: str, content_type: str) -> int | None:
    """Bytes a file may have to be downloaded (text files and documents are read, images go to vision models); None:
    only named."""
    if document_kind(filename, content_type) is not None:
        return DOCUMENT_ATTACHMENT_MAX_BYTES
    probe = Attachment(filename=filename, content_type=content_type, data=b"")
    if is_text_like(probe):
        return TEXT_ATTACHMENT_MAX_BYTES
    if content_type.split(";")[0].strip().lower() in IMAGE_CONTENT_TYPES:
        return IMAGE_ATTACHMENT_MAX_BYTES
    return None


def named_only(filename: str, content_type: str, *, reason: str) -> Attachment:
    """A file the engine names but does not read, saying why (not text nor image, too large, too many, unreachable)."""
    return Attachment(filename=filename or "file", content_type=content_type, data=b"", skipped=reason)


NOT_READABLE = "not a text file, document or image I can read"
TOO_MANY = f"one file too many: I read {MAX_FILES_PER_MESSAGE} per message"
UNREACHABLE = "a file I could not download"
INCOMPLETE = "its download ended before the whole file arrived"


async def read_capped(read: Callable[[int], Awaitable[bytes]], cap: int) -> bytes:
    """The whole body from a stream's `read(n)` (up to n bytes, b"" at the end), or its first cap + 1 bytes when it
    is longer than `cap`. One read returns only what is buffered (about 128 KB from aiohttp), not the body."""
    chunks: list[bytes] = []
    total = 0
    while total <= cap:
        chunk = await read(cap + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


@dataclass(frozen=True, kw_only=True)
class FileOnMessage:
    """A file a platform says is on a message; `handle` is whatever the platform needs to download it."""

    filename: str
    content_type: str
    size: int
    handle: Any


async def read_files(
    files: Sequence[FileOnMessage], download: Callable[[FileOnMessage, int], Awaitable[bytes | None]]
) -> tuple[Attachment, ...]:
    """Every file as an Attachment, in order: read when the rules allow (download(file, cap) → bytes, or None
    when it failed), otherwise only named with the reason."""

    async def one(index: int, file: FileOnMessage) -> Attachment:
        cap = download_cap(file.filename, file.content_type)
        if index >= MAX_FILES_PER_MESSAGE:
            return named_only(file.filename, file.content_type, reason=TOO_MANY)
        if cap is None:
            return named_only(file.filename, file.content_type, reason=NOT_READABLE)
        if file.size > cap:
            log.info("not reading %s: %d bytes is over the %d byte cap", file.filename, file.size, cap)
            return named_only(file.filename, file.content_type, reason=too_large(cap))
        data = await download(file, cap)
        if data is None:
            return named_only(file.filename, file.content_type, reason=UNREACHABLE)
        if len(data) > cap:
            return named_only(file.filename, file.content_type, reason=too_large(cap))
        if len(data) < file.size:
            # Never a silent cut: part of a file read as if it were all of it gives a confident wrong answer.
            log.warning("file %s arrived with %d of its %d bytes; leaving it out", file.filename, len(data), file.size)
            return named_only(file.filename, file.content_type, reason=INCOMPLETE)
        return Attachment(filename=file.filename or "file", content_type=file.content_type, data=data)

    return tuple(await asyncio.gather(*(one(index, file) for index, file in enumerate(files))))
