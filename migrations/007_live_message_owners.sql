-- Each live answer record names the process that streams it; each process writes a heartbeat.
-- A record whose owner's heartbeat is stale (or missing: rows from before this migration have no
-- owner) is an orphan, repaired by exactly one other process.
ALTER TABLE live_messages ADD COLUMN owner text NOT NULL DEFAULT '';

CREATE TABLE process_heartbeats (
    owner    text PRIMARY KEY,
    seen_at  timestamptz NOT NULL DEFAULT now()
);
