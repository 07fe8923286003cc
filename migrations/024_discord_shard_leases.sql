-- Discord shards claimed by lease (adapters/discord/shards.py): each process of a bot is a member with the shard
-- count it runs with (one that holds no shard stands by, still counted; `fixed`: DISCORD_SHARD_IDS names its shards,
-- so it takes no others), and each shard is leased to one member.
-- Both live only as long as their owner's heartbeat (process_heartbeats): a dead process's shards are free.
CREATE TABLE discord_shard_members (
    bot_id      text NOT NULL,
    owner       text NOT NULL,
    shard_count integer NOT NULL CHECK (shard_count > 0),
    fixed       boolean NOT NULL DEFAULT false,
    joined_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bot_id, owner)
);

CREATE TABLE discord_shard_leases (
    bot_id      text NOT NULL,
    shard_id    integer NOT NULL CHECK (shard_id >= 0),
    shard_count integer NOT NULL CHECK (shard_count > 0),
    owner       text NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bot_id, shard_id)
);
