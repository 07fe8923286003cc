"""Discord's install link: the permissions asked for are exactly the listed needs, each with a reason, and the docs
name every one of them (no integer to keep in step by hand)."""

from __future__ import annotations

from pathlib import Path

import discord

from adapters.discord.install import INSTALL_SCOPES, NEEDS, install_link, missing_permissions, needed_permissions

ROOT = Path(__file__).resolve().parents[3]


def test_every_need_is_a_real_permission_flag_with_a_reason_and_the_link_asks_for_exactly_them() -> None:
    assert len({need.flag for need in NEEDS}) == len(NEEDS)
    assert all(need.flag in discord.Permissions.VALID_FLAGS and need.why for need in NEEDS)
    link = install_link(42)
    assert link == (f"https://discord.com/oauth2/authorize?client_id=42&scope={'+'.join(INSTALL_SCOPES)}"
                    f"&permissions={needed_permissions().value}")
    assert INSTALL_SCOPES == ("bot", "applications.commands")


def test_missing_permissions_names_the_needs_a_server_did_not_grant_in_order() -> None:
    assert missing_permissions(needed_permissions()) == []
    assert missing_permissions(discord.Permissions.all()) == []
    granted = discord.Permissions(view_channel=True, send_messages=True, read_message_history=True)
    assert missing_permissions(granted) == [
        "send_messages_in_threads", "create_public_threads", "embed_links", "attach_files", "add_reactions"]


def test_the_discord_docs_name_every_permission_the_link_asks_for_and_no_number() -> None:
    docs = (ROOT / "docs" / "discord.md").read_text(encoding="utf-8").lower()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(need.flag.replace("_", " ") in docs for need in NEEDS), "docs/discord.md names each permission"
    number = str(needed_permissions().value)
    assert number not in docs and number not in readme and "309237763072" not in docs + readme
    assert "relaybot doctor" in readme[readme.index("## Connect Discord"):][:1500]
