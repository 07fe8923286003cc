"""Reads an untrusted document (PDF, Word, PowerPoint, Excel, HTML) into text in a child process whose time and memory
are capped and enforced: a parser a hostile file sends into a loop or a zip bomb is killed, the bot goes on."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from core.cpu_work import cpu_turn

log = logging.getLogger(__name__)

# Real seconds one document may take, start of the child included; past them the child is killed.
DOCUMENT_READ_TIMEOUT_S = 20.0
# The child's address space: a parser that would take more fails inside it, never in the bot.
DOCUMENT_READ_MEMORY_BYTES = 1_500_000_000
# Office files are zips: what their members say they hold, unpacked, before anything is unpacked.
DOCUMENT_UNPACKED_MAX_BYTES = 50_000_000
# Text a document may give; the rest is cut in the child, so no more crosses the pipe.
DOCUMENT_TEXT_MAX_CHARS = 400_000
# The loaders' kinds read here (by the loaders' own suffix and content-type tables); text kinds are read as text.
DOCUMENT_KINDS = frozenset({"pdf", "docx", "pptx", "xlsx", "html"})
# What the child may see of the bot's environment: never its tokens or keys.
_CHILD_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TMPDIR")
_ROOT = Path(__file__).resolve().parents[1]
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from core.document_reader import child_main; child_main()"


@dataclass(frozen=True)
class DocumentText:
    """A document's text; `cut` when it had more than DOCUMENT_TEXT_MAX_CHARS."""

    text: str
    cut: bool = False


@dataclass(frozen=True)
class Unread:
    """Why a document was not read, in words the asker can act on."""

    reason: str


def document_kind(filename: str, content_type: str) -> str | None:
    """"pdf", "docx", "pptx", "xlsx" or "html" when the file is a document this module reads, by name or type."""
    # Imported here, not with this module: the engine imports it, and commands that read no file need no loaders
    # (relaybot run has them from its start).
    from core.retrieval.loaders import kind_for_file

    return kind_for_file(filename, content_type, kinds=DOCUMENT_KINDS)


async def read_document(data: bytes, *, kind: str, filename: str) -> DocumentText | Unread:
    """The document's text, read in a child process (a few at a time, as other input-sized work)."""
    env = {key: os.environ[key] for key in _CHILD_ENV_KEYS if key in os.environ}
    header = json.dumps({"kind": kind, "filename": filename}).encode() + b"\n"
    async with cpu_turn():
        # Isolated (-I: no PYTHON* variables, no user site): it imports this checkout's or install's own code only.
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", _CHILD, str(_ROOT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env=env, cwd=str(_ROOT),
        )
        try:
            out, _ = await asyncio.wait_for(child.communicate(header + data), DOCUMENT_READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("reading %s took over %.0f s; its reader was stopped", filename, DOCUMENT_READ_TIMEOUT_S)
            return Unread(f"it took over {DOCUMENT_READ_TIMEOUT_S:.0f} s to read")
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        log.warning("the reader of %s ended with %s and no answer", filename, child.returncode)
        return Unread("it could not be read")
    if "reason" in answer:
        return Unread(str(answer["reason"]))
    return DocumentText(str(answer["text"]), cut=bool(answer["cut"]))


def child_main() -> None:
    """The child: caps its own memory, reads the header line and the document from stdin, writes one JSON answer."""
    import resource
    import warnings

    resource.setrlimit(resource.RLIMIT_AS, (DOCUMENT_READ_MEMORY_BYTES, DOCUMENT_READ_MEMORY_BYTES))
    # Whatever the parsers print or warn, however much a hostile file makes them, goes nowhere: only the answer
    # reaches the pipe.
    answer_out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    header, _, data = sys.stdin.buffer.read().partition(b"\n")
    request = json.loads(header)
    try:
        answer = _read(data, kind=str(request["kind"]), filename=str(request["filename"]))
    except MemoryError:
        answer = {"reason": "reading it needed more memory than a file may take"}
    answer_out.write(json.dumps(answer))
    answer_out.flush()


def _read(data: bytes, *, kind: str, filename: str) -> dict[str, object]:
    from core.retrieval.loaders import Skipped, document_from_bytes

    if kind in ("docx", "pptx", "xlsx"):
        unpacked = _unpacked_size(data)
        if unpacked is None:
            return {"reason": "it is not a valid Office file"}
        if unpacked > DOCUMENT_UNPACKED_MAX_BYTES:
            return {"reason": f"too large unpacked: over {DOCUMENT_UNPACKED_MAX_BYTES:,} bytes"}
    loaded = document_from_bytes(data, uri=filename, kind=kind, fallback_title=filename)
    if isinstance(loaded, Skipped):
        return {"reason": loaded.reason}
    text = loaded.text
    return {"text": text[:DOCUMENT_TEXT_MAX_CHARS], "cut": len(text) > DOCUMENT_TEXT_MAX_CHARS}


def _unpacked_size(data: bytes) -> int | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError):
        return None
