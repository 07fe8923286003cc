"""The /relaybot modal as Slack would take it: within Slack's limits, sources offered as options, values too long
for a field left out rather than cut; and its submission read back as the CLI reads values."""

from __future__ import annotations

from adapters.slack.admin import modal, read_form
from core.channel_admin import ChannelView
from core.channels import ChannelSettings, resolve
from core.requests import ConversationKey
from tests.emulators.slack.modals import check_modal
from tests.support.engine import test_settings as make_settings

KEY = ConversationKey(platform="slack", workspace="T1", channel="C1")


def view_of(own: ChannelSettings, sources: tuple[str, ...]) -> ChannelView:
    config = resolve(KEY, channel=own, workspace=None, settings=make_settings("http://127.0.0.1:9/v1"))
    return ChannelView(scope="slack:T1:C1", own=own, config=config, source_names=sources)


def test_the_modal_is_one_slack_accepts() -> None:
    own = ChannelSettings(agent_type="research", sources=("handbook",), followups_need_mention=True,
                          system_prompt="p" * 5000, tool_policy={"read_url": "always"})
    built = modal(view_of(own, ("finance", "handbook")), team="T1", channel="C1")
    assert check_modal(built) is None
    blocks = {b["block_id"]: b for b in built["blocks"] if "block_id" in b}
    assert blocks["agent_type"]["element"]["initial_option"]["value"] == "research"
    assert [o["value"] for o in blocks["sources"]["element"]["initial_options"]] == ["handbook"]
    assert blocks["system_prompt"]["type"] == "section", "too long to edit in a field: left out, not cut"
    assert blocks["followups_need_mention"]["element"]["initial_options"][0]["value"] == "yes"
    assert "approver_roles" not in blocks  # Slack has no roles
    many = modal(view_of(ChannelSettings(), tuple(f"s{n}" for n in range(150))), team="T1", channel="C1")
    assert check_modal(many) is None
    assert [b for b in many["blocks"] if b.get("block_id") == "sources"][0]["element"]["type"] == "plain_text_input"


def test_a_submission_is_read_as_the_cli_reads_values() -> None:
    values = {
        "agent_type": {"value": {"type": "static_select", "selected_option": {"value": "inherit"}}},
        "model": {"value": {"type": "plain_text_input", "value": " gpt-4o "}},
        "tools": {"value": {"type": "plain_text_input", "value": "calculator, read_url"}},
        "followups_need_mention": {"value": {"type": "checkboxes", "selected_options": []}},
        "sources": {"value": {"type": "multi_static_select", "selected_options": []}},
    }
    assert read_form(values) == {"agent_type": None, "model": "gpt-4o", "tools": ["calculator", "read_url"],
                                 "followups_need_mention": False, "sources": None}
