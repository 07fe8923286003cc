-- Tokens the model reported, one row per turn (a turn paused for approval adds its resumed part):
-- what `relaybot usage` reports, by channel, user or day.
CREATE TABLE token_usage (
    turn_id           text PRIMARY KEY,
    platform          text NOT NULL,
    workspace         text NOT NULL,
    channel           text NOT NULL,
    user_id           text NOT NULL,
    model             text NOT NULL,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX token_usage_created_idx ON token_usage (created_at);
