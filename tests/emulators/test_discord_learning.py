"""The Discord emulator's parts learning uses, against the real discord.py client: history paging and limits, active
and archived threads, permission overwrites, the Message Content intent, and the edit/delete/rename/thread/member events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone

import discord
import pytest

from tests.emulators.discord import DiscordEmulator, point_discord_py_at
from tests.emulators.test_discord_emulator import new_client, running

DAY_S = 86_400.0
VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16


@asynccontextmanager
async def rest(dc: DiscordEmulator) -> AsyncIterator[discord.http.HTTPClient]:
    """discord.py's own HTTP client, logged in as the bot (no gateway)."""
    with point_discord_py_at(dc):
        http = discord.http.HTTPClient(asyncio.get_running_loop())
        await http.static_login(dc.token)
        try:
            yield http
        finally:
            await http.close()


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat()


async def test_history_pages_with_before_and_after_at_most_100_newest_first() -> None:
    async with DiscordEmulator() as dc:
        guild = dc.add_guild("g")
        channel = dc.add_channel(guild, "incidents")
        ana = dc.add_user("ana")
        start = time.time() - 30 * DAY_S
        ids = [dc.post_at(channel, ana, f"m{i}", at=start + i * 60) for i in range(150)]
        async with rest(dc) as http:
            first = await http.logs_from(channel, 100)
            assert [int(m["id"]) for m in first] == ids[::-1][:100]
            second = await http.logs_from(channel, 100, before=int(first[-1]["id"]))
            assert [int(m["id"]) for m in second] == ids[:50][::-1]
            after = await http.logs_from(channel, 100, after=0)
            # `after`: the oldest 100 after it, still newest first (as Discord answers).
            assert [int(m["id"]) for m in after] == ids[:100][::-1]
            assert after[0]["timestamp"] == iso(start + 99 * 60)
            with pytest.raises(discord.HTTPException) as refused:
                await http.logs_from(channel, 101)
            assert refused.value.status == 400


async def test_threads_active_per_guild_and_archived_paged_by_before_with_has_more() -> None:
    async with DiscordEmulator() as dc:
        guild = dc.add_guild("g")
        channel = dc.add_channel(guild, "incidents")
        other = dc.add_channel(guild, "random")
        ana = dc.add_user("ana")
        now = time.time()
        root = dc.post_at(channel, ana, "root", at=now - 10 * DAY_S)
        active = dc.thread_at(root, "still going", by=ana, at=now - 10 * DAY_S)
        dc.post_at(active, ana, "a reply", at=now - 9 * DAY_S)
        elsewhere = dc.thread_without_message_at(other, "elsewhere", by=ana, at=now - DAY_S)
        archived = [dc.thread_without_message_at(channel, f"old {i}", by=ana, at=now - 20 * DAY_S,
                                                 archived_at=now - (i + 2) * DAY_S) for i in range(3)]
        private = dc.thread_without_message_at(channel, "secret", by=ana, at=now - 5 * DAY_S, private=True,
                                               archived_at=now - DAY_S)
        async with rest(dc) as http:
            listed = await http.get_active_threads(guild)
            assert {int(t["id"]) for t in listed["threads"]} == {active, elsewhere}
            mine = next(t for t in listed["threads"] if int(t["id"]) == active)
            assert mine["message_count"] == 1 and int(mine["parent_id"]) == channel
            page = await http.get_public_archived_threads(channel, limit=2)
            assert [int(t["id"]) for t in page["threads"]] == archived[:2] and page["has_more"]
            before = page["threads"][-1]["thread_metadata"]["archive_timestamp"]
            rest_page = await http.get_public_archived_threads(channel, before, limit=2)
            assert [int(t["id"]) for t in rest_page["threads"]] == archived[2:] and not rest_page["has_more"]
            assert rest_page["threads"][0]["thread_metadata"]["archived"] is True
            hidden = await http.get_private_archived_threads(channel, limit=50)
            assert [int(t["id"]) for t in hidden["threads"]] == [private]
            starter = await http.get_message(channel, root)
            assert int(starter["thread"]["id"]) == active and starter["thread"]["message_count"] == 1


async def test_the_private_archived_list_needs_manage_threads() -> None:
    async with DiscordEmulator() as dc:
        owner = dc.add_user("owner")
        guild = dc.add_guild("g", owner_id=owner)
        channel = dc.add_channel(guild, "incidents")
        async with rest(dc) as http:
            assert (await http.get_public_archived_threads(channel, limit=50))["threads"] == []
            with pytest.raises(discord.Forbidden):
                await http.get_private_archived_threads(channel, limit=50)


async def test_overwrites_reach_permissions_for_and_the_emulators_own_rule() -> None:
    async with DiscordEmulator() as dc:
        owner = dc.add_user("owner")
        guild = dc.add_guild("g", owner_id=owner)
        ops = dc.add_role(guild, "ops")
        ana, bob = dc.add_user("ana", roles=[ops]), dc.add_user("bob")
        public = dc.add_channel(guild, "general")
        private = dc.add_channel(guild, "ops-only")
        dc.world.channels[private].overwrites = [
            {"id": str(guild), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)},
            {"id": str(ops), "type": 0, "allow": str(VIEW_CHANNEL), "deny": "0"},
            {"id": str(dc.bot_user_id), "type": 1, "allow": str(VIEW_CHANNEL), "deny": "0"},
        ]
        async with running(dc, new_client(members=True)) as client:
            cached = client.get_guild(guild)
            assert cached is not None
            where = cached.get_channel(private)
            assert where is not None
            assert not where.permissions_for(cached.default_role).view_channel
            assert cached.get_channel(public).permissions_for(cached.default_role).view_channel  # type: ignore[union-attr]
            for user, sees in ((ana, True), (bob, False)):
                member = cached.get_member(user)
                assert member is not None and where.permissions_for(member).view_channel is sees
                assert bool(dc.world.channel_permissions(guild, private, user) & VIEW_CHANNEL) is sees
            await dc.set_overwrite(private, dc.bot_user_id, allow=VIEW_CHANNEL, deny=READ_MESSAGE_HISTORY, member=True)
            async with rest(dc) as http:
                assert await http.logs_from(private, 50) == []  # no Read Message History: no messages


async def test_without_the_portals_message_content_intent_history_text_is_blank_and_identify_refused() -> None:
    async with DiscordEmulator() as dc:
        guild = dc.add_guild("g")
        channel = dc.add_channel(guild, "incidents")
        ana = dc.add_user("ana")
        plain = dc.post_at(channel, ana, "the database is down", at=time.time() - 60)
        mention = dc.post_at(channel, ana, f"<@{dc.bot_user_id}> help", at=time.time() - 30)
        dc.set_message_content_intent(False)
        async with rest(dc) as http:
            by_id = {int(m["id"]): m["content"] for m in await http.logs_from(channel, 50)}
            assert by_id == {plain: "", mention: f"<@{dc.bot_user_id}> help"}
            assert (await http.application_info())["flags"] == 0
        refused = new_client(message_content=True)
        with point_discord_py_at(dc), pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(refused.start(dc.token), 5.0)
        await refused.close()
        dc.set_message_content_intent(True)
        async with rest(dc) as http:
            assert {m["content"] for m in await http.logs_from(channel, 50)} >= {"the database is down"}
            assert (await http.application_info())["flags"] & (1 << 19)  # GATEWAY_MESSAGE_CONTENT_LIMITED


async def test_edits_deletes_renames_and_thread_deletes_reach_the_gateway() -> None:
    async with DiscordEmulator() as dc:
        guild = dc.add_guild("g")
        channel = dc.add_channel(guild, "incidents")
        ana = dc.add_user("ana")
        seen: list[tuple[str, object]] = []
        client = new_client(message_content=True)

        async def on_raw_message_edit(p: discord.RawMessageUpdateEvent) -> None:
            seen.append(("edit", p.message.content))

        async def on_raw_message_delete(p: discord.RawMessageDeleteEvent) -> None:
            seen.append(("delete", p.message_id))

        async def on_raw_bulk_message_delete(p: discord.RawBulkMessageDeleteEvent) -> None:
            seen.append(("bulk", sorted(p.message_ids)))

        async def on_guild_channel_update(before: discord.abc.GuildChannel, after: discord.abc.GuildChannel) -> None:
            # `after` is the cached channel, which the next update may have changed by now: only `before` is a copy.
            seen.append(("update", (before.name, len(before.overwrites))))

        async def on_raw_thread_delete(p: discord.RawThreadDeleteEvent) -> None:
            seen.append(("thread", (p.thread_id, p.parent_id)))

        async def on_guild_channel_delete(c: discord.abc.GuildChannel) -> None:
            seen.append(("channel", c.id))

        for handler in (on_raw_message_edit, on_raw_message_delete, on_raw_bulk_message_delete,
                        on_guild_channel_update, on_raw_thread_delete, on_guild_channel_delete):
            setattr(client, handler.__name__, handler)
        async with running(dc, client):
            first = await dc.send_user_message(channel, ana, "first")
            more = [await dc.send_user_message(channel, ana, f"m{i}") for i in range(2)]
            thread = await dc.start_thread(first, "talk", by=ana)
            await dc.edit_user_message(first, "first, edited")
            await dc.delete_user_message(more[0])
            await dc.bulk_delete(channel, more)
            await dc.rename_channel(channel, "incidents-2026")
            await dc.set_overwrite(channel, guild, deny=VIEW_CHANNEL)
            await dc.delete_thread(thread)
            await dc.delete_channel(channel)
            await dc.wait_for(lambda: len(seen) >= 7, what="the events")
        assert seen == [
            ("edit", "first, edited"), ("delete", more[0]), ("bulk", sorted(more)),
            ("update", ("incidents", 0)), ("update", ("incidents-2026", 0)),
            ("thread", (thread, channel)), ("channel", channel),
        ]


async def test_member_updates_go_only_to_sessions_with_the_server_members_intent() -> None:
    async with DiscordEmulator() as dc:
        guild = dc.add_guild("g")
        ops = dc.add_role(guild, "ops")
        ana = dc.add_user("ana")
        updates: list[list[int]] = []
        with_members, without = new_client(members=True), new_client()

        async def on_member_update(before: discord.Member, after: discord.Member) -> None:
            updates.append([role.id for role in after.roles if not role.is_default()])

        with_members.on_member_update = on_member_update  # type: ignore[attr-defined]
        without.on_member_update = on_member_update  # type: ignore[attr-defined]
        async with running(dc, with_members), running(dc, without):
            await dc.set_member_roles(guild, ana, [ops])
            await dc.wait_for(lambda: updates, what="the member update")
            await asyncio.sleep(0.2)  # a second one would come from the session without the intent
        assert updates == [[ops]]
