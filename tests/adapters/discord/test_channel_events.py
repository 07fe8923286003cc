"""Discord's live events reach learning as ChannelChanges, in order, off the answer path: every guild message (not
only mentions), a thread's reply under its channel, edits, deletes (one, in bulk, a thread), renames, the bot losing
View Channel, a channel deleted, the guild removing the bot; never a DM's or a private thread's."""

from __future__ import annotations

import time

from core.learning.model import ChannelChange, ChannelPlace
from core.store.db import Database
from tests.adapters.discord.test_channel_history import VIEW_CHANNEL, RecordedLearning, learning_bot
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai_server import OpenAIEmulator


def summary(changes: list[ChannelChange]) -> list[tuple[str, str, str]]:
    """(kind, channel, what): the message's text, the deleted id, the new name."""
    return [(c.kind, c.place.channel, c.message.text if c.message else c.message_id or c.name) for c in changes]


async def test_messages_edits_deletes_renames_and_threads_become_changes_of_their_channel(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    channel = dc.add_channel(guild, "incidents")
    ana = dc.add_user("ana")
    learning = RecordedLearning()
    async with learning_bot(dc, db, openai_emulator, learning=learning) as adapter:
        first = await dc.send_user_message(channel, ana, "the database is down")
        thread = await dc.start_thread(first, "outage", by=ana)
        await dc.wait_for(lambda: adapter.client.get_guild(guild).get_thread(thread), what="the thread")  # type: ignore[union-attr]
        reply = await dc.send_user_message(thread, ana, "back up at 14:05")
        await dc.edit_user_message(first, "the database was down")
        doomed = [await dc.send_user_message(channel, ana, f"noise {i}") for i in range(2)]
        await dc.delete_user_message(reply)
        await dc.bulk_delete(channel, doomed)
        await dc.rename_channel(channel, "incidents-2026")
        await dc.wait_for(lambda: any(c.kind == "renamed" for c in learning.changes), what="the rename")
        await dc.delete_thread(thread)
        await dc.wait_for(lambda: len(learning.changes) >= 10, what="the thread's delete")
        await dc.set_overwrite(channel, guild, deny=VIEW_CHANNEL)  # @everyone, the bot with it, loses the channel
        await dc.wait_for(lambda: any(c.kind == "left" for c in learning.changes), what="the changes")
        await adapter._learning.events.feed.drained()
    c = str(channel)
    assert summary(learning.changes) == [
        ("message", c, "the database is down"), ("message", c, "back up at 14:05"),
        ("message", c, "the database was down"), ("message", c, "noise 0"), ("message", c, "noise 1"),
        ("deleted", c, str(reply)), ("deleted", c, str(doomed[0])), ("deleted", c, str(doomed[1])),
        ("renamed", c, "incidents-2026"), ("deleted", c, str(thread)), ("left", c, ""),
    ]
    assert [c.thread_gone for c in learning.changes] == [False] * 9 + [True, False]  # the thread's delete: all of it
    in_thread = learning.changes[1].message
    assert in_thread is not None and in_thread.thread == str(thread) and in_thread.author_name == "ana"
    assert in_thread.permalink == f"https://discord.com/channels/{guild}/{thread}/{reply}"
    assert all(change.place == ChannelPlace(platform="discord", workspace=str(guild), channel=c)
               for change in learning.changes)


async def test_a_deleted_channel_and_a_removed_guild_are_left_and_dms_and_private_threads_never_taken(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel, other = dc.add_channel(guild, "incidents"), dc.add_channel(guild, "random")
    ana = dc.add_user("ana")
    secret = dc.thread_without_message_at(channel, "secret", by=ana, at=time.time(), private=True)
    learning = RecordedLearning()
    async with learning_bot(dc, db, openai_emulator, learning=learning) as adapter:
        await dc.send_dm(ana, "hello in private")
        await dc.send_user_message(secret, ana, "only thread members see this")
        await dc.send_user_message(other, ana, "a word in #random")
        await dc.delete_channel(channel)
        await dc.wait_for(lambda: len(learning.changes) >= 2, what="the changes")
        await dc.remove_bot_from_guild(guild)
        await dc.wait_for(lambda: len(learning.changes) >= 3, what="the removal")
        await adapter._learning.events.feed.drained()
    assert summary(learning.changes) == [
        ("message", str(other), "a word in #random"), ("left", str(channel), ""), ("left", str(other), ""),
    ]


async def test_the_answer_path_goes_on_when_learning_fails(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    from tests.emulators.openai_server import Text

    class Failing(RecordedLearning):
        async def take(self, change: ChannelChange) -> None:
            await super().take(change)
            raise RuntimeError("the index is down")

    dc = discord_emulator
    guild = dc.add_guild("g")
    channel = dc.add_channel(guild, "incidents")
    ana = dc.add_user("ana")
    learning = Failing()
    openai_emulator.script(Text("Restart the primary."))
    async with learning_bot(dc, db, openai_emulator, learning=learning):
        question = await dc.send_user_message(channel, ana, "what now?", mentions_bot=True)
        await dc.send_user_message(channel, ana, "and then?")
        answered = await dc.wait_for(lambda: dc.thread_of(question) and [
            m for m in dc.messages(question) if m.content == "Restart the primary."], what="the answer")
        assert answered
        await dc.send_webhook_message(channel, "CI", "build failed")  # a webhook's: not offered either
        await dc.send_user_message(channel, ana, "last one")
        await dc.wait_for(lambda: len(learning.changes) >= 3, what="every change offered, one failing after another")
    # The bot's own answer (posted, then edited as it streams) is never offered: it is never learned from.
    assert [c.message.text for c in learning.changes if c.message] == [
        f"<@{dc.bot_user_id}> what now?", "and then?", "last one"]


async def test_an_edit_and_a_delete_in_an_archived_thread_out_of_the_cache_are_looked_up_to_their_channel(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    guild = dc.add_guild("g")
    channel = dc.add_channel(guild, "incidents")
    ana = dc.add_user("ana")
    now = time.time()
    old = dc.thread_without_message_at(channel, "old talk", by=ana, at=now - 9_000, archived_at=now - 8_000)
    secret = dc.thread_without_message_at(channel, "secret", by=ana, at=now - 9_000, private=True, archived_at=now - 8_000)
    reply = dc.post_at(old, ana, "the fix was a restart", at=now - 8_500)
    hidden = dc.post_at(secret, ana, "only its members", at=now - 8_500)
    learning = RecordedLearning()
    async with learning_bot(dc, db, openai_emulator, learning=learning) as adapter:
        assert adapter.client.get_guild(guild).get_thread(old) is None  # type: ignore[union-attr]
        await dc.edit_user_message(reply, "the fix was a restart of the primary")
        await dc.delete_user_message(hidden)
        await dc.delete_user_message(reply)
        await dc.wait_for(lambda: len(learning.changes) >= 2, what="the changes")
        await adapter._learning.events.feed.drained()
    assert summary(learning.changes) == [
        ("message", str(channel), "the fix was a restart of the primary"), ("deleted", str(channel), str(reply))]
    assert learning.changes[0].message is not None and learning.changes[0].message.thread == str(old)
    assert len(dc.requests_to("get_channel")) == 2  # each thread looked up once, then known


async def test_a_role_change_that_takes_view_channel_from_the_bot_leaves_its_channels_once(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    incidents, random = dc.add_channel(guild, "incidents"), dc.add_channel(guild, "random")
    everyone = dc.world.roles[guild].permissions
    learning = RecordedLearning()
    async with learning_bot(dc, db, openai_emulator, learning=learning) as adapter:
        await dc.set_role_permissions(guild, everyone & ~VIEW_CHANNEL)  # the bot has no role but @everyone
        await dc.wait_for(lambda: len(learning.changes) >= 2, what="the channels left")
        await dc.set_role_permissions(guild, everyone & ~VIEW_CHANNEL & ~(1 << 6))  # another change: no new left
        await dc.set_role_permissions(guild, everyone)
        await dc.wait_for(lambda: adapter.client.get_guild(guild).default_role.permissions.view_channel,  # type: ignore[union-attr]
                          what="the role back")
        await adapter._learning.events.feed.drained()
    assert sorted(summary(learning.changes)) == [("left", str(incidents), ""), ("left", str(random), "")]


async def test_the_bot_losing_the_role_that_let_it_view_a_channel_leaves_it(
    discord_emulator: DiscordEmulator, db: Database, openai_emulator: OpenAIEmulator
) -> None:
    dc = discord_emulator
    owner = dc.add_user("owner")
    guild = dc.add_guild("g", owner_id=owner)
    staff = dc.add_role(guild, "staff", permissions=VIEW_CHANNEL)
    ops = dc.add_channel(guild, "ops")
    general = dc.add_channel(guild, "general")
    dc.world.channels[ops].overwrites = [
        {"id": str(guild), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)},
        {"id": str(staff), "type": 0, "allow": str(VIEW_CHANNEL), "deny": "0"},
    ]
    dc.grant_role(dc.bot_user_id, staff)
    learning = RecordedLearning()
    async with learning_bot(dc, db, openai_emulator, learning=learning) as adapter:
        await dc.set_member_roles(guild, dc.bot_user_id, [])  # Discord tells the bot of its own, intent or not
        await dc.wait_for(lambda: learning.changes, what="the channel left")
        await adapter._learning.events.feed.drained()
    assert summary(learning.changes) == [("left", str(ops), "")]
    assert str(general) not in {c.place.channel for c in learning.changes}


def test_a_question_to_the_bot_is_marked_never_learned_and_a_mention_of_someone_else_is_not() -> None:
    from adapters.discord.learning_messages import from_json

    def message(mentioned: str) -> dict[str, object]:
        return {"id": "1577561517488865305", "content": f"<@{mentioned}> what broke?",
                "timestamp": "2026-12-02T05:00:00+00:00", "author": {"id": "42", "username": "ana"},
                "mentions": [{"id": mentioned, "username": "x"}]}

    asked = from_json(message("7"), guild="1", channel="2", me="7")
    told = from_json(message("43"), guild="1", channel="2", me="7")
    assert (asked.to_bot, asked.never_learned, told.to_bot, told.never_learned) == (True, True, False, False)
