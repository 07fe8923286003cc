-- Final answer texts not yet delivered (a platform said "later", or the process stopped first):
-- kept here until this or another process delivers them, after a restart too.
CREATE TABLE pending_finals (
    answer_id   text PRIMARY KEY,
    platform    text NOT NULL,
    workspace   text NOT NULL,
    channel     text NOT NULL,
    thread      text NOT NULL DEFAULT '',
    parts       jsonb NOT NULL,          -- [{"text": ..., "message_id": ... or null}, ...] in order
    owner       text NOT NULL DEFAULT '', -- the process delivering it; '' = anyone may
    attempts    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pending_finals_platform_idx ON pending_finals (platform, updated_at);
