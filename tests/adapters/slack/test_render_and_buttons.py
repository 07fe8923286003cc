"""Markdown for Slack's own rendering, ping neutralising, and the size bounds of approval and sources messages."""

from __future__ import annotations

import json
import re

from adapters import wording as shared_wording
from adapters.slack.buttons import (
    ACTION_ARGUMENTS,
    Pressed,
    approval_blocks,
    page_of,
    page_starts,
    parse_button,
    shown_arguments,
)
from adapters.slack.render import MAX_MESSAGE_TEXT_CHARS, code_messages, markdown_text, safe_markdown, sources_messages
from core.approvals import ApprovalView, CallView
from core.citations import Citation
from core.events import SourceItem


def test_markdown_is_left_for_slack_to_render() -> None:
    """What a regex converter broke: bold italics, links with parentheses, images, `<` in text and code."""
    source = (
        "# Plan\n***all of it*** and **bold** *it* ~~old~~ [docs](https://en.wikipedia.org/wiki/Rust_(language))\n"
        "![diagram](https://x.io/d.png)\n- one\n  * two\n> note\n```python\nif a < b and **x**:\n```\nthen `<b>` & more"
    )
    assert safe_markdown(source) == source


def test_mass_pings_and_mentions_are_neutralised_everywhere() -> None:
    rendered = safe_markdown(
        "<!channel> <!here|here> <!everyone> <!subteam^S1> @channel @Here `@everyone` <@U123> &lt;!here&gt;\n"
        "```\n<!channel> @here\n```"
    )
    for ping in ("<!channel>", "<!here", "<!everyone>", "<!subteam", "@channel", "@Here", "@everyone", "<@U123>",
                 "&lt;!here", "@here"):
        assert ping not in rendered
    assert "@\u200bchannel" in rendered and "<\u200b@U123>" in rendered
    assert rendered.replace("\u200b", "") == (
        "<!channel> <!here|here> <!everyone> <!subteam^S1> @channel @Here `@everyone` <@U123> &lt;!here&gt;\n"
        "```\n<!channel> @here\n```"
    ), "readable as written"
    assert safe_markdown("<#C123> and <https://x.io|x>") == "<#C123> and <https://x.io|x>", "no ping, left alone"


def test_markdown_text_never_exceeds_the_message_limit() -> None:
    assert len(markdown_text("@here " * 1000)) <= MAX_MESSAGE_TEXT_CHARS


def test_approval_blocks_stay_within_slack_limits_for_many_large_calls() -> None:
    calls = tuple(CallView(call_id=f"call_{n}", tool="deploy", arguments={"blob": "x" * 5000})
                  for n in range(40))
    view = ApprovalView(continuation_id="0" * 8 + "-0000-0000-0000-" + "0" * 12, requested_by="U1", calls=calls, expires_at=0.0)
    blocks = approval_blocks(view)
    assert len(blocks) <= 50
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    texts += [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]
    assert all(len(t) <= 3000 for t in texts) and sum(map(len, texts)) <= 12_000
    buttons = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert parse_button(buttons[0]["action_id"], buttons[0]["value"]) == Pressed(continuation_id=view.continuation_id, call_id="call_0")
    assert parse_button(buttons[-1]["action_id"], buttons[-1]["value"]) == Pressed(
        continuation_id=view.continuation_id, call_id=None, first=0, count=20
    )
    assert parse_button("relaybot_approve", "not ours") is None


def test_sources_are_numbered_linked_and_escaped() -> None:
    items = (
        SourceItem(title="Runbook <ops>", uri="https://wiki/runbook", text="Restart the  worker " * 30),
        SourceItem(title="notes.md", uri="docs/notes.md", text="@channel read me"),
    )
    [text] = sources_messages((Citation(number=2, item=items[0]), Citation(number=5, item=items[1])))
    lines = text.splitlines()
    assert lines[0] == "*Sources*"
    assert lines[1].startswith("2. <https://wiki/runbook|Runbook &lt;ops&gt;> — _Restart the worker")
    assert lines[2].startswith("5. *notes.md*") and "@channel" not in lines[2]
    assert sources_messages(()) == []


def test_a_file_source_without_a_link_base_is_a_plain_title_not_a_broken_link() -> None:
    item = SourceItem(title="Setup", uri="file:///srv/docs/setup.md", text="")
    [text] = sources_messages((Citation(number=1, item=item),))
    assert text.splitlines()[1] == "1. *Setup*" and "file://" not in text


def test_a_source_uri_cannot_smuggle_a_mass_ping_into_the_link() -> None:
    # Slack reads `<!here|label>` inside the link as a mention of everyone here.
    item = SourceItem(title="Runbook", uri="https://docs.example/<!here", text="steps")
    [text] = sources_messages((Citation(number=1, item=item),))
    assert "<!" not in text and "Runbook" in text


def test_approval_blocks_count_escaped_characters_against_the_total() -> None:
    # Escaping grows `<` fourfold: the argument room must be spent on the escaped text.
    calls = tuple(CallView(call_id=f"call_{n}", tool="send_html", arguments={"html": "<p>" * 2000})
                  for n in range(6))
    view = ApprovalView(continuation_id="0" * 8 + "-0000-0000-0000-" + "0" * 12, requested_by="U1", calls=calls, expires_at=0.0)
    blocks = approval_blocks(view)
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    texts += [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]
    assert all(len(t) <= 3000 for t in texts) and sum(map(len, texts)) <= 12_000
    assert all(t.count("```") % 2 == 0 for t in texts)


def test_approval_arguments_keep_the_models_key_order() -> None:
    call = CallView(call_id="c", tool="deploy", arguments={"zone": "eu", "target": "PRODUCTION", "after": "now"})
    view = ApprovalView(continuation_id="0" * 8 + "-0000-0000-0000-" + "0" * 12, requested_by="U1", calls=(call,),
                        expires_at=0.0)
    text = next(b["text"]["text"] for b in approval_blocks(view) if b.get("block_id") == "relaybot_call_0")
    assert text.index("zone") < text.index("target") < text.index("after")


CONTINUATION = "0" * 8 + "-0000-0000-0000-" + "0" * 12


def _texts(blocks: list[dict]) -> str:  # type: ignore[type-arg]
    return json.dumps(blocks, ensure_ascii=False)


def _buttons(blocks: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    found = [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
    return found + [b["accessory"] for b in blocks if "accessory" in b]


def test_a_long_first_argument_leaves_every_later_key_in_view() -> None:
    call = CallView(call_id="c", tool="deploy", arguments={"notes": "n" * 9000, "target": "PRODUCTION", "force": True})
    view = ApprovalView(continuation_id=CONTINUATION, requested_by="U1", calls=(call,), expires_at=0.0)
    blocks = approval_blocks(view)
    [section] = [b for b in blocks if b.get("block_id") == "relaybot_call_0"]
    text = section["text"]["text"]
    assert '"target": "PRODUCTION"' in text and '"force": true' in text
    assert text.index("notes") < text.index("target") < text.index("force")
    # The cut says so, and the whole arguments are one click away.
    assert shared_wording.arguments_cut().replace("“", "") .split(";")[0] in text
    assert section["accessory"]["action_id"] == ACTION_ARGUMENTS
    assert parse_button(ACTION_ARGUMENTS, section["accessory"]["value"]) == Pressed(continuation_id=CONTINUATION, call_id="c")


def test_arguments_that_fit_are_shown_whole_without_a_cut_note() -> None:
    call = CallView(call_id="c", tool="deploy", arguments={"env": "prod"})
    view = ApprovalView(continuation_id=CONTINUATION, requested_by="U1", calls=(call,), expires_at=0.0)
    blocks = approval_blocks(view)
    assert "accessory" not in blocks[1] and "✂️" not in _texts(blocks)
    assert shown_arguments({"env": "prod"}, 100) == ('{\n  "env": "prod"\n}', False)


def test_cut_arguments_stay_within_their_room_and_never_split_an_escape() -> None:
    arguments = {"html": "<p>" * 400, "a": "&" * 300, "target": "PRODUCTION", "nested": {"k": ["<x>"] * 50}}
    for room in (120, 200, 450, 2400):
        text, cut = shown_arguments(arguments, room)
        assert cut and len(text) <= room, (room, len(text))
        assert "target" in text and "nested" in text
        assert not re.search(r"&(?!amp;|lt;|gt;)", text), text
    many = {f"key{n}": "v" * 50 for n in range(100)}
    text, cut = shown_arguments(many, 300)
    assert cut and len(text) <= 300 and text.index("key0") < text.index("key1") and "…" in text


def _view(count: int, *, description: str = "", arguments: dict | None = None) -> ApprovalView:  # type: ignore[type-arg]
    calls = tuple(CallView(call_id=f"call_{n}", tool="deploy_service_to_an_environment", description=description,
                           arguments=arguments if arguments is not None else {"env": f"env{n}"}) for n in range(count))
    return ApprovalView(continuation_id=CONTINUATION, requested_by="U1", calls=calls, expires_at=0.0)


def test_many_calls_are_shown_in_several_messages_each_approving_only_its_own() -> None:
    view = _view(45)
    assert page_starts(view) == [0, 20, 40]
    first, second, last = (approval_blocks(view, first=start) for start in page_starts(view))
    assert "…and 25 more calls in the next 2 messages" in _texts(first)
    assert "calls 41–45 of 45" in _texts(last) and "more calls" not in _texts(last)
    for blocks, start, count in ((first, 0, 20), (second, 20, 20), (last, 40, 5)):
        shown = [b["block_id"] for b in blocks if b.get("block_id", "").startswith("relaybot_call_")]
        assert shown == [f"relaybot_call_{n}" for n in range(start, start + count)]
        [approve_all] = [b for b in _buttons(blocks) if b["action_id"] == "relaybot_approve_all"]
        assert approve_all["text"]["text"] == f"Approve all (these {count})"
        assert parse_button("relaybot_approve_all", approve_all["value"]) == Pressed(
            continuation_id=CONTINUATION, call_id=None, first=start, count=count
        )
        assert len(approve_all["value"]) <= 2000
    assert page_of(view, "call_0") == 0 and page_of(view, "call_27") == 20 and page_of(view, "call_44") == 40
    # A single message keeps the plain labels.
    single = approval_blocks(_view(3))
    assert [b["text"]["text"] for b in _buttons(single) if b["action_id"].endswith("_all")] == ["Approve all", "Reject all"]


def test_a_bare_all_value_from_older_messages_covers_what_they_showed() -> None:
    assert parse_button("relaybot_approve_all", f"{CONTINUATION}|*") == Pressed(
        continuation_id=CONTINUATION, call_id=None, first=0, count=20
    )
    assert parse_button("relaybot_approve_all", f"{CONTINUATION}|call_1") is None


def test_every_approval_message_is_one_slack_accepts_at_the_worst() -> None:
    # Longest descriptions, arguments cut everywhere, decisions shown: Slack's own checks pass.
    from core.approvals import DecisionView
    from tests.emulators.slack.validation import check_blocks

    view = _view(45, description="d" * 500, arguments={"html": "<&>" * 3000, "target": "PRODUCTION"})
    decided = ApprovalView(
        continuation_id=view.continuation_id, requested_by="U1", calls=view.calls, expires_at=0.0,
        decisions={f"call_{n}": DecisionView(approved=n % 2 == 0, actor="<@U0123456789>") for n in range(0, 45, 3)},
    )
    for each in (view, decided, decided.expired()):
        for start in page_starts(each):
            blocks = approval_blocks(each, first=start)
            assert check_blocks(blocks) is None, start
            assert all(b.get("accessory") for b in blocks if b.get("block_id", "").startswith("relaybot_call_"))


def test_full_arguments_are_split_into_code_blocks_that_fit() -> None:
    text = json.dumps({"script": "\n".join(f"echo line {n} <@U1> @channel ```" for n in range(400)),
                       "one_long_line": "&" * 9000}, indent=2)
    parts = code_messages(text, max_chars=3800)
    assert len(parts) > 2 and all(len(p) <= 3800 for p in parts)
    assert all(p.startswith("```\n") and p.endswith("\n```") and p.count("```") == 2 for p in parts)
    joined = "".join(p[4:-4] for p in parts)
    assert "<@U1>" not in joined and "@channel" not in joined
    unescaped = joined.replace("\n", "").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert unescaped.replace("\u200b", "") == text.replace("\n", "").replace("```", "ˋˋˋ")
