-- Small facts a process remembers across restarts (e.g. the hash of the Discord commands last synced).
CREATE TABLE app_state (
    key         text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
