"""Markdown → mrkdwn, ping neutralising, and the size bounds of approval and sources messages."""

from __future__ import annotations

from adapters.slack.buttons import approval_blocks, parse_button_value
from adapters.slack.render import MAX_MESSAGE_TEXT_CHARS, message_text, sources_messages, to_mrkdwn
from core.approvals import ApprovalView, CallView
from core.events import SourceItem


def test_markdown_becomes_mrkdwn() -> None:
    source = "# Plan\n**bold** and *it* ~~old~~ [docs](https://x.io/a?b=1&c=2)\n- one\n  * two\n> note"
    assert to_mrkdwn(source) == (
        "*Plan*\n*bold* and _it_ ~old~ <https://x.io/a?b=1&amp;c=2|docs>\n• one\n  • two\n> note"
    )


def test_code_is_kept_verbatim_but_escaped() -> None:
    rendered = to_mrkdwn("run:\n```python\nif a < b and **x**:\n```\nthen `<b>`")
    assert rendered == "run:\n```\nif a &lt; b and **x**:\n```\nthen `&lt;b&gt;`"


def test_mass_pings_are_neutralised_everywhere() -> None:
    rendered = to_mrkdwn("<!channel> <!here|here> <!everyone> @channel @Here `@everyone` <@U123>")
    for ping in ("<!channel>", "<!here", "<!everyone>", "@channel", "@Here", "@everyone", "<@U123>"):
        assert ping not in rendered
    assert "@\u200bchannel" in rendered


def test_message_text_never_exceeds_the_edit_limit() -> None:
    assert len(message_text("&" * 3900)) <= MAX_MESSAGE_TEXT_CHARS


def test_approval_blocks_stay_within_slack_limits_for_many_large_calls() -> None:
    calls = tuple(CallView(call_id=f"call_{n}", tool="deploy", arguments={"blob": "x" * 5000})
                  for n in range(40))
    view = ApprovalView(continuation_id="0" * 8 + "-0000-0000-0000-" + "0" * 12, requested_by="U1", calls=calls, expires_at=0.0)
    blocks = approval_blocks(view)
    assert len(blocks) <= 50
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    texts += [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]
    assert all(len(t) <= 3000 for t in texts) and sum(map(len, texts)) <= 12_000
    values = [e["value"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert parse_button_value(values[0]) == (view.continuation_id, "call_0")
    assert parse_button_value(values[-1]) == (view.continuation_id, None)
    assert parse_button_value("not ours") is None


def test_sources_are_numbered_linked_and_escaped() -> None:
    items = (
        SourceItem(title="Runbook <ops>", uri="https://wiki/runbook", text="Restart the  worker " * 30),
        SourceItem(title="notes.md", uri="docs/notes.md", text="@channel read me"),
    )
    [text] = sources_messages(items)
    lines = text.splitlines()
    assert lines[0] == "*Sources*"
    assert lines[1].startswith("1. <https://wiki/runbook|Runbook &lt;ops&gt;> — _Restart the worker")
    assert lines[2].startswith("2. *notes.md*") and "@channel" not in lines[2]
    assert sources_messages(()) == []


def test_a_source_uri_cannot_smuggle_a_mass_ping_into_the_link() -> None:
    # Slack reads `<!here|label>` inside the link as a mention of everyone here.
    item = SourceItem(title="Runbook", uri="https://docs.example/<!here", text="steps")
    [text] = sources_messages((item,))
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
