-- How much of each budget's work a live process has (a Discord bot's guilds on the shards it runs), beside its
-- share: a budget is split in proportion to the weights (1 where none is given), so a shard with more guilds gets more
-- of the bot-wide budget.
ALTER TABLE process_heartbeats ADD COLUMN weights jsonb NOT NULL DEFAULT '{}'::jsonb;
