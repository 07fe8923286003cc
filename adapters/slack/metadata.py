"""The metadata a Slack post carries to name it (an answer's part, any other post), so a retry finds it before sending again."""

from __future__ import annotations

ANSWER_PART_EVENT = "relaybot_answer_part"
POST_EVENT = "relaybot_post"


def part_metadata(key: str) -> dict[str, object]:
    """Message metadata naming the answer and part a message shows (what a retry looks for)."""
    answer, _, part = key.rpartition(":")
    return {"event_type": ANSWER_PART_EVENT, "event_payload": {"answer": answer, "part": int(part or 0)}}


def is_part(message: dict[str, object], key: str) -> bool:
    """Whether a message from conversations.history/replies (asked with include_all_metadata) is that part."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != ANSWER_PART_EVENT:
        return False
    return metadata.get("event_payload") == part_metadata(key)["event_payload"]


def post_metadata(key: str) -> dict[str, object]:
    """Message metadata naming any other post (a notice, the sources, an approval), for its look-up."""
    return {"event_type": POST_EVENT, "event_payload": {"post": key}}
