-- What each live process serves (platform budgets: 'slack:T123', 'discord:<bot>') and the share of each it uses,
-- so every process sizes its budgets from the others' heartbeats; and the limits one process learnt from 429s,
-- for all of them.
ALTER TABLE process_heartbeats ADD COLUMN shares jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE TABLE learned_limits (
    scope       text PRIMARY KEY,
    per_s       double precision NOT NULL CHECK (per_s > 0),
    learned_by  text NOT NULL,
    learned_at  timestamptz NOT NULL DEFAULT now()
);
