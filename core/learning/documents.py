"""A channel's messages as documents that read well: one per thread, one per stretch, chunked on message boundaries."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from core.learning.model import ChannelMessage
from core.retrieval.chunking import Chunk, chunk_document
from core.retrieval.indexing import CHUNK_MAX_TOKENS
from core.text_safety import storable
from core.tokens import get_token_counter

THREAD_PREFIX = "thread:"
STRETCH_PREFIX = "stretch:"
_BLANK_LINES_RE = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")
# Between two messages' blocks: the chunk boundary that never falls inside a message.
MESSAGE_SEPARATOR = "\n\n"


@dataclass(frozen=True, kw_only=True)
class ChannelDocument:
    """One document learnt from a channel: its key, what a citation shows and links to, and its chunks."""

    key: str
    title: str
    uri: str
    text: str
    chunks: tuple[Chunk, ...]

    @property
    def content_hash(self) -> str:
        return content_hash(self.title, self.uri, self.text)


def content_hash(title: str, uri: str, text: str) -> str:
    return hashlib.sha256("\x00".join((title, uri, text)).encode("utf-8", "surrogatepass")).hexdigest()


def thread_key(root: str) -> str:
    return f"{THREAD_PREFIX}{root}"


def stretch_key(at: datetime, first: str) -> str:
    return f"{STRETCH_PREFIX}{day_of(at)}:{first}"


def day_of(at: datetime) -> str:
    """The UTC day a message belongs to, as stretches are cut."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d")


def message_block(message: ChannelMessage) -> str:
    """`[2026-11-03 14:02] Ana: …` with its files named; blank lines inside a message closed up, so the chunker's
    paragraph breaks are message boundaries only."""
    when = message.at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
    text = _BLANK_LINES_RE.sub("\n", message.text.strip())
    files = "".join(f" (file: {name})" for name in message.files)
    return storable(f"[{when}] {message.author_name or message.author_id or 'someone'}: {text}{files}".rstrip())


def title_for(channel_name: str, key: str, learned: Sequence[ChannelMessage]) -> str:
    """`#incidents — 2026-11-03, thread by Ana` or `#incidents — 2026-11-03`."""
    first = learned[0]
    day = day_of(first.at)
    if key.startswith(THREAD_PREFIX):
        return storable(f"#{channel_name} — {day}, thread by {first.author_name or first.author_id or 'someone'}")
    return storable(f"#{channel_name} — {day}")


def build_document(
    key: str, messages: Sequence[ChannelMessage], *, channel_name: str, fallback_uri: str,
    max_tokens: int = CHUNK_MAX_TOKENS,
) -> ChannelDocument | None:
    """The document of `messages` (in order), or None when nothing in it is learned from (only bots' messages).

    The uri is the permalink of its first learned message (`fallback_uri` while none is known)."""
    learned = [m for m in messages if not m.never_learned and (m.text.strip() or m.files)]
    if not learned:
        return None
    title = title_for(channel_name, key, learned)
    blocks = [message_block(m) for m in learned]
    chunks = tuple(pack_blocks(blocks, title=title, max_tokens=max_tokens))
    uri = storable(learned[0].permalink or fallback_uri)
    return ChannelDocument(key=key, title=title, uri=uri, text=MESSAGE_SEPARATOR.join(blocks), chunks=chunks)


def pack_blocks(blocks: Sequence[str], *, title: str, max_tokens: int) -> list[Chunk]:
    """Whole message blocks packed into chunks of at most `max_tokens`; a block alone larger than that is cut by
    the document chunker (sentences, then words), the only case a message is split."""
    counter = get_token_counter()
    pieces: list[tuple[str, int]] = []
    for block in blocks:
        tokens = counter.count(block)
        if tokens <= max_tokens:
            pieces.append((block, tokens))
        else:
            pieces.extend((c.text, c.token_count) for c in chunk_document(block, title="", max_tokens=max_tokens,
                                                                          overlap_tokens=0, counter=counter))
    texts: list[tuple[list[str], int]] = []
    for text, tokens in pieces:
        if texts and texts[-1][1] + tokens + 1 <= max_tokens:
            texts[-1][0].append(text)
            texts[-1] = (texts[-1][0], texts[-1][1] + tokens + 1)
        else:
            texts.append(([text], tokens))
    chunks = []
    for order, (parts, _) in enumerate(texts):
        text = MESSAGE_SEPARATOR.join(parts)
        chunks.append(Chunk(text=text, order=order, heading_path=(), token_count=counter.count(text), title=title))
    return chunks
